//! The transcript log consolidated into the index segments, so a cold resume reads a long run's
//! log in a bounded number of requests.
//!
//! A resume reads every transcript-log entry of the run (`messages:<run>:<index>`, one per
//! step) with one `list` and one `get_many`. Each entry is a value of the commit of its step,
//! in that commit's pack: one ranged GET each, a thousand for a 1000-step run. So when a
//! commit flushes the head's recent keys into a segment, the log entries among them go into
//! the segment as values ([`Slot::Inline`]) instead of as pointers into their packs, and the
//! merges of the index carry them on: a cold reader gets the whole log with the segments it
//! reads anyway (at most `FANOUT - 1` per level) and the few entries still in the head's
//! recent keys.
//!
//! The flushing commit does not read the entries back: the store remembers the log values it
//! committed ([`LogCache`]) until a flush takes them, keyed by key and slot. A slot names an
//! object no other commit attempt writes (sequence number and nonce), so a remembered value is
//! exactly what the slot points at, whoever moved the head meanwhile; an entry this store did
//! not write (another process's commit, or a store opened since) stays a pointer into its pack.
//! Nothing new is written and no request is added: the segment was being written in the same
//! round anyway, only larger. What a crash can leave is what it could before (a segment no
//! head names); the pack of an inlined entry is deleted with the other objects the swap makes
//! unreachable. Readers of the format before this change read inline slots already (the latest
//! pointer always used them), so the format version stays.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use afk_core::keys::messages_prefix;
use afk_core::store::Commit;
use afk_core::{RunId, ThreadId};

use crate::head::{Head, Slot};
use crate::index::Segment;

/// Log entries up to this size (and valid UTF-8) are carried inside the segments; larger ones
/// stay in their pack and cost one GET each on a cold read.
pub(crate) const LOG_INLINE_MAX: usize = 64 * 1024;

/// Runs a [`LogCache`] holds; past that it starts over (their entries then stay pointers).
const RUNS_MAX: usize = 1024;

/// Per run: the log entries this store committed that its run's head still holds among its
/// recent keys, as key → (slot written, value).
type Entries = BTreeMap<String, (Slot, String)>;

/// Transcript-log values this store committed and no segment holds yet.
#[derive(Debug, Default)]
pub(crate) struct LogCache {
    map: Mutex<HashMap<(ThreadId, RunId), Entries>>,
}

impl LogCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ThreadId, RunId), Entries>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember the log entries of `commit`, staged as `slots` (the slots of its puts, by key).
    pub(crate) fn remember(&self, commit: &Commit, slots: &[(String, Slot)]) {
        let prefix = messages_prefix(&commit.run);
        let values: BTreeMap<&str, &Vec<u8>> = commit
            .puts
            .iter()
            .filter(|(k, v)| k.starts_with(&prefix) && v.len() <= LOG_INLINE_MAX)
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        if values.is_empty() {
            return;
        }
        let mut map = self.lock();
        if map.len() >= RUNS_MAX {
            map.clear();
        }
        let entries = map
            .entry((commit.thread.clone(), commit.run.clone()))
            .or_default();
        for (key, slot) in slots {
            let Some(text) = values
                .get(key.as_str())
                .and_then(|v| std::str::from_utf8(v).ok())
            else {
                continue;
            };
            entries.insert(key.clone(), (slot.clone(), text.to_owned()));
        }
    }

    /// Turn the slots of `recent` (the head's recent keys on their way into a segment) that
    /// point at a remembered log value into that value inline. Returns the slots replaced.
    pub(crate) fn inline(&self, thread: &ThreadId, run: &RunId, recent: &mut Segment) -> Vec<Slot> {
        let map = self.lock();
        let Some(entries) = map.get(&(thread.clone(), run.clone())) else {
            return Vec::new();
        };
        let mut replaced = Vec::new();
        for (key, slot) in recent.keys.iter_mut() {
            if let Some((written, text)) = entries.get(key)
                && written == slot
            {
                let old = std::mem::replace(
                    slot,
                    Slot::Inline {
                        inline: text.clone(),
                    },
                );
                replaced.push(old);
            }
        }
        replaced
    }

    /// Keep only the entries `head` (just swapped in) still names among its recent keys.
    pub(crate) fn prune(&self, thread: &ThreadId, run: &RunId, head: &Head) {
        let mut map = self.lock();
        let id = (thread.clone(), run.clone());
        let Some(entries) = map.get_mut(&id) else {
            return;
        };
        entries.retain(|key, (slot, _)| head.keys.get(key) == Some(slot));
        if entries.is_empty() {
            map.remove(&id);
        }
    }

    /// Forget the run (deleted).
    pub(crate) fn forget(&self, thread: &ThreadId, run: &RunId) {
        self.lock().remove(&(thread.clone(), run.clone()));
    }
}

#[cfg(test)]
mod tests {
    use afk_core::store::Epoch;

    use super::*;

    fn packed(p: &str, start: u64) -> Slot {
        Slot::Packed {
            p: p.into(),
            r: [start, 5],
        }
    }

    fn commit(puts: Vec<(String, Vec<u8>)>) -> Commit {
        Commit {
            thread: ThreadId::new("t").unwrap(),
            run: RunId::new("r").unwrap(),
            epoch: Epoch(1),
            puts,
            latest: None,
            attention: None,
        }
    }

    #[test]
    fn only_remembered_log_slots_are_inlined_and_pruning_follows_the_head() {
        let log = LogCache::default();
        let c = commit(vec![
            ("messages:r:1".into(), b"hello".to_vec()),
            ("checkpoint:r:1:pre_llm".into(), b"x".to_vec()),
            ("messages:r:2".into(), vec![0xff; 3]),
            ("messages:r:3".into(), vec![b'a'; LOG_INLINE_MAX + 1]),
        ]);
        let slots: Vec<(String, Slot)> = c
            .puts
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), packed("1-n/p0", i as u64)))
            .collect();
        log.remember(&c, &slots);
        let (t, r) = (c.thread.clone(), c.run.clone());
        let mut recent = Segment::default();
        recent.keys.extend(slots.iter().cloned());
        // Written again by another attempt: a slot the cache does not know.
        recent
            .keys
            .insert("messages:r:0".into(), packed("0-m/p0", 0));
        let replaced = log.inline(&t, &r, &mut recent);
        assert_eq!(replaced, [packed("1-n/p0", 0)]);
        assert_eq!(
            recent.keys["messages:r:1"],
            Slot::Inline {
                inline: "hello".into()
            }
        );
        for k in ["messages:r:0", "messages:r:2", "messages:r:3"] {
            assert!(matches!(recent.keys[k], Slot::Packed { .. }), "{k}");
        }
        // Pruned by a head that still names the slot: kept; by one that does not: gone.
        let mut head = Head::empty();
        head.keys.insert("messages:r:1".into(), packed("1-n/p0", 0));
        log.prune(&t, &r, &head);
        let mut again = Segment::default();
        again
            .keys
            .insert("messages:r:1".into(), packed("1-n/p0", 0));
        assert_eq!(
            log.inline(&t, &r, &mut again.clone()).len(),
            1,
            "still named: kept"
        );
        head.keys.insert("messages:r:1".into(), packed("2-o/p0", 0));
        log.prune(&t, &r, &head);
        assert!(
            log.inline(&t, &r, &mut again).is_empty(),
            "moved on: forgotten"
        );
        assert!(log.lock().is_empty());
    }
}
