//! Index segments: where the keys a head no longer holds live.
//!
//! A head keeps the keys written since its last flush (`keys`, `gone`). The commit that grows
//! that map past [`FLUSH_AT`] entries writes it, with its own keys, as an immutable segment
//! object (`i/<seq:020>-<nonce>`, created with `If-None-Match: *`) and swaps in a head that
//! lists the segment and holds only the latest pointer. Segments are tiered as in an LSM tree:
//! a flush that would leave [`FANOUT`] segments of one level at the front merges them into one
//! segment of the next level instead (newer entries win; tombstones are dropped once no older
//! segment is left under them). So a head lists at most `FANOUT - 1` segments per level, the
//! number of levels grows with the logarithm of the run's keys, and each key is rewritten once
//! per level: bytes per commit stay nearly flat as a run grows.
//!
//! A segment never changes once written, so readers cache it by name; a key is found with the
//! head GET, the value GET, and segment GETs only on a cache miss. A segment merged away is
//! deleted after the head that stops listing it is in place; a reader still holding the older
//! head finds it missing and reads the head again, as it does for a superseded value object.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use afk_core::store::latest_key;
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use serde::{Deserialize, Serialize};

use crate::head::{Head, SegRef, Slot, garbage, segment_id};
use crate::store::S3Store;

/// Entries (keys and tombstones, the latest pointer not counted) a head holds before the next
/// commit moves them into a segment.
pub(crate) const FLUSH_AT: usize = 32;

/// Segments of one level merged into one of the next.
pub(crate) const FANOUT: usize = 4;

/// Segments a store keeps in memory; past it the cache starts over.
const CACHE_MAX: usize = 512;

/// Bytes of segment objects a store keeps in memory (segments carry the transcript log, see
/// [`crate::log`]); past it the cache starts over.
const CACHE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The body of a segment object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Segment {
    /// Logical key → where its value lives.
    pub keys: BTreeMap<String, Slot>,
    /// Keys deleted after an older segment listed them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub gone: BTreeSet<String>,
}

/// What one layer (the head's recent keys or a segment) says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// The key's value is here.
    Slot(Slot),
    /// The key was deleted.
    Gone,
    /// Ask the next, older layer.
    Absent,
}

impl Segment {
    fn decode(key: &str, bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| {
            Error::corrupt_record(key, "S3 index segment is not valid segment JSON").with_source(e)
        })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing maps of strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn entries(&self) -> usize {
        self.keys.len() + self.gone.len()
    }

    pub(crate) fn find(&self, key: &str) -> Found {
        match self.keys.get(key) {
            Some(slot) => Found::Slot(slot.clone()),
            None if self.gone.contains(key) => Found::Gone,
            None => Found::Absent,
        }
    }

    /// Put `older` under this segment: its entries for keys this one does not mention. The
    /// slots of `older` that this one shadows go to `shadowed`.
    fn absorb_older(&mut self, older: &Segment, shadowed: &mut Vec<Slot>) {
        for (k, slot) in &older.keys {
            let newer = self.keys.get(k);
            if newer.is_none() && !self.gone.contains(k) {
                self.keys.insert(k.clone(), slot.clone());
            } else if newer != Some(slot) {
                shadowed.push(slot.clone());
            }
        }
        for k in &older.gone {
            if !self.keys.contains_key(k) {
                self.gone.insert(k.clone());
            }
        }
    }
}

/// The head's recent keys, as a layer.
pub(crate) fn find_recent(head: &Head, key: &str) -> Found {
    match head.keys.get(key) {
        Some(slot) => Found::Slot(slot.clone()),
        None if head.gone.contains(key) => Found::Gone,
        None => Found::Absent,
    }
}

/// Segments read so far, by object name (they never change).
#[derive(Debug, Default)]
pub(crate) struct SegmentCache {
    /// The segments, and the bytes of their objects in all.
    map: Mutex<(HashMap<String, Arc<Segment>>, usize)>,
}

