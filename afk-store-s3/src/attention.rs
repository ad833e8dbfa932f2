//! The index of runs that need attention on S3: the run's head is the truth, markers find the
//! heads.
//!
//! S3 writes one object at a time, and the head swap (`If-Match`) is a commit's one atomic
//! step, so the run's entry lives in its head (`attn`: the entry and the id of its marker),
//! changed by the same swap as the commit's records: `attention(thread, run)` is the head's,
//! and no reader sees an entry without its commit or the reverse. To list open runs without
//! reading every head, each open run also has a **marker**, an empty object
//! `<prefix>/.afk-attention/<thread>/<run>/<id>` outside every thread folder (a thread id
//! never starts with `.`), with `id = <seq:020>-<nonce>`: the `seq` of the head the opening
//! commit replaces and that commit's nonce. `list_attention` lists the markers
//! (`ListObjectsV2`, one page of markers per page of runs) and reads each one's head (16 at
//! once); a run is listed, with the head's entry, only when its head names that very marker.
//!
//! **The invariant: every head that names a marker has it.** So listing markers finds every
//! open run, and the heads filter out the rest. Why it holds:
//!
//! - *Creation.* Only an opening commit (an [`Attention::Open`] on a head without `attn`)
//!   brings a marker id into a head. It first creates the marker (`If-None-Match: *`, with its
//!   record objects), and its swap names it only if the head it replaces has the id's `seq`;
//!   if the head moved on meanwhile (the swap lost a race), it writes a new marker for the
//!   head it found before swapping again. Every other swap (claims, deletes, commits that keep
//!   the run open) copies `attn` from the head it replaces, or (a closing commit) drops it.
//! - *Deletion.* A marker is deleted only (1) by the commit that wrote it without naming it,
//!   once its swap is done; (2) by a closing commit, after its swap dropped it; (3) by a
//!   listing, when the run's head is gone or is past the marker's `seq` without naming it;
//!   (4) by a listing that *retires* a marker whose head is still at its `seq` (see below);
//!   (5) by `delete_run`. In (2) and (3) no head can name it again: heads only move forward,
//!   one swap at a time under `If-Match`, so a head past `seq` that does not name it can
//!   neither hand it on (no later head copies what its predecessor lacks) nor adopt it (that
//!   takes a head at `seq`). (4) first makes (3) true: it replaces the head, unchanged, under
//!   `If-Match` (so `seq + 1`), and an opener still about to swap loses that race and writes a
//!   new marker. A head write still in flight (an ambiguous one) is conditioned on the version
//!   it read and can only land while that version is current.
//!
//! **Crashes.** A writer that dies after its marker PUT and before its swap leaves a marker
//! the head does not name: not listed; deleted by the first listing after the head moves on,
//! or retired by a store that sees it still pending at a second listing at least
//! [`PENDING_GRACE`] later (a live opener holds a marker pending for one round trip; a
//! retired live one only loses a race). A writer that dies between a closing swap and the
//! marker delete leaves a marker past its head's `seq`: not listed, deleted by the next
//! listing. Markers are thus always a superset of the open runs; the extra ones cost a head
//! GET at a listing until one deletes them.
//!
//! **Races.** Two openers of one head: one swap wins and names its marker; the other re-reads
//! a head that is open, keeps that marker, and deletes its own. An opener and a closer of one
//! epoch: whichever swaps second works on the head the first left; a closer deletes only the
//! marker of the head it closed, and a later opener names a fresh one. A listing and a commit:
//! the listing deletes only markers nothing can name any more, and retires by a conditional
//! head write.
//!
//! **Requests.** A commit without an [`Attention`], or with `Open` on a run its head shows
//! open (the entry replaced in the head), sends nothing more. An opening commit adds one PUT
//! (the marker), sent with its record objects: no extra round trip unless it has no records.
//! A closing commit adds one `DeleteObjects` after its swap, or none when it deletes
//! superseded objects anyway (the marker joins that request). `attention` is one GET; a page
//! of `list_attention` is one `ListObjectsV2`, one GET per run with markers on it, and one
//! `DeleteObjects` when it found stale markers. `delete_run` deletes the head's marker with the
//! run's objects.
//!
//! In `single_writer` mode (the service ignores `If-Match`) a listing deletes and retires
//! nothing (rules 3 and 4 rest on conditional swaps): extra markers stay until `delete_run`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use afk_core::store::{Attention, AttentionPage, AttentionRun, attention_list_limit};
use afk_core::{Error, Result, RunId, ThreadId};
use futures::{StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};

