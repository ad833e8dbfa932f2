//! One encoding of each model answer a run's snapshots hold.
//!
//! An answer (one `Arc<LlmResponse>`) is in three or four snapshots of a run: as
//! `pending_llm_response` in its step's mid-step snapshot, as `final_response` in that step's
//! end-of-step snapshot and in the next step's first two. [`ResponseEncodings::scope`] lets the
//! snapshot encodings inside it write an answer's JSON from the bytes of its first encoding
//! instead of encoding it again; outside a scope the fields serialize as plain values.
//!
//! Two answers are kept, the newest used first: a mid-step snapshot holds the step's new answer
//! as pending and the previous step's as final, and the next snapshot holds the new one as
//! final; with one slot those would evict each other and every field would be encoded again.
//!
//! The cache is keyed by the `Arc`'s address and holds a clone of that `Arc`, so the address
//! cannot be reused by another answer while the bytes are kept, and a change made through
//! `Arc::make_mut` (which copies, as the cache's clone shares the value) gets a new address:
//! the bytes always belong to the value being written.

use std::cell::RefCell;
use std::sync::Arc;

use serde::Serializer;
use serde::ser::Error as _;
use serde_json::value::RawValue;

use super::llm::LlmResponse;

/// The answers a run encoded last and their JSON bytes, the most recently used first.
#[derive(Debug, Default)]
pub(crate) struct ResponseEncodings {
    slots: Vec<(Arc<LlmResponse>, Box<RawValue>)>,
}

/// How many answers [`ResponseEncodings`] keeps.
const SLOTS: usize = 2;

thread_local! {
    /// The cache of the encoding running on this thread, if it is inside a scope.
    static ACTIVE: RefCell<Option<ResponseEncodings>> = const { RefCell::new(None) };
}

impl ResponseEncodings {
    /// Run `encode` (one `serde_json` encoding to bytes, nothing else) with this cache in
    /// effect on the calling thread: a shared answer in it is written from cached bytes.
    /// The cache is back in `self` when `encode` returns or unwinds (a scope nested in it
    /// would leave the outer one empty: slower, never wrong).
    pub(crate) fn scope<R>(&mut self, encode: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a mut ResponseEncodings);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                if let Some(cache) = ACTIVE.with(|a| a.borrow_mut().take()) {
                    *self.0 = cache;
                }
            }
        }
        let cache = std::mem::take(self);
        ACTIVE.with(|a| *a.borrow_mut() = Some(cache));
        let _restore = Restore(self);
        encode()
    }
}