impl SegmentCache {
    fn get(&self, name: &str) -> Option<Arc<Segment>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .get(name)
            .cloned()
    }

    /// Keep `seg`, whose object is `bytes` long.
    fn put(&self, name: String, seg: Arc<Segment>, bytes: usize) {
        let mut guard = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (map, held) = &mut *guard;
        if map.len() >= CACHE_MAX || *held + bytes > CACHE_MAX_BYTES {
            map.clear();
            *held = 0;
        }
        map.insert(name, seg);
        *held += bytes;
    }
}

/// The segment a commit writes when it flushes the head's recent keys.
#[derive(Debug)]
pub(crate) struct Flush {
    /// How the new head lists it.
    pub seg: SegRef,
    /// Its object body.
    pub body: Vec<u8>,
    /// Its content, for the cache once written.
    pub content: Arc<Segment>,
    /// How many of the head's front segments it replaces (merged into it).
    pub consumed: usize,
    /// Value objects and packs no longer named by any entry (shadowed in a merge): deleted
    /// after the swap.
    pub shadowed: Vec<String>,
}

/// `NotFound` for a segment the head lists that is gone: the head moved on meanwhile.
fn segment_gone(run: &RunId, id: &str) -> Error {
    Error::not_found(format!("index segment {id} of run {run} is gone"))
}

impl S3Store {
    /// A segment, from the cache or the bucket. `NotFound` when the object does not exist.
    pub(crate) async fn segment(
        &self,
        thread: &ThreadId,
        run: &RunId,
        id: &str,
    ) -> Result<Arc<Segment>> {
        let name = self.layout.segment(thread, run, id);
        if let Some(seg) = self.segments.get(&name) {
            return Ok(seg);
        }
        match self.ops.get(&name).await {
            Ok(Some((bytes, _))) => {
                let seg = Arc::new(Segment::decode(&name, &bytes)?);
                self.segments.put(name, seg.clone(), bytes.len());
                Ok(seg)
            }
            Ok(None) => Err(segment_gone(run, id)),
            Err(f) => Err(f.into_error(&self.ops.bucket, "GetObject (index segment)")),
        }
    }

    /// Remember a segment this store wrote.
    pub(crate) fn cache_segment(
        &self,
        thread: &ThreadId,
        run: &RunId,
        id: &str,
        seg: Arc<Segment>,
        bytes: usize,
    ) {
        self.segments
            .put(self.layout.segment(thread, run, id), seg, bytes);
    }

    /// Where `key`'s value lives according to `head`: its recent keys, then its segments,
    /// newest first. `NotFound` kind when a segment it lists is gone (read the head again).
    pub(crate) async fn locate(
        &self,
        thread: &ThreadId,
        run: &RunId,
        head: &Head,
        key: &str,
    ) -> Result<Option<Slot>> {
        match find_recent(head, key) {
            Found::Slot(s) => return Ok(Some(s)),
            Found::Gone => return Ok(None),
            Found::Absent => {}
        }
        for seg in &head.segs {
            match self.segment(thread, run, &seg.id).await?.find(key) {
                Found::Slot(s) => return Ok(Some(s)),
                Found::Gone => return Ok(None),
                Found::Absent => {}
            }
        }
        Ok(None)
    }

    /// Every live key of the run according to `head` (the latest pointer included, the fence
    /// not) and where its value lives. `NotFound` kind when a listed segment is gone.
    pub(crate) async fn all_slots(
        &self,
        thread: &ThreadId,
        run: &RunId,
        head: &Head,
    ) -> Result<BTreeMap<String, Slot>> {
        let mut view = Segment {
            keys: head.keys.clone(),
            gone: head.gone.clone(),
        };
        let mut ignored = Vec::new();
        for seg in &head.segs {
            let older = self.segment(thread, run, &seg.id).await?;
            view.absorb_older(&older, &mut ignored);
        }
        Ok(view.keys)
    }