use crate::head::{Head, new_nonce};
use crate::store::{PARALLEL, S3Store};

/// How long a marker must stay pending (its head at its `seq`, not naming it) between two
/// listings of one store before that store retires it.
pub(crate) const PENDING_GRACE: Duration = Duration::from_secs(2);

/// Most pending markers a store remembers; past that it starts over.
const PENDING_MAX: usize = 1024;

/// A run's place in the index, inside its head: its entry and the id of its marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Attn {
    /// The marker's id, `<seq:020>-<nonce>`.
    #[serde(rename = "m")]
    pub marker: String,
    /// The bytes of the run's last [`Attention::Open`].
    #[serde(rename = "e", with = "entry")]
    pub entry: Vec<u8>,
}

/// An entry in JSON: a string when it is UTF-8 (the runner's JSON), else `{"hex": "…"}`.
mod entry {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Hex { hex: String },
    }

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Repr::Text(text.to_owned()),
            Err(_) => Repr::Hex {
                hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(text) => Ok(text.into_bytes()),
            Repr::Hex { hex } => (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                        .ok_or_else(|| serde::de::Error::custom("bad hex in attention entry"))
                })
                .collect(),
        }
    }
}

/// The id of the marker an opening commit with `nonce` writes for the head at `seq`.
pub(crate) fn marker_id(seq: u64, nonce: &str) -> String {
    format!("{seq:020}-{nonce}")
}

/// A marker found under the markers folder: its run, id and `seq`.
#[derive(Debug, Clone)]
struct Marker {
    thread: ThreadId,
    run: RunId,
    id: String,
    seq: u64,
}

/// The marker a key names, relative to the markers folder (`<thread>/<run>/<id>`), or `None`
/// for anything else.
fn parse_marker(rel: &str) -> Option<Marker> {
    let mut parts = rel.split('/');
    let (t, r, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (seq, nonce) = id.split_once('-')?;
    if seq.len() != 20 || nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Marker {
        thread: ThreadId::new(t).ok()?,
        run: RunId::new(r).ok()?,
        id: id.to_owned(),
        seq: seq.parse().ok()?,
    })
}

/// The cursor after a page whose last marker key was `last` (relative): past every marker of
/// its run when the page listed that run, else right after that marker. `~` sorts after every
/// character of a marker id.
fn cursor_after(last: &str, listed: Option<&AttentionRun>) -> String {
    match (parse_marker(last), listed) {
        (Some(m), Some(l)) if m.thread == l.thread && m.run == l.run => {
            format!("{}/{}/~", m.thread, m.run)
        }
        _ => last.to_owned(),
    }
}

/// `InvalidInput` unless `cursor` could be one this store handed out: a relative key of
/// printable ASCII.
fn check_cursor(cursor: &str) -> Result<()> {
    let ok = !cursor.is_empty()
        && cursor.len() <= 1024
        && !cursor.starts_with('/')
        && cursor.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "bad attention cursor {cursor:?}: not one this store handed out"
        )))
    }
}

/// What one swap of a commit did to the run's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing: the head already says what the commit says.
    Same,
    /// The new head carries the commit's change.
    Changed,
    /// The commit opens a run whose head is closed at a `seq` it has no marker for: write one
    /// (see [`Moves::need`]) and swap again.
    NeedMarker,
}