/// `serialize_with` of a snapshot's shared answer: inside a [`ResponseEncodings::scope`], its
/// cached bytes (encoded and cached first if the cache holds another answer); outside, the
/// plain value.
pub(crate) fn shared_response<S: Serializer>(
    value: &Option<Arc<LlmResponse>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let Some(response) = value else {
        return s.serialize_none();
    };
    // Taken out of the thread's slot while it is used, put back after.
    let Some(mut slots) = ACTIVE.with(|a| {
        a.borrow_mut()
            .as_mut()
            .map(|c| std::mem::take(&mut c.slots))
    }) else {
        return s.serialize_some(&**response);
    };
    let raw = match slots.iter().position(|(a, _)| Arc::ptr_eq(a, response)) {
        Some(i) => slots.remove(i).1,
        None => serde_json::value::to_raw_value(&**response).map_err(S::Error::custom)?,
    };
    let out = s.serialize_some(&*raw);
    slots.insert(0, (response.clone(), raw));
    slots.truncate(SLOTS);
    ACTIVE.with(|a| {
        if let Some(c) = a.borrow_mut().as_mut() {
            c.slots = slots;
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::RuntimeSnapshot;

    fn answer(text: &str) -> Arc<LlmResponse> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "text": text, "finish_reason": "tool_calls",
                "tool_calls": [{"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": "é\n"}}],
                "usage": {"input_tokens": 3}, "raw": {"kept": [1.5, null]}, "x-extra": true
            }))
            .unwrap(),
        )
    }

    fn encode(snap: &RuntimeSnapshot) -> String {
        serde_json::to_string(snap).unwrap()
    }

    /// Inside a scope a snapshot's bytes are what they are without one, while the answer is
    /// the cached one, after it changed, and after the scope ended.
    #[test]
    fn cached_bytes_are_the_plain_encoding() {
        let mut cache = ResponseEncodings::default();
        let first = answer("one");
        let mut snap = RuntimeSnapshot {
            pending_llm_response: Some(first.clone()),
            final_response: Some(first.clone()),
            ..RuntimeSnapshot::default()
        };
        let plain = encode(&snap);
        assert!(plain.contains(r#""pending_llm_response":{"text":"one""#));
        assert_eq!(cache.scope(|| encode(&snap)), plain);
        assert_eq!(cache.slots.len(), 1);
        assert!(Arc::ptr_eq(&cache.slots[0].0, &first));
        // Again from the cache (the pointer is held: the same answer).
        assert_eq!(cache.scope(|| encode(&snap)), plain);

        // A new answer at one field, none at the other.
        snap.pending_llm_response = None;
        snap.final_response = Some(answer("two"));
        let plain = encode(&snap);
        assert!(plain.contains(r#""pending_llm_response":null"#));
        assert!(plain.contains(r#""final_response":{"text":"two""#));
        assert_eq!(cache.scope(|| encode(&snap)), plain);

        // Changed in place through `make_mut`: the cache's clone makes it a copy.
        let r = snap.final_response.as_mut().unwrap();
        Arc::make_mut(r).text = "three".to_owned();
        let plain = encode(&snap);
        assert!(plain.contains(r#""final_response":{"text":"three""#));
        assert_eq!(cache.scope(|| encode(&snap)), plain);

        // Outside a scope nothing is cached or used.
        assert!(ACTIVE.with(|a| a.borrow().is_none()));
        assert!(!cache.slots.is_empty());
    }

    /// The pattern of a run's steps: the mid-step snapshot holds the new answer as pending and
    /// the previous one as final, the end-of-step snapshot the new one as final. Each answer
    /// is encoded once: its cached bytes (the same allocation) serve every later snapshot.
    #[test]
    fn each_answer_of_a_run_is_encoded_once() {
        let mut cache = ResponseEncodings::default();
        let bytes_of = |cache: &ResponseEncodings, r: &Arc<LlmResponse>| {
            let (_, raw) = cache.slots.iter().find(|(a, _)| Arc::ptr_eq(a, r)).unwrap();
            raw.get().as_ptr()
        };
        let mut snap = RuntimeSnapshot::default();
        let mut previous: Option<(Arc<LlmResponse>, *const u8)> = None;
        for step in 0..4 {
            let new = answer(&format!("step {step}"));
            // Mid-step: pending is the new answer, final the previous one.
            snap.pending_llm_response = Some(new.clone());
            snap.final_response = previous.as_ref().map(|(r, _)| r.clone());
            assert_eq!(cache.scope(|| encode(&snap)), encode(&snap));
            if let Some((r, at)) = &previous {
                assert_eq!(
                    bytes_of(&cache, r),
                    *at,
                    "step {step}: previous answer re-encoded"
                );
            }
            let at = bytes_of(&cache, &new);
            // End of step: final is the new answer, nothing pending.
            snap.pending_llm_response = None;
            snap.final_response = Some(new.clone());
            assert_eq!(cache.scope(|| encode(&snap)), encode(&snap));
            assert_eq!(bytes_of(&cache, &new), at, "step {step}: answer re-encoded");
            assert!(cache.slots.len() <= SLOTS);
            previous = Some((new, at));
        }
    }

    /// A scope that unwinds leaves the thread with no cache in effect and keeps what it had.
    #[test]
    fn a_panicking_encoding_leaves_no_scope_behind() {
        let mut cache = ResponseEncodings::default();
        let snap = RuntimeSnapshot {
            final_response: Some(answer("one")),
            ..RuntimeSnapshot::default()
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.scope(|| {
                encode(&snap);
                panic!("after the encoding");
            })
        }));
        assert!(caught.is_err());
        assert!(ACTIVE.with(|a| a.borrow().is_none()));
        assert!(!cache.slots.is_empty());
    }
}