    /// [`S3Store::all_slots`] of the run's current head, re-reading the head when a segment
    /// vanished under it (merged by a newer head). `None` when the run has no head.
    pub(crate) async fn current_slots(
        &self,
        thread: &ThreadId,
        run: &RunId,
    ) -> Result<Option<(Head, BTreeMap<String, Slot>)>> {
        let mut previous: Option<u64> = None;
        loop {
            let (head, _) = self.read_head(thread, run).await?;
            let Some(head) = head else { return Ok(None) };
            match self.all_slots(thread, run, &head).await {
                Ok(slots) => return Ok(Some((head, slots))),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if previous == Some(head.seq) {
                        return Err(Error::corrupt_record(
                            afk_core::store::run_key(run),
                            "the run head lists an S3 index segment that does not exist",
                        )
                        .with_source(e));
                    }
                    previous = Some(head.seq);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether a commit of `slots` on `head` (as read) flushes the head's recent keys, and the
    /// segment it then writes as attempt `(seq, nonce)`. Loads the segments it merges.
    pub(crate) async fn plan_flush(
        &self,
        thread: &ThreadId,
        run: &RunId,
        head: &Head,
        slots: &[(String, Slot)],
        seq: u64,
        nonce: &str,
    ) -> Result<Option<Flush>> {
        let latest = latest_key(run);
        let mut recent = Segment {
            keys: head.keys.clone(),
            gone: head.gone.clone(),
        };
        recent.keys.remove(&latest);
        for (k, slot) in slots.iter().filter(|(k, _)| *k != latest) {
            recent.gone.remove(k);
            recent.keys.insert(k.clone(), slot.clone());
        }
        if recent.entries() <= FLUSH_AT {
            return Ok(None);
        }
        // The log entries this store wrote go in as values (see `crate::log`); the slots they
        // replace leave the layer like shadowed ones.
        let mut shadowed = self.logs.inline(thread, run, &mut recent);
        let (mut level, mut consumed) = (0u32, 0usize);
        loop {
            let group = head.segs.get(consumed..consumed + FANOUT - 1);
            let Some(group) = group.filter(|g| g.iter().all(|s| s.level == level)) else {
                break;
            };
            for s in group {
                let older = self.segment(thread, run, &s.id).await?;
                recent.absorb_older(&older, &mut shadowed);
            }
            consumed += FANOUT - 1;
            level += 1;
        }
        if consumed == head.segs.len() {
            // Nothing older is left for a tombstone to hide.
            recent.gone.clear();
        }
        // The merged layers are one now: a pack they shadow is garbage unless it still names
        // one of their values.
        let shadowed = garbage(&shadowed, &recent.keys);
        let seg = SegRef {
            id: segment_id(seq, nonce),
            level,
            entries: recent.entries() as u64,
        };
        Ok(Some(Flush {
            seg,
            body: recent.encode(),
            content: Arc::new(recent),
            consumed,
            shadowed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Slot {
        Slot::Object(s.into())
    }

    #[test]
    fn newer_entries_win_and_shadowed_objects_are_named() {
        let mut newer = Segment::default();
        newer.keys.insert("a".into(), obj("2/0"));
        newer.gone.insert("b".into());
        let mut older = Segment::default();
        older.keys.insert("a".into(), obj("1/0"));
        older.keys.insert("b".into(), obj("1/1"));
        older.keys.insert("c".into(), obj("1/2"));
        let mut shadowed = Vec::new();
        newer.absorb_older(&older, &mut shadowed);
        assert_eq!(newer.find("a"), Found::Slot(obj("2/0")));
        assert_eq!(newer.find("b"), Found::Gone);
        assert_eq!(newer.find("c"), Found::Slot(obj("1/2")));
        assert_eq!(newer.find("d"), Found::Absent);
        assert_eq!(shadowed, [obj("1/0"), obj("1/1")]);
        let back = Segment::decode("x", &newer.encode()).unwrap();
        assert_eq!(back, newer);
        assert!(Segment::decode("x", b"[").unwrap_err().is_corrupt());
    }
}
