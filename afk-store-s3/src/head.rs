//! Object layout and the per-run head object.
//!
//! ```text
//! <prefix>/<thread>/<run>/head                      the run's head (JSON, replaced with If-Match)
//! <prefix>/<thread>/<run>/o/<seq:020>-<nonce>/<i>   value i of one commit attempt (If-None-Match: *)
//! <prefix>/<thread>/<run>/o/<seq:020>-<nonce>/p<j> pack j of one commit attempt: several of its
//!                                                   values end to end (If-None-Match: *)
//! <prefix>/<thread>/<run>/i/<seq:020>-<nonce>       an index segment (If-None-Match: *, immutable)
//! <prefix>/.afk-probe-<nonce>                        conditional-write probe at open (deleted)
//! <prefix>/.afk-attention/<thread>/<run>/<seq:020>-<nonce>
//!                                                   marker of a run that may need attention
//!                                                   (empty; see [`crate::attention`])
//! ```
//!
//! Record objects are named by commit attempt (sequence number and a random nonce) and position,
//! never overwritten, so two writers can never collide on an object. Which object holds a
//! logical key's current value is found through the head: its own small map of recently written
//! keys first, then the immutable index segments it lists, newest first (see [`crate::index`]).
//! The head's size is bounded whatever the run's length; segments never change once written,
//! so readers cache them.

use std::collections::{BTreeMap, BTreeSet};

use afk_core::{Error, Result, RunId, ThreadId, store::Epoch};
use serde::{Deserialize, Serialize};

use crate::attention::Attn;

/// Latest pointers up to this many bytes (and valid UTF-8) are kept inside the head.
pub(crate) const INLINE_LATEST_MAX: usize = 4096;

/// Where one logical key's current value lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Slot {
    /// Object suffix `<seq:020>-<nonce>/<i>` under the run's `o/` folder: the value alone.
    Object(String),
    /// The value itself (only the latest pointer, when small and UTF-8).
    Inline { inline: String },
    /// Bytes `r[0] .. r[0] + r[1]` of the pack object `p` (`<seq:020>-<nonce>/p<j>` under the
    /// run's `o/` folder), which holds several values of one commit attempt end to end.
    Packed { p: String, r: [u64; 2] },
}

impl Slot {
    /// The suffix of the object holding the value (alone or in a pack), if not inline.
    pub(crate) fn object(&self) -> Option<&str> {
        match self {
            Slot::Object(s) | Slot::Packed { p: s, .. } => Some(s),
            Slot::Inline { .. } => None,
        }
    }

    /// The pack holding the value, if it is in one.
    pub(crate) fn pack(&self) -> Option<&str> {
        match self {
            Slot::Packed { p, .. } => Some(p),
            _ => None,
        }
    }
}

/// The object suffixes that slots leaving a layer make garbage, given what that layer names
/// after the change (`live`). An object of its own goes with its slot; a pack only once no slot
/// of `live` names it. This is exact because a pack's slots never part: a commit puts them all
/// in the head's recent keys (or all in the segment it flushes), a flush moves all recent keys
/// into one segment, and a merge turns whole segments into one; so the other slots of a pack
/// whose slot leaves a layer are in that same layer, which `live` is.
pub(crate) fn garbage<'a>(
    dead: impl IntoIterator<Item = &'a Slot>,
    live: &BTreeMap<String, Slot>,
) -> Vec<String> {
    let mut objects = Vec::new();
    let mut packs = BTreeSet::new();
    for slot in dead {
        match slot {
            Slot::Object(s) => objects.push(s.clone()),
            Slot::Packed { p, .. } => {
                packs.insert(p.as_str());
            }
            Slot::Inline { .. } => {}
        }
    }
    if !packs.is_empty() {
        for slot in live.values() {
            if let Some(p) = slot.pack() {
                packs.remove(p);
            }
        }
        objects.extend(packs.into_iter().map(str::to_owned));
    }
    objects
}

/// An index segment the head lists: its id (`<seq:020>-<nonce>`, the object `i/<id>`), its
/// level (how many merges made it, see [`crate::index`]) and its number of entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SegRef {
    pub id: String,
    #[serde(rename = "l")]
    pub level: u32,
    #[serde(rename = "n")]
    pub entries: u64,
}

/// Format version written: 2 added `gone` and `segs`, 3 added packed slots (`{"p":…,"r":…}`),
/// which version 2 readers cannot follow. Version 1 heads (a key map only) are read as heads
/// without segments, version 2 heads as heads without packs.
pub(crate) const HEAD_VERSION: u32 = 3;

