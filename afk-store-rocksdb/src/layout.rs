//! Physical key layout: `<thread id> 0x00 <logical key>`.
//!
//! Thread ids are ASCII letters, digits, `_`, `-`, `.`, and logical keys are printable ASCII
//! (`!`..=`~`), so the separator byte 0x00 can appear in neither: one thread's keys are exactly
//! the physical keys starting with `<thread> 0x00`, and `thread_1` never sees `thread_10`'s keys.
//!
//! Keys starting with [`RESERVED`] (0xff, which no thread id starts with) are the store's own,
//! outside every thread: the index of runs that need attention lives there
//! ([`crate::attention`]), and listing threads stops before them.

use afk_core::{Error, Result, RunId, ThreadId};

/// The byte between the thread id and the logical key.
pub(crate) const SEP: u8 = 0x00;

/// The first byte of every key that belongs to no thread: greater than every byte a thread id
/// may hold (ASCII), so these keys sort after every thread's and a thread listing bounded by
/// it never reads them.
pub(crate) const RESERVED: u8 = 0xff;

/// The prefix of the store's own key range `name` (an index): `0xff <name> 0x00`.
pub(crate) fn reserved_prefix(name: &str) -> Vec<u8> {
    let mut p = vec![RESERVED];
    p.extend_from_slice(name.as_bytes());
    p.push(SEP);
    p
}

/// The whole key range `[start, end)` of [`reserved_prefix`]`(name)`.
pub(crate) fn reserved_range(name: &str) -> (Vec<u8>, Vec<u8>) {
    let start = reserved_prefix(name);
    let mut end = start.clone();
    if let Some(last) = end.last_mut() {
        *last += 1; // the separator 0x00 becomes 0x01: past every key of the range
    }
    (start, end)
}

/// The families of per-run keys; with `run:<run>` they are every key of a run.
pub(crate) const RUN_FAMILIES: [&str; 4] = ["checkpoint", "effect", "messages", "bgtool"];

/// The physical key of `(thread, key)`.
pub(crate) fn physical(thread: &ThreadId, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(thread.as_str().len() + 1 + key.len());
    out.extend_from_slice(thread.as_str().as_bytes());
    out.push(SEP);
    out.extend_from_slice(key.as_bytes());
    out
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None`
/// when there is none (the prefix is all 0xff). Used as the exclusive iterator upper bound.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The logical key of a physical key read back from the thread's range.
pub(crate) fn logical(thread: &ThreadId, physical: &[u8]) -> Result<String> {
    let skip = thread.as_str().len() + 1;
    let rest = physical.get(skip..).ok_or_else(|| {
        Error::corrupt(format!(
            "physical key shorter than its thread prefix in thread {thread}"
        ))
    })?;
    String::from_utf8(rest.to_vec()).map_err(|e| {
        Error::corrupt(format!("stored key in thread {thread} is not UTF-8")).with_source(e)
    })
}

/// The logical-key prefixes that together hold every key of `run`, each ending in `:` so that
/// `run_1` does not cover `run_10`; `run:<run>` is an exact key, returned separately.
pub(crate) fn run_prefixes(run: &RunId) -> Vec<String> {
    RUN_FAMILIES.iter().map(|f| format!("{f}:{run}:")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_threads_apart() {
        let t1 = ThreadId::new("thread_1").expect("valid id");
        let t10 = ThreadId::new("thread_10").expect("valid id");
        let p1 = physical(&t1, "");
        let k10 = physical(&t10, "checkpoint:r:latest");
        assert!(!k10.starts_with(&p1));
        assert_eq!(physical(&t1, "a:b"), b"thread_1\0a:b".to_vec());
        assert_eq!(logical(&t1, b"thread_1\0a:b").expect("decodes"), "a:b");
        assert!(logical(&t1, b"thread_1\0\xff").is_err());
    }

    #[test]
    fn prefix_end_is_the_exclusive_bound() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b"t\0"), Some(b"t\x01".to_vec()));
    }

    #[test]
    fn run_prefixes_end_with_colon() {
        let run = RunId::new("run_1").expect("valid id");
        for p in run_prefixes(&run) {
            assert!(p.ends_with("run_1:"), "{p}");
            assert!(!"checkpoint:run_10:latest".starts_with(&p));
        }
    }
}
