//! A commit: size and fence checks, the objects and head slots it writes, and the one head
//! swap that makes them visible.
//!
//! One commit takes the run's head from the store's [`HeadCache`](crate::swap::HeadCache) (the
//! head its previous commit swapped in) or reads it (one GET), then writes its record objects
//! (its small values packed into one object, see [`stage`]) and, when it flushes the head's
//! recent keys, its index segment, all at once (`If-None-Match: *`), then swaps the head
//! (`If-Match` with that head's ETag): two round trips in a row, three when the head is read.
//! The same swap moves the run's entry in the index of runs that need attention; a commit that
//! opens the run writes its marker with the record objects, one that closes it deletes the
//! marker after the swap (see [`crate::attention`]).

use std::borrow::Cow;

use afk_core::store::{Attention, Commit, FinishedRun, latest_key, store_now_ms, validate_commit};
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use futures::{StreamExt, TryStreamExt, stream};

use crate::attention::{Moves, Outcome};
use crate::head::{Head, INLINE_LATEST_MAX, Slot, garbage, new_nonce, object_suffix, pack_suffix};
use crate::index::Flush;
use crate::store::{MAX_VALUE_SIZE, PARALLEL, S3Store};
use crate::swap::{MAX_SWAPS, Read};

/// `InvalidInput` for a value over [`MAX_VALUE_SIZE`].
pub(crate) fn check_sizes(commit: &Commit) -> Result<()> {
    let latest = commit.latest.as_ref().map(|v| (latest_key(&commit.run), v));
    for (key, value) in commit
        .puts
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .chain(latest)
    {
        if value.len() > MAX_VALUE_SIZE {
            return Err(Error::invalid_input(format!(
                "value of {key:?} is {} bytes; an S3 object holds at most {MAX_VALUE_SIZE}",
                value.len()
            ))
            .with_key(key));
        }
    }
    Ok(())
}

/// `Fenced` unless the commit's epoch is the run's current, claimed epoch.
pub(crate) fn check_epoch(commit: &Commit, head: &Head) -> Result<()> {
    if head.epoch == 0 {
        return Err(Error::fenced(format!(
            "run {} of thread {} was never claimed; claim it before committing",
            commit.run, commit.thread
        )));
    }
    if head.epoch() != commit.epoch {
        return Err(Error::fenced(format!(
            "run {} of thread {} is claimed at epoch {}; this commit carries epoch {}",
            commit.run, commit.thread, head.epoch, commit.epoch
        )));
    }
    Ok(())
}

/// Values up to this size go into a commit's packs; larger ones get an object of their own.
pub(crate) const PACK_VALUE_MAX: usize = 256 * 1024;

/// A pack is closed once it holds this many bytes; the commit's next values start another.
pub(crate) const PACK_TARGET: usize = 8 * 1024 * 1024;

/// What one commit attempt writes: objects (suffix, body) and the head slots.
#[derive(Debug)]
pub(crate) struct Staged<'a> {
    pub objects: Vec<(String, Cow<'a, [u8]>)>,
    pub slots: Vec<(String, Slot)>,
}

/// Name the objects of a commit attempt `(seq, nonce)`. Values up to [`PACK_VALUE_MAX`] go end to
/// end into packs of about [`PACK_TARGET`] bytes, one PUT for many values (a step's records are
/// ~10 small values: one request instead of ten); a pack that would hold one value, and a larger
/// value, is an object of its own. A latest pointer too large (or not UTF-8) to live inside the
/// head is an object of its own too.
pub(crate) fn stage<'a>(commit: &'a Commit, seq: u64, nonce: &str) -> Staged<'a> {
    let mut objects: Vec<(String, Cow<'a, [u8]>)> = Vec::new();
    let mut slots = Vec::with_capacity(commit.puts.len() + 1);
    // Packs as lists of put indexes, then each emitted as a pack or, with one value, alone.
    let mut packs: Vec<(Vec<usize>, usize)> = Vec::new();
    // Put `i` as an object of its own.
    let alone = |i: usize, objects: &mut Vec<_>, slots: &mut Vec<_>| {
        let (key, value) = &commit.puts[i];
        let suffix = object_suffix(seq, nonce, i);
        objects.push((suffix.clone(), Cow::Borrowed(value.as_slice())));
        slots.push((key.clone(), Slot::Object(suffix)));
    };
    for (i, (_, value)) in commit.puts.iter().enumerate() {
        if value.len() > PACK_VALUE_MAX {
            alone(i, &mut objects, &mut slots);
            continue;
        }
        match packs.last_mut() {
            Some((members, len)) if *len < PACK_TARGET => {
                members.push(i);
                *len += value.len();
            }
            _ => packs.push((vec![i], value.len())),
        }
    }
    for (j, (members, len)) in packs.into_iter().enumerate() {
        if let [i] = members[..] {
            alone(i, &mut objects, &mut slots);
            continue;
        }
        let suffix = pack_suffix(seq, nonce, j);
        let mut body = Vec::with_capacity(len);
        for i in members {
            let (key, value) = &commit.puts[i];
            let r = [body.len() as u64, value.len() as u64];
            body.extend_from_slice(value);
            slots.push((
                key.clone(),
                Slot::Packed {
                    p: suffix.clone(),
                    r,
                },
            ));
        }
        objects.push((suffix, Cow::Owned(body)));
    }
    if let Some(latest) = &commit.latest {
        let slot = match std::str::from_utf8(latest) {
            Ok(text) if latest.len() <= INLINE_LATEST_MAX => Slot::Inline {
                inline: text.to_owned(),
            },
            _ => {
                let suffix = object_suffix(seq, nonce, commit.puts.len());
                objects.push((suffix.clone(), Cow::Borrowed(latest.as_slice())));
                Slot::Object(suffix)
            }
        };
        slots.push((latest_key(&commit.run), slot));
    }
    Staged { objects, slots }
}