/// The head object of a run: fence, commit counter, last writer, recent keys and the index
/// segments holding the older ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Head {
    /// Format version of this JSON ([`HEAD_VERSION`]; 1 is read too).
    pub v: u32,
    /// Current fence epoch; 0 after the fence was deleted (never claimed).
    pub epoch: u64,
    /// Number of successful head swaps; grows by one per swap.
    pub seq: u64,
    /// Nonce of the writer of this version of the head (resolves ambiguous writes).
    pub nonce: String,
    /// Recently written logical keys → where their values live (bounded: moved into a segment
    /// once it grows past [`crate::index::FLUSH_AT`]). Always holds `checkpoint:<run>:latest`
    /// when the run has one; never the fence `run:<run>`, which is derived from `epoch`.
    pub keys: BTreeMap<String, Slot>,
    /// Recently deleted keys that a segment may still list (tombstones).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub gone: BTreeSet<String>,
    /// Index segments with the older keys, newest first; a key's newest entry wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segs: Vec<SegRef>,
    /// The run's entry in the index of runs that need attention, while it is open, and the
    /// marker that lists it (see [`crate::attention`]). Added without a version change:
    /// readers that predate it ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn: Option<Attn>,
}

impl Head {
    /// The head of a run nobody has written yet.
    pub(crate) fn empty() -> Self {
        Head {
            v: HEAD_VERSION,
            epoch: 0,
            seq: 0,
            nonce: String::new(),
            keys: BTreeMap::new(),
            gone: BTreeSet::new(),
            segs: Vec::new(),
            attn: None,
        }
    }

    /// Decode a head object. `Corrupt` naming the fence key when it is not a head.
    pub(crate) fn decode(run: &RunId, bytes: &[u8]) -> Result<Self> {
        let head: Head = serde_json::from_slice(bytes).map_err(|e| {
            Error::corrupt_record(
                afk_core::store::run_key(run),
                "S3 head object is not valid head JSON",
            )
            .with_source(e)
        })?;
        if !(1..=HEAD_VERSION).contains(&head.v) {
            return Err(Error::corrupt_record(
                afk_core::store::run_key(run),
                format!("S3 head object has unknown format version {}", head.v),
            ));
        }
        Ok(head)
    }

    /// Encode for a PUT (always in the current format version).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut head = self.clone();
        head.v = HEAD_VERSION;
        // Serializing a struct of strings, integers and maps cannot fail.
        serde_json::to_vec(&head).unwrap_or_default()
    }

    /// The run's epoch.
    pub(crate) fn epoch(&self) -> Epoch {
        Epoch(self.epoch)
    }

    /// Whether this head shows the effect of the writer with `nonce`: it wrote this version, one
    /// of the recent keys still points at an object of its commit attempt, or it lists the
    /// segment that attempt wrote.
    pub(crate) fn shows(&self, nonce: &str) -> bool {
        self.nonce == nonce
            || self
                .keys
                .values()
                .any(|s| s.object().is_some_and(|o| attempt_nonce(o) == Some(nonce)))
            || self
                .segs
                .iter()
                .any(|s| s.id.split_once('-').map(|(_, n)| n) == Some(nonce))
    }

    /// The fence value as the in-memory store shows it: `{"epoch":n}`.
    pub(crate) fn fence_value(&self) -> Option<Vec<u8>> {
        (self.epoch > 0).then(|| {
            serde_json::json!({ "epoch": self.epoch })
                .to_string()
                .into_bytes()
        })
    }
}

/// The nonce part of an object suffix `<seq>-<nonce>/<i>`.
fn attempt_nonce(suffix: &str) -> Option<&str> {
    suffix.split_once('/')?.0.split_once('-').map(|(_, n)| n)
}

/// Object names of one store: bucket prefix, threads and runs.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `""` or `"<prefix>/"`.
    pub(crate) root: String,
}

impl Layout {
    pub(crate) fn new(prefix: &str) -> Self {
        let root = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Layout { root }
    }

    /// Folder of a thread: `<prefix>/<thread>/`.
    pub(crate) fn thread_dir(&self, thread: &ThreadId) -> String {
        format!("{}{thread}/", self.root)
    }

    /// Folder of a run: `<prefix>/<thread>/<run>/`.
    pub(crate) fn run_dir(&self, thread: &ThreadId, run: &RunId) -> String {
        format!("{}{thread}/{run}/", self.root)
    }

    /// The run's head object.
    pub(crate) fn head(&self, thread: &ThreadId, run: &RunId) -> String {
        format!("{}head", self.run_dir(thread, run))
    }

    /// An index segment object.
    pub(crate) fn segment(&self, thread: &ThreadId, run: &RunId, id: &str) -> String {
        format!("{}i/{id}", self.run_dir(thread, run))
    }

    /// The object a slot suffix names.
    pub(crate) fn object(&self, thread: &ThreadId, run: &RunId, suffix: &str) -> String {
        format!("{}o/{suffix}", self.run_dir(thread, run))
    }

    /// The folder of every marker of the index of runs that need attention:
    /// `<prefix>/.afk-attention/`. No thread folder can be it (a thread id never starts
    /// with `.`).
    pub(crate) fn markers(&self) -> String {
        format!("{}{MARKERS}/", self.root)
    }