/// How a commit moves its run in the index, and the markers it wrote on the way.
#[derive(Debug)]
pub(crate) struct Moves<'a> {
    attention: Option<&'a Attention>,
    /// Markers this commit wrote: `(seq, id)`.
    written: Vec<(u64, String)>,
    /// Set by the last [`Moves::apply`]: the marker its head names anew, the marker of the
    /// head it closed, the `seq` it needs a marker for.
    adopted: Option<String>,
    closed: Option<String>,
    pub(crate) need: Option<u64>,
}

impl<'a> Moves<'a> {
    pub(crate) fn new(attention: Option<&'a Attention>) -> Self {
        Moves {
            attention,
            written: Vec::new(),
            adopted: None,
            closed: None,
            need: None,
        }
    }

    /// Whether a commit on `head` changes the run's entry.
    pub(crate) fn changes(&self, head: &Head) -> bool {
        match (self.attention, &head.attn) {
            (None, _) | (Some(Attention::Closed), None) => false,
            (Some(Attention::Open(e)), Some(a)) => *e != a.entry,
            _ => true,
        }
    }

    /// Whether a commit on `head` opens the run, and so writes a marker before its swap.
    pub(crate) fn wants_marker(&self, head: &Head) -> bool {
        matches!(self.attention, Some(Attention::Open(_))) && head.attn.is_none()
    }

    /// Note a marker this commit (`nonce`) writes for the head at `seq`; returns its id.
    pub(crate) fn mark(&mut self, seq: u64, nonce: &str) -> String {
        let id = marker_id(seq, nonce);
        self.written.push((seq, id.clone()));
        id
    }

    /// Set the entry of `new` (the commit's head, made from `current`) as the commit says.
    pub(crate) fn apply(&mut self, current: &Head, new: &mut Head) -> Outcome {
        (self.adopted, self.closed, self.need) = (None, None, None);
        match (self.attention, &current.attn) {
            (None, _) | (Some(Attention::Closed), None) => Outcome::Same,
            (Some(Attention::Closed), Some(a)) => {
                self.closed = Some(a.marker.clone());
                new.attn = None;
                Outcome::Changed
            }
            (Some(Attention::Open(e)), Some(a)) if *e == a.entry => Outcome::Same,
            (Some(Attention::Open(e)), Some(a)) => {
                new.attn = Some(Attn {
                    marker: a.marker.clone(),
                    entry: e.clone(),
                });
                Outcome::Changed
            }
            (Some(Attention::Open(e)), None) => {
                let Some((_, id)) = self.written.iter().find(|(s, _)| *s == current.seq) else {
                    self.need = Some(current.seq);
                    return Outcome::NeedMarker;
                };
                self.adopted = Some(id.clone());
                new.attn = Some(Attn {
                    marker: id.clone(),
                    entry: e.clone(),
                });
                Outcome::Changed
            }
        }
    }

    /// The markers to delete once the commit's last swap is known to have landed (or to have
    /// been declined): those it wrote and its head does not name, and the one it closed.
    pub(crate) fn leftovers(&self) -> Vec<&str> {
        self.written
            .iter()
            .map(|(_, id)| id.as_str())
            .filter(|id| self.adopted.as_deref() != Some(*id))
            .chain(self.closed.as_deref())
            .collect()
    }
}