/// The new head of a commit of `slots` on `current`: the slots join the recent keys; with a
/// `flush` planned on the very head that is still current, the recent keys are replaced by the
/// flushed segment instead. Object suffixes the commit makes unreachable go to `superseded`
/// (a pack only once no slot names it, see [`garbage`]).
fn apply(
    current: &Head,
    read: &Head,
    slots: &[(String, Slot)],
    flush: Option<&Flush>,
    latest: &str,
    superseded: &mut Vec<String>,
) -> Head {
    let mut new = current.clone();
    let mut replaced = Vec::new();
    for (key, slot) in slots {
        new.gone.remove(key);
        if let Some(old) = new.keys.insert(key.clone(), slot.clone()) {
            replaced.push(old);
        }
    }
    let unchanged = current.seq == read.seq && current.nonce == read.nonce;
    match flush.filter(|_| unchanged) {
        Some(f) => {
            // Everything but the latest pointer is in the segment now.
            new.keys.retain(|k, _| k == latest);
            new.gone.clear();
            let mut segs = vec![f.seg.clone()];
            segs.extend(current.segs.iter().skip(f.consumed).cloned());
            new.segs = segs;
            superseded.extend(garbage(&replaced, &f.content.keys));
        }
        None => superseded.extend(garbage(&replaced, &new.keys)),
    }
    new
}

/// Whether `head` lists the segment of `flush` (the flush was applied and not merged away yet).
fn flushed(head: &Head, flush: Option<&Flush>) -> bool {
    flush.is_some_and(|f| head.segs.iter().any(|s| s.id == f.seg.id))
}

/// One commit attempt, staged on the head it read: the head slots it writes and the index
/// segment it flushes.
struct Attempt<'a> {
    commit: &'a Commit,
    /// The head the attempt starts from (empty when the run has none).
    read: Head,
    nonce: String,
    slots: Vec<(String, Slot)>,
    flush: Option<Flush>,
    /// The commit has no records and no pointer: its swap is declined when it changes nothing.
    empty: bool,
}

impl S3Store {
    /// [`afk_core::store::Store::commit`] on S3.
    pub(crate) async fn commit_one(&self, commit: &Commit) -> Result<()> {
        validate_commit(commit)?;
        check_sizes(commit)?;
        let (thread, run) = (&commit.thread, &commit.run);
        let empty = commit.puts.is_empty() && commit.latest.is_none();
        let (first, from_cache) = self.commit_head(commit, empty).await?;
        let read = first.0.clone().unwrap_or_else(Head::empty);
        check_epoch(commit, &read)?;
        let mut moves = Moves::new(commit.attention.as_ref());
        if empty && !moves.changes(&read) {
            return Ok(());
        }
        let nonce = new_nonce();
        let seq = read.seq + 1;
        let Staged {
            objects: bodies,
            slots,
        } = stage(commit, seq, &nonce);
        self.logs.remember(commit, &slots);
        let flush = self
            .plan_flush(thread, run, &read, &slots, seq, &nonce)
            .await?;
        // A commit that opens the run creates its marker before the swap (see `attention.rs`);
        // one that closes it, its entry in the index of finished runs (see `finished.rs`).
        let marker = moves.wants_marker(&read).then(|| {
            self.layout
                .marker(thread, run, &moves.mark(read.seq, &nonce))
        });
        let finished = (commit.attention == Some(Attention::Closed)).then(|| {
            self.layout.finished(&FinishedRun {
                finished_ms: store_now_ms(),
                thread: thread.clone(),
                run: run.clone(),
            })
        });
        let mut objects = self
            .write_objects(
                thread,
                run,
                bodies,
                flush.as_ref(),
                marker.into_iter().chain(finished),
            )
            .await?;
        let attempt = Attempt {
            commit,
            read,
            nonce,
            slots,
            flush,
            empty,
        };
        let (swapped, superseded) = self
            .swap_commit(&attempt, first, from_cache, &mut moves, &mut objects)
            .await;
        match swapped {
            Ok(new) => {
                let markers = moves
                    .leftovers()
                    .into_iter()
                    .map(|id| self.layout.marker(thread, run, id));
                self.clean_up_landed(&attempt, &superseded, new.as_ref(), markers)
                    .await;
                Ok(())
            }
            Err(e) => {
                // The markers it wrote too: like its records, no head names them.
                if !e.is_retryable() || e.kind() == ErrorKind::Conflict {
                    self.discard(objects).await;
                }
                Err(e)
            }
        }
    }