    /// The marker `id` of a run: `<prefix>/.afk-attention/<thread>/<run>/<id>`.
    pub(crate) fn marker(&self, thread: &ThreadId, run: &RunId, id: &str) -> String {
        format!("{}{thread}/{run}/{id}", self.markers())
    }

    /// The probe object used at open.
    pub(crate) fn probe(&self, nonce: &str) -> String {
        format!("{}.afk-probe-{nonce}", self.root)
    }
}

/// The name of the folder of markers, under the store's prefix.
pub(crate) const MARKERS: &str = ".afk-attention";

/// Id of the segment written by the commit attempt `(seq, nonce)`.
pub(crate) fn segment_id(seq: u64, nonce: &str) -> String {
    format!("{seq:020}-{nonce}")
}

/// Object suffix of value `index` of the commit attempt `(seq, nonce)`.
pub(crate) fn object_suffix(seq: u64, nonce: &str, index: usize) -> String {
    format!("{seq:020}-{nonce}/{index}")
}

/// Object suffix of pack `index` of the commit attempt `(seq, nonce)`.
pub(crate) fn pack_suffix(seq: u64, nonce: &str, index: usize) -> String {
    format!("{seq:020}-{nonce}/p{index}")
}

/// A fresh random nonce (64 bits, hex): unique per head write and per commit attempt.
pub(crate) fn new_nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_head_reads_as_one_without_segments() {
        let run = RunId::new("r1").unwrap();
        let v1 = br#"{"v":1,"epoch":2,"seq":5,"nonce":"ab","keys":{"checkpoint:r1:latest":{"inline":"x"}}}"#;
        let head = Head::decode(&run, v1).unwrap();
        assert_eq!((head.epoch, head.keys.len(), head.segs.len()), (2, 1, 0));
        assert!(Head::decode(&run, br#"{"v":4,"epoch":0,"seq":0,"nonce":"","keys":{}}"#).is_err());
    }

    #[test]
    fn a_packed_slot_round_trips_and_names_its_writer_and_a_version_2_head_reads() {
        let run = RunId::new("r1").unwrap();
        let mut head = Head::empty();
        head.keys.insert(
            "checkpoint:r1:1:x".into(),
            Slot::Packed {
                p: pack_suffix(7, "bbbb", 0),
                r: [10, 20],
            },
        );
        let bytes = head.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains(r#"{"p":"00000000000000000007-bbbb/p0","r":[10,20]}"#),
            "{text}"
        );
        let back = Head::decode(&run, &bytes).unwrap();
        assert_eq!(back, head);
        assert!(back.shows("bbbb") && !back.shows("cccc"));
        let v2 = br#"{"v":2,"epoch":1,"seq":2,"nonce":"ab","keys":{"checkpoint:r1:1:x":"00000000000000000002-ab/0"}}"#;
        let head = Head::decode(&run, v2).unwrap();
        assert_eq!(
            head.keys["checkpoint:r1:1:x"],
            Slot::Object("00000000000000000002-ab/0".into())
        );
    }

    #[test]
    fn garbage_is_every_lone_object_and_the_packs_nothing_live_names() {
        let packed = |p: &str, start| Slot::Packed {
            p: p.into(),
            r: [start, 1],
        };
        let dead = [
            Slot::Object("1/0".into()),
            packed("2/p0", 0),
            packed("3/p0", 0),
            Slot::Inline { inline: "x".into() },
        ];
        let mut live = BTreeMap::new();
        live.insert("k".to_owned(), packed("3/p0", 1));
        live.insert("l".to_owned(), Slot::Object("4/0".into()));
        assert_eq!(garbage(&dead, &live), ["1/0", "2/p0"]);
        assert!(garbage(&[], &live).is_empty());
    }

    #[test]
    fn head_round_trips_and_finds_its_writer() {
        let run = RunId::new("r1").unwrap();
        let mut head = Head::empty();
        head.epoch = 3;
        head.nonce = "aaaa".into();
        head.keys.insert(
            "checkpoint:r1:1:x".into(),
            Slot::Object(object_suffix(7, "bbbb", 0)),
        );
        head.keys.insert(
            "checkpoint:r1:latest".into(),
            Slot::Inline {
                inline: "{}".into(),
            },
        );
        let back = Head::decode(&run, &head.encode()).unwrap();
        assert_eq!(back, head);
        assert!(back.shows("aaaa") && back.shows("bbbb") && !back.shows("cccc"));
        let mut with_seg = back.clone();
        with_seg.segs.push(SegRef {
            id: segment_id(9, "dddd"),
            level: 0,
            entries: 3,
        });
        assert!(with_seg.shows("dddd"));
        assert_eq!(Head::decode(&run, &with_seg.encode()).unwrap(), with_seg);
        assert_eq!(back.fence_value().unwrap(), br#"{"epoch":3}"#);
        assert!(Head::decode(&run, b"{").unwrap_err().is_corrupt());
    }
}
