//! The v2 transcript log (DESIGN §3.4): one entry per step under `messages:<run>:<index>`,
//! chained by a SHA-256 digest so a resume can tell a complete log from a torn one.
//!
//! `digest_i = hex(sha256(digest_{i-1} as UTF-8 bytes || canonical_json(messages_i)))`
//! with `digest_{-1} = ""`. The message bytes are the canonical JSON of
//! [`crate::hash::canonical_json`] (sorted keys, fixed separators), so the digest does not
//! depend on field order, serde_json features or the language that wrote the log.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::Extra;
use super::de::record_de;
use super::message::Message;
use crate::error::{Error, Result};

/// One transcript-log entry: the messages a step added.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TranscriptEntry {
    /// Position in the log, from 0; the entry's key is `messages:<run>:<index>`.
    pub index: u64,
    /// The step that added these messages.
    pub step: u64,
    /// The messages, in transcript order.
    pub messages: Vec<Message>,
    /// Chained digest up to and including this entry ([`entry_digest`]).
    pub digest: String,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(TranscriptEntry {
    index: req,
    step: req,
    messages: req,
    digest: req
});

/// What a v2 snapshot says about the log: how many entries and messages, and the last digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TranscriptRef {
    /// Number of entries (`messages:<run>:0` .. `len - 1`).
    pub len: u64,
    /// Total number of messages over those entries.
    pub message_count: u64,
    /// Digest of the last entry (`""` when `len == 0`).
    pub digest: String,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(TranscriptRef {
    len: req,
    message_count: req,
    digest: req
});

/// The digest of an entry holding `messages`, chained after `prev` (`""` for the first entry).
pub fn entry_digest(prev: &str, messages: &[Message]) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    // Serializing a Message to a Value cannot fail (string keys only).
    let value = serde_json::to_value(messages).unwrap_or_default();
    h.update(crate::hash::canonical_json(&value).as_bytes());
    hex::encode(h.finalize())
}

/// Fold [`entry_digest`] over consecutive entries' messages; `""` for none.
pub fn chain_digest<'a>(entries: impl IntoIterator<Item = &'a [Message]>) -> String {
    entries
        .into_iter()
        .fold(String::new(), |prev, msgs| entry_digest(&prev, msgs))
}

impl TranscriptEntry {
    /// Build entry `index` for `step` chained after `prev_digest`.
    pub fn new(index: u64, step: u64, messages: Vec<Message>, prev_digest: &str) -> Self {
        let digest = entry_digest(prev_digest, &messages);
        TranscriptEntry {
            index,
            step,
            messages,
            digest,
            extra: Extra::new(),
        }
    }
}

impl TranscriptRef {
    /// The reference describing `entries` (assumed consecutive from index 0).
    pub fn of(entries: &[TranscriptEntry]) -> Self {
        TranscriptRef {
            len: entries.len() as u64,
            message_count: entries.iter().map(|e| e.messages.len() as u64).sum(),
            digest: entries.last().map(|e| e.digest.clone()).unwrap_or_default(),
            extra: Extra::new(),
        }
    }
}

/// Check `entries` (in index order) against `tref` and return the full transcript.
///
/// Fails with `Corrupt` naming the first bad entry: a missing or out-of-order index, a stored
/// digest that does not match the recomputed chain, or a count/digest that differs from `tref`.
pub fn reassemble(entries: &[TranscriptEntry], tref: &TranscriptRef) -> Result<Vec<Message>> {
    if entries.len() as u64 != tref.len {
        return Err(Error::corrupt(format!(
            "transcript log has {} entries, snapshot expects {}",
            entries.len(),
            tref.len
        )));
    }
    let mut prev = String::new();
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.index != i as u64 {
            return Err(Error::corrupt(format!(
                "transcript entry {i} has index {}",
                e.index
            )));
        }
        let d = entry_digest(&prev, &e.messages);
        if d != e.digest {
            return Err(Error::corrupt(format!(
                "transcript entry {i}: digest mismatch"
            )));
        }
        out.extend(e.messages.iter().cloned());
        prev = d;
    }
    if prev != tref.digest {
        return Err(Error::corrupt(
            "transcript digest differs from the snapshot's",
        ));
    }
    if out.len() as u64 != tref.message_count {
        return Err(Error::corrupt(format!(
            "transcript has {} messages, snapshot expects {}",
            out.len(),
            tref.message_count
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Message, Role};

    fn log() -> Vec<TranscriptEntry> {
        let a = TranscriptEntry::new(0, 1, vec![Message::text(Role::User, "hi")], "");
        let b = TranscriptEntry::new(1, 1, vec![Message::text(Role::Assistant, "yo")], &a.digest);
        vec![a, b]
    }

    #[test]
    fn digest_is_chained_sha256() {
        let entries = log();
        let first = hex::encode(Sha256::digest(br#"[{"content": "hi", "role": "user"}]"#));
        assert_eq!(entries[0].digest, first);
        let msgs: Vec<&[Message]> = entries.iter().map(|e| e.messages.as_slice()).collect();
        assert_eq!(chain_digest(msgs), entries[1].digest);
        assert_eq!(chain_digest(Vec::<&[Message]>::new()), "");
    }

    #[test]
    fn reassemble_verifies_the_chain() {
        let entries = log();
        let tref = TranscriptRef::of(&entries);
        assert_eq!(reassemble(&entries, &tref).unwrap().len(), 2);
        assert!(
            reassemble(&entries[..1], &tref).unwrap_err().is_corrupt(),
            "torn log"
        );
        let mut edited = entries.clone();
        edited[0].messages[0] = Message::text(Role::User, "bye");
        assert!(
            reassemble(&edited, &tref)
                .unwrap_err()
                .message()
                .contains("digest")
        );
        let swapped = vec![entries[1].clone(), entries[0].clone()];
        assert!(reassemble(&swapped, &tref).is_err());
        let mut wrong = tref.clone();
        wrong.message_count = 3;
        assert!(reassemble(&entries, &wrong).is_err());
    }
}