    /// Swap in the head of `attempt`, the first time from `first`. When the commit opens a run
    /// whose head turns out closed at a `seq` it wrote no marker for (it lost a race), write
    /// that marker (its key joins `objects`) and swap again. Returns the head written (`None`
    /// when an empty commit found nothing to change) and the objects it made unreachable.
    async fn swap_commit(
        &self,
        attempt: &Attempt<'_>,
        first: Read,
        from_cache: bool,
        moves: &mut Moves<'_>,
        objects: &mut Vec<String>,
    ) -> (Result<Option<Head>>, Vec<String>) {
        let (commit, thread, run) = (attempt.commit, &attempt.commit.thread, &attempt.commit.run);
        let latest = latest_key(run);
        let mut superseded: Vec<String> = Vec::new();
        let mut first = Some(first);
        for _ in 0..MAX_SWAPS {
            let cached = from_cache && first.is_some();
            let swapped = self
                .swap_head(
                    thread,
                    run,
                    &attempt.nonce,
                    first.take(),
                    cached,
                    |current| {
                        superseded.clear();
                        let current = current.cloned().unwrap_or_else(Head::empty);
                        check_epoch(commit, &current)?;
                        let mut new = apply(
                            &current,
                            &attempt.read,
                            &attempt.slots,
                            attempt.flush.as_ref(),
                            &latest,
                            &mut superseded,
                        );
                        Ok(match moves.apply(&current, &mut new) {
                            Outcome::NeedMarker => None,
                            Outcome::Same if attempt.empty => None,
                            _ => Some(new),
                        })
                    },
                )
                .await;
            let Some(seq) = moves.need.filter(|_| matches!(swapped, Ok(None))) else {
                return (swapped, superseded);
            };
            let key = self
                .layout
                .marker(thread, run, &moves.mark(seq, &attempt.nonce));
            objects.push(key.clone());
            if let Err(e) = self.put_record(key, Vec::new()).await {
                return (Err(e), superseded);
            }
        }
        let e = Error::conflict(format!(
            "run {run} of thread {thread}: the head moved under {MAX_SWAPS} opening commits"
        ));
        (Err(e.with_retryable(true)), superseded)
    }

    /// The head a commit starts from, as read (with its ETag), and whether it came from the
    /// head cache.
    async fn commit_head(&self, commit: &Commit, empty: bool) -> Result<(Read, bool)> {
        let (thread, run) = (&commit.thread, &commit.run);
        // The cached head only where the swap checks it again: an empty commit swaps nothing,
        // and a fence check that fails on a cached head is made again on the head as it is.
        let cached = if empty {
            None
        } else {
            self.heads
                .take(thread, run)
                .filter(|(head, _)| check_epoch(commit, head).is_ok())
        };
        let from_cache = cached.is_some();
        let first = match cached {
            Some((head, etag)) => (Some(head), Some(etag)),
            None => self.read_head(thread, run).await?,
        };
        Ok((first, from_cache))
    }