/// Markers a store found pending (the head at their `seq`, not naming them), with the `seq`
/// and when it first saw them so.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    seen: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Pending {
    /// Whether the marker `key` was pending at `seq` at least [`PENDING_GRACE`] ago; else
    /// remember it as pending at `seq` from now (if not already).
    fn due(&self, key: &str, seq: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get(key) {
            Some((s, since)) if *s == seq => since.elapsed() >= PENDING_GRACE,
            _ => {
                if seen.len() >= PENDING_MAX {
                    seen.clear();
                }
                seen.insert(key.to_owned(), (seq, Instant::now()));
                false
            }
        }
    }

    fn forget(&self, key: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// What a listing learned about the markers of one run.
#[derive(Debug, Default)]
struct Examined {
    /// The run, when its head names one of the markers.
    listed: Option<AttentionRun>,
    /// Markers (keys) nothing can name any more.
    stale: Vec<String>,
}

impl S3Store {
    /// [`afk_core::store::Store::attention`]: the head's entry.
    pub(crate) async fn attention_entry(
        &self,
        thread: &ThreadId,
        run: &RunId,
    ) -> Result<Option<Vec<u8>>> {
        let (head, _) = self.read_head(thread, run).await?;
        Ok(head.and_then(|h| h.attn).map(|a| a.entry))
    }

    /// [`afk_core::store::Store::list_attention`]: one page of markers, in key order, each
    /// checked against its run's head.
    pub(crate) async fn list_attention_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AttentionPage> {
        let limit = attention_list_limit(limit);
        let root = self.layout.markers();
        if let Some(c) = cursor {
            check_cursor(c)?;
        }
        let start = cursor.map(|c| format!("{root}{c}"));
        let (keys, truncated) = self.ops.list_page(&root, start, limit).await?;
        let rel: Vec<&str> = keys.iter().filter_map(|k| k.strip_prefix(&root)).collect();
        // Consecutive markers of one run: its head is read once.
        let mut groups: Vec<Vec<Marker>> = Vec::new();
        for m in rel.iter().filter_map(|k| parse_marker(k)) {
            match groups.last_mut() {
                Some(g) if g[0].thread == m.thread && g[0].run == m.run => g.push(m),
                _ => groups.push(vec![m]),
            }
        }
        let examined: Vec<Examined> = stream::iter(groups)
            .map(|g| self.examine(g))
            .buffered(PARALLEL)
            .try_collect()
            .await?;
        let mut runs = Vec::new();
        let mut stale = Vec::new();
        for e in examined {
            runs.extend(e.listed);
            stale.extend(e.stale);
        }
        self.discard(stale).await;
        let next_cursor = match rel.last() {
            Some(last) if truncated => Some(cursor_after(last, runs.last())),
            _ => None,
        };
        Ok(AttentionPage { runs, next_cursor })
    }

    /// Read the head of the run of `markers` and sort them: the one it names (listed), the
    /// stale ones, and the pending ones (retired when due).
    async fn examine(&self, markers: Vec<Marker>) -> Result<Examined> {
        let (thread, run) = (&markers[0].thread, &markers[0].run);
        let (head, _) = self.read_head(thread, run).await?;
        let mut out = Examined::default();
        for m in &markers {
            let key = self.layout.marker(thread, run, &m.id);
            let named = head
                .as_ref()
                .and_then(|h| h.attn.as_ref())
                .filter(|a| a.marker == m.id);
            let seq = head.as_ref().map(|h| h.seq);
            if let Some(a) = named {
                out.listed = Some(AttentionRun {
                    thread: thread.clone(),
                    run: run.clone(),
                    entry: a.entry.clone(),
                });
                continue;
            }
            if !self.conditional_writes() {
                // Deleting rests on conditional swaps (see the module docs): skipped only.
                continue;
            }
            if seq.is_none_or(|s| s > m.seq) {
                out.stale.push(key);
            } else if seq == Some(m.seq) && self.pending.due(&key, m.seq) && self.retire(m).await {
                self.pending.forget(&key);
                out.stale.push(key);
            }
        }
        Ok(out)
    }

    /// Move the head of the marker's run past the marker's `seq` (unchanged, under
    /// `If-Match`), so that no commit can name the marker any more. Whether the marker is
    /// stale now: false when its head names it after all (a slow opener won), or when the
    /// swap failed (logged; a later listing tries again).
    async fn retire(&self, m: &Marker) -> bool {
        let nonce = new_nonce();
        let mut stale = false;
        let swapped = self
            .swap_head(&m.thread, &m.run, &nonce, None, false, |current| {
                let Some(h) = current else {
                    stale = true;
                    return Ok(None);
                };
                let named = h.attn.as_ref().is_some_and(|a| a.marker == m.id);
                stale = !named && h.seq >= m.seq;
                Ok((stale && h.seq == m.seq).then(|| h.clone()))
            })
            .await;
        let (thread, run, marker) = (&m.thread, &m.run, &m.id);
        match swapped {
            Ok(_) => {
                tracing::debug!(%thread, %run, %marker, stale, "retired a pending attention marker");
                stale
            }
            Err(error) => {
                tracing::warn!(%thread, %run, %marker, %error, "could not retire an attention marker");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_text_when_it_can_be_and_hex_otherwise() {
        for bytes in [
            &b"{\"state\":\"running\"}"[..],
            &[0xff, 0x00, 0x7f][..],
            &[][..],
        ] {
            let a = Attn {
                marker: marker_id(3, "ab"),
                entry: bytes.to_vec(),
            };
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(serde_json::from_str::<Attn>(&json).unwrap(), a, "{json}");
        }
        let json = serde_json::to_string(&Attn {
            marker: "m".into(),
            entry: vec![0xff, 0x01],
        })
        .unwrap();
        assert_eq!(json, r#"{"m":"m","e":{"hex":"ff01"}}"#);
        assert!(serde_json::from_str::<Attn>(r#"{"m":"m","e":{"hex":"f"}}"#).is_err());
    }

    #[test]
    fn markers_parse_and_cursors_skip_a_listed_run() {
        let m = parse_marker("t/r1/00000000000000000007-0a1b").unwrap();
        assert_eq!((m.thread.as_str(), m.run.as_str(), m.seq), ("t", "r1", 7));
        for bad in [
            "t/r1",
            "t/r1/7-0a1b",
            "t/r1/00000000000000000007-",
            "t/r1/00000000000000000007-xyz",
            "t/r1/00000000000000000007-0a/x",
            ".x/r1/00000000000000000007-0a",
        ] {
            assert!(parse_marker(bad).is_none(), "{bad}");
        }
        let listed = AttentionRun {
            thread: m.thread.clone(),
            run: m.run.clone(),
            entry: Vec::new(),
        };
        let last = "t/r1/00000000000000000007-0a1b";
        assert_eq!(cursor_after(last, Some(&listed)), "t/r1/~");
        assert_eq!(cursor_after(last, None), last);
        assert!("t/r1/~" > "t/r1/99999999999999999999-ffff" && "t/r1/~" < "t/r10/0");
        assert!(check_cursor("t/r1/~").is_ok());
        assert!(check_cursor("").is_err() && check_cursor("a b").is_err());
    }

    #[test]
    fn a_commit_names_only_a_marker_it_wrote_for_the_head_it_replaces() {
        let open = Attention::Open(b"e".to_vec());
        let mut moves = Moves::new(Some(&open));
        let mut closed = Head::empty();
        closed.seq = 4;
        assert!(moves.wants_marker(&closed) && moves.changes(&closed));
        let id = moves.mark(3, "aa");
        let mut new = closed.clone();
        assert_eq!(moves.apply(&closed, &mut new), Outcome::NeedMarker);
        assert_eq!(moves.need, Some(4));
        let id4 = moves.mark(4, "aa");
        assert_eq!(moves.apply(&closed, &mut new), Outcome::Changed);
        assert_eq!(new.attn.as_ref().unwrap().marker, id4);
        assert_eq!(moves.leftovers(), [id.as_str()]);
        // On a head that is open already: its marker is kept, this commit's go.
        let mut open_head = new.clone();
        open_head.attn.as_mut().unwrap().marker = "other".into();
        let mut again = open_head.clone();
        assert_eq!(moves.apply(&open_head, &mut again), Outcome::Same);
        assert_eq!(moves.leftovers(), [id.as_str(), id4.as_str()]);
        // Closing names the marker of the head it closed.
        let mut closing = Moves::new(Some(&Attention::Closed));
        let mut after = open_head.clone();
        assert_eq!(closing.apply(&open_head, &mut after), Outcome::Changed);
        assert!(after.attn.is_none());
        assert_eq!(closing.leftovers(), ["other"]);
        assert_eq!(closing.apply(&after, &mut after.clone()), Outcome::Same);
        assert!(closing.leftovers().is_empty());
    }
}