    /// Write a commit attempt's objects (`bodies`, by suffix), the segment of its `flush` and
    /// the `marker` (a key) of the run it opens, all at once. Returns their keys; when a write
    /// fails, they are discarded.
    async fn write_objects(
        &self,
        thread: &ThreadId,
        run: &RunId,
        bodies: Vec<(String, Cow<'_, [u8]>)>,
        flush: Option<&Flush>,
        markers: impl Iterator<Item = String>,
    ) -> Result<Vec<String>> {
        let mut objects: Vec<String> = Vec::with_capacity(bodies.len() + 2);
        let mut writes: Vec<_> = Vec::with_capacity(bodies.len() + 2);
        for key in markers {
            writes.push(self.put_record(key.clone(), Vec::new()));
            objects.push(key);
        }
        for (suffix, body) in bodies {
            let key = self.layout.object(thread, run, &suffix);
            // A pack is owned already: moved, not copied again.
            writes.push(self.put_record(key.clone(), body.into_owned()));
            objects.push(key);
        }
        if let Some(f) = flush {
            let name = self.layout.segment(thread, run, &f.seg.id);
            writes.push(self.put_record(name.clone(), f.body.clone()));
            objects.push(name);
        }
        let written = stream::iter(writes)
            .buffer_unordered(PARALLEL)
            .try_collect::<Vec<()>>()
            .await;
        if let Err(e) = written {
            self.discard(objects).await;
            return Err(e);
        }
        Ok(objects)
    }

    /// After `attempt` swapped in the head `new`: cache the segment it flushed, if the head
    /// lists it, and discard what the commit made unreachable (the `superseded` objects, and
    /// with the flush the objects it shadowed and the segments it merged; without it, the
    /// unused segment) with the attention `markers` it leaves behind, in one request.
    async fn clean_up_landed(
        &self,
        attempt: &Attempt<'_>,
        superseded: &[String],
        new: Option<&Head>,
        markers: impl Iterator<Item = String>,
    ) {
        let (thread, run) = (&attempt.commit.thread, &attempt.commit.run);
        if let Some(h) = new {
            self.logs.prune(thread, run, h);
        }
        let mut old: Vec<String> = superseded
            .iter()
            .map(|s| self.layout.object(thread, run, s))
            .chain(markers)
            .collect();
        if let Some(f) = &attempt.flush {
            if new.is_some_and(|h| flushed(h, Some(f))) {
                self.cache_segment(thread, run, &f.seg.id, f.content.clone(), f.body.len());
                old.extend(
                    f.shadowed
                        .iter()
                        .map(|s| self.layout.object(thread, run, s)),
                );
                old.extend(
                    attempt
                        .read
                        .segs
                        .iter()
                        .take(f.consumed)
                        .map(|s| self.layout.segment(thread, run, &s.id)),
                );
            } else {
                // Raced: the head moved, the slots went into its recent keys instead.
                old.push(self.layout.segment(thread, run, &f.seg.id));
            }
        }
        // A pack can leave both ways at once (its log entry inlined, its other values
        // overwritten by this commit).
        old.sort_unstable();
        old.dedup();
        self.discard(old).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use afk_core::store::Epoch;
    use afk_core::{RunId, ThreadId};

    use super::*;

    fn commit(sizes: &[usize]) -> Commit {
        Commit {
            thread: ThreadId::new("t").unwrap(),
            run: RunId::new("r").unwrap(),
            epoch: Epoch(1),
            puts: sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("effect:r:{i}:x"), vec![i as u8; n]))
                .collect(),
            latest: None,
            attention: None,
        }
    }

    /// Each put's value, cut out of the staged objects as a reader would.
    fn read_back(staged: &Staged<'_>) -> Vec<Vec<u8>> {
        let body = |name: &str| &staged.objects.iter().find(|(n, _)| n == name).unwrap().1;
        staged
            .slots
            .iter()
            .map(|(_, slot)| match slot {
                Slot::Object(o) => body(o).to_vec(),
                Slot::Packed { p, r: [start, len] } => {
                    body(p)[*start as usize..(*start + *len) as usize].to_vec()
                }
                Slot::Inline { inline } => inline.clone().into_bytes(),
            })
            .collect()
    }

    #[test]
    fn small_values_share_packs_and_large_ones_stand_alone() {
        let big = PACK_VALUE_MAX + 1;
        let c = commit(&[10, 0, big, 20, PACK_VALUE_MAX, 5]);
        let staged = stage(&c, 7, "ab");
        let names: Vec<&str> = staged.objects.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["00000000000000000007-ab/2", "00000000000000000007-ab/p0"]
        );
        let want: BTreeMap<&String, &Vec<u8>> = c.puts.iter().map(|(k, v)| (k, v)).collect();
        let got: BTreeMap<&String, Vec<u8>> = staged
            .slots
            .iter()
            .map(|(k, _)| k)
            .zip(read_back(&staged))
            .collect();
        assert_eq!(got.len(), want.len());
        for (k, v) in &got {
            assert_eq!(&want[k], &v, "{k}");
        }
    }

    #[test]
    fn packs_close_at_their_target_and_a_lone_value_is_its_own_object() {
        // 40 values of 256 KiB: 8 MiB per pack (32 values), then a pack of 8.
        let c = commit(&[PACK_VALUE_MAX; 40]);
        let staged = stage(&c, 1, "n");
        let sizes: Vec<usize> = staged.objects.iter().map(|(_, b)| b.len()).collect();
        assert_eq!(sizes, [32 * PACK_VALUE_MAX, 8 * PACK_VALUE_MAX]);
        assert_eq!(read_back(&staged).len(), 40);
        // One small value: an object of its own, no range to read.
        let one = commit(&[3]);
        let staged = stage(&one, 1, "n");
        assert!(matches!(staged.slots[..], [(_, Slot::Object(_))]));
    }
}
