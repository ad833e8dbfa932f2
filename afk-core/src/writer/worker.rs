//! The queue and the background task: merges, holds, batches, writes, resolves.
//!
//! `submit` puts each commit into the queue in the shared state itself, under its lock, in
//! submission order ([`enqueue`]; at most `queue_maxsize` entries: a commit that needs a place
//! of its own waits for room, one that merges takes none). It wakes the task only when the
//! task must act: for an entry due at once, or due before the task's timer fires. A barrier on
//! a run with no commit in flight takes the run's queued entry and writes it on its own task
//! (`Writer::barrier`, [`take_next`], [`record_one`]), so a step needs no wake-up of the task
//! and no wake-up back; everything else is the task's, which hands entries to the store:
//! - **merging**: a commit merges into the newest queued entry of its run claim if that entry
//!   has not been handed to the store yet and the merged commit stays within the store's
//!   limits (see [`merge`]). Because it is the *newest* entry of the run, nothing else of the
//!   run lies between them, so a run's records are never reordered: the merged commit is the
//!   run's commits applied in order, atomically (every put of both, the newer value for a key
//!   in both, the newer latest pointer). A crash leaves the run at a prefix of its submitted
//!   commits, as before, only with coarser steps;
//! - **holding**: a run's queued entry is handed over only once someone waits for it (a
//!   barrier, a flush or a ticket raises the run's `wanted`), once its oldest commit is
//!   [`CheckpointConfig::hold`] old, once a newer entry of the run exists (a merge was refused
//!   by the limits), or when the queue is full or the writer shuts down. Until then everything
//!   the run submits merges into it, so the commits between two barriers of a run travel as
//!   one; the runner waits only at barriers, so holding never delays it;
//! - **pipelining per run**: at most one commit of a run claim is in a store call at a time;
//!   the run's next entry (everything it queued meanwhile, merged) is handed over once that
//!   call answers and it is due. Runs do not wait for each other: up to [`MAX_CALLS`] store
//!   calls are in flight at once, each for runs that have none in flight;
//! - **batching**: the entries handed over together, at most one per run claim and at most
//!   `max_batch_size`, go to one `commit_batch` call. One per run claim because a batch is not
//!   atomic as a whole: if a run's first commit failed and its second succeeded, the second
//!   would stand without the first. Two claims of one run may share a batch: once the newer
//!   claim exists, every commit of the older one is fenced, whatever the order;
//! - **failure**: a commit that still fails after the retry policy fails its run claim; the
//!   claim's queued entries are dropped with that error (a fenced claim's all fail with
//!   `Fenced`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::config::CheckpointConfig;
use super::state::{AliveGuard, RunKey, Shared, State};
use crate::error::{Error, Result};
use crate::store::{Commit, RetryStore, Store};

/// Most store calls the task keeps in flight at once (each for different runs).
pub(crate) const MAX_CALLS: usize = 8;

/// Largest merged commit, in payload bytes ([`Commit::byte_len`]): a backlog is written in
/// commits of about this size rather than one unbounded request.
pub(crate) const MAX_MERGED_BYTES: usize = 4 << 20;

/// A commit accepted by `submit`.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: RunKey,
    pub(crate) seq: u64,
    pub(crate) commit: Commit,
    /// The latest pointer takes the value of `commit.puts[i]` (then `commit.latest` is
    /// `None`): set when the commit is handed to the store ([`materialize_latest`]), so the
    /// pointers of the records a merge supersedes are never copied.
    pub(crate) latest_put: Option<usize>,
}

/// Give `commit` its latest pointer from `commit.puts[latest_put]`, if that is where it is.
pub(crate) fn materialize_latest(commit: &mut Commit, latest_put: Option<usize>) {
    if let Some(v) = latest_put
        .and_then(|i| commit.puts.get(i))
        .map(|(_, v)| v.clone())
    {
        commit.latest = Some(v);
    }
}

/// A queued entry and, once something merged into it, an index of its put keys.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) entry: Entry,
    /// Sequence number of the oldest commit merged into it.
    first: u64,
    /// When its oldest commit was accepted (`None` when the writer does not hold).
    since: Option<Instant>,
    /// A newer entry of its run exists (a merge into this one was refused): it is due.
    sealed: bool,
    index: Option<HashMap<String, usize>>,
}

#[cfg(test)]
impl Queued {
    /// An entry as `enqueue` appends it when the writer does not hold.
    pub(crate) fn new(entry: Entry) -> Self {
        Queued {
            first: entry.seq,
            entry,
            since: None,
            sealed: false,
            index: None,
        }
    }
}

/// The store's limits a merged commit must respect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    max_keys: Option<usize>,
    max_value: Option<usize>,
}

impl Limits {
    pub(crate) fn of(store: &dyn Store) -> Self {
        let caps = store.capabilities();
        Limits {
            max_keys: caps.max_commit_keys,
            max_value: caps.max_value_size,
        }
    }

    /// Whether `c` is within the limits on its own. A commit that is not (the store will
    /// reject it) is never merged, so it fails alone and its run's earlier commits still land.
    fn admits(&self, c: &Commit) -> bool {
        self.max_keys.is_none_or(|m| c.puts.len() <= m)
            && self
                .max_value
                .is_none_or(|m| c.puts.iter().all(|(_, v)| v.len() <= m))
    }
}

/// Whether entries are held (there is nothing to merge into a held entry with merging off).
fn holds(config: &CheckpointConfig) -> bool {
    config.coalesce_runtime_state && !config.hold.is_zero()
}

/// Queue `entry` (called by `submit`, under the lock): merged into its run claim's newest
/// queued entry when the limits allow, else appended. Returns whether the background task
/// must be woken: for a new entry that is due at once (nothing is held, or the entry it could
/// not merge into is now sealed) or that falls due before the task's timer fires. A commit
/// that merged, or that the timer will find in time, wakes nobody.
pub(crate) fn enqueue(
    st: &mut State,
    entry: Entry,
    limits: Limits,
    config: &CheckpointConfig,
) -> bool {
    let mut entry = entry;
    let mut sealed = false;
    if config.coalesce_runtime_state
        && let Some(last) = st.queue.newest_mut(&entry.key)
    {
        match merge(last, entry, limits) {
            None => {
                st.stats.coalesced += 1;
                return false;
            }
            Some(refused) => {
                last.sealed = true;
                sealed = true;
                entry = refused;
            }
        }
    }
    let since = holds(config).then(Instant::now);
    let wake = sealed
        || match since {
            None => true,
            Some(since) => st.armed.is_none_or(|at| at > since + config.hold),
        };
    st.queue.push_back(Queued {
        first: entry.seq,
        entry,
        since,
        sealed: false,
        index: None,
    });
    wake
}

/// Whether a commit of run claim `key` would merge into a queued entry rather than take a
/// new place in the queue (so a full queue need not make it wait).
pub(crate) fn would_merge(st: &State, key: &RunKey, commit: &Commit, limits: Limits) -> bool {
    st.queue.newest(key).is_some_and(|q| {
        let old = &q.entry.commit;
        // As if every key were new and the pointer moved: never a yes `merge` refuses.
        mergeable(old, commit, limits) && keys_fit(old, commit.puts.len() + 1, limits)
    })
}

/// Take the oldest queued entry of run claim `key` (the caller writes it, so the run is
/// marked busy: the background task leaves its later entries alone until it is recorded).
pub(crate) fn take_next(st: &mut State, key: &RunKey) -> Option<Entry> {
    let q = st.queue.take_oldest(key)?;
    st.busy.insert(key.clone());
    st.stats.inline += 1;
    Some(q.entry)
}

/// Record the end of a write of run claim `key` made outside the background task (see
/// `Writer::barrier`): the same bookkeeping as the task's ([`record`]), then a wake-up for the
/// task if the run has more queued (it skipped them while the run was busy).
pub(crate) fn record_one(shared: &Shared, key: &RunKey, seq: u64, result: Result<()>) {
    let (more, dropped) = {
        let mut st = shared.lock();
        let dropped = record(&mut st, 1, std::iter::once((key.clone(), seq, result)));
        (st.queue.has(key), dropped)
    };
    shared.made_room(dropped);
    if more {
        shared.wake.notify_one();
    }
}

/// The bookkeeping of one store call's end (under the lock), whoever made it: each run claim
/// is no longer busy; a written commit makes its sequence number durable; a failed one fails
/// its claim, whose queued entries are dropped with it. The waiters of each claim are woken;
/// returns how many queued entries were dropped (room for submits waiting on a full queue).
fn record(
    st: &mut State,
    commits: usize,
    done: impl IntoIterator<Item = (RunKey, u64, Result<()>)>,
) -> usize {
    st.stats.batches += 1;
    st.stats.max_batch_len = st.stats.max_batch_len.max(commits as u64);
    st.answered = Some(Instant::now());
    let mut failed_runs: HashSet<RunKey> = HashSet::new();
    for (key, seq, result) in done {
        st.busy.remove(&key);
        match result {
            Ok(()) => {
                st.stats.written += 1;
                let run = st.runs.entry(key).or_default();
                run.durable = run.durable.max(seq);
                run.wake();
            }
            Err(e) => {
                tracing::warn!(
                    thread = %key.0, run = %key.1, epoch = %key.2, error = %e,
                    "checkpoint write failed; failing the run"
                );
                st.fail_run(&key, e);
                failed_runs.insert(key);
            }
        }
    }
    if failed_runs.is_empty() {
        return 0;
    }
    let dropped = st.queue.drop_runs(&failed_runs);
    st.stats.failed += dropped as u64;
    dropped
}

/// What a finished store call reports: the `(run, seq)` of each commit and its result.
type Done = (Vec<(RunKey, u64)>, Vec<Result<()>>);

pub(crate) struct Worker {
    shared: Arc<Shared>,
    store: Arc<RetryStore<dyn Store>>,
    config: CheckpointConfig,
    calls: FuturesUnordered<BoxFuture<'static, Done>>,
}

/// What [`Worker::launch`] leaves to the loop.
struct Launched {
    /// Set the timer to this (the earliest held entry falls due then).
    rearm: Option<Instant>,
    /// Shutting down and nothing is left: stop.
    stop: bool,
}

impl Worker {
    pub(crate) fn new(
        shared: Arc<Shared>,
        store: Arc<RetryStore<dyn Store>>,
        config: CheckpointConfig,
    ) -> Self {
        Worker {
            shared,
            store,
            config,
            calls: FuturesUnordered::new(),
        }
    }

    pub(crate) async fn run(mut self) {
        let mut guard = AliveGuard {
            shared: self.shared.clone(),
            finished: false,
        };
        let shared = self.shared.clone();
        // One timer for the earliest held entry, re-armed only when that changes: a reset can
        // wake the timer driver's thread, too dear per step. A firing that finds nothing due
        // costs a loop.
        let timer = tokio::time::sleep(std::time::Duration::ZERO);
        tokio::pin!(timer);
        let mut timer_set = false;
        loop {
            let launched = self.launch();
            if launched.stop {
                break;
            }
            if let Some(at) = launched.rearm {
                timer.as_mut().reset(at);
                timer_set = true;
            }
            tokio::select! {
                Some(done) = self.calls.next(), if !self.calls.is_empty() => self.finish(done),
                () = shared.wake.notified() => {}
                () = &mut timer, if timer_set => {
                    timer_set = false;
                    shared.lock().armed = None;
                }
            }
        }
        guard.finished = true;
    }

    /// Hand the due entries of runs with no commit in flight to the store, up to
    /// [`MAX_CALLS`] calls, and say when the earliest entry still held falls due (if the
    /// timer is not already set earlier) and whether to stop.
    fn launch(&mut self) -> Launched {
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        let closing = st.closed || st.dropped;
        if st.queue.is_empty() {
            return Launched {
                rearm: None,
                stop: closing && self.calls.is_empty(),
            };
        }
        let hold = self.config.hold;
        let now = holds(&self.config).then(Instant::now);
        let cap = self.config.queue_maxsize;
        let was_full = st.queue.len() >= cap;
        let full = closing || was_full;
        let mut held_until: Option<Instant> = None;
        let mut took = 0;
        while self.calls.len() < MAX_CALLS {
            let max = self.config.max_batch_size;
            let mut taken: Vec<u64> = Vec::new();
            held_until = None;
            for (at, q) in st.queue.iter() {
                if taken.len() >= max {
                    break;
                }
                let until = match (q.since, now) {
                    (Some(since), Some(now)) if !full && !q.sealed => {
                        let wanted = st.runs.get(&q.entry.key).map_or(0, |r| r.wanted);
                        (wanted < q.first && since + hold > now).then_some(since + hold)
                    }
                    _ => None,
                };
                let free = !st.busy.contains(&q.entry.key);
                match until {
                    // Entries arrive in time order: the first held one falls due first.
                    Some(until) if free && held_until.is_none() => held_until = Some(until),
                    Some(_) => {}
                    // One entry per run claim per call: the claim is busy once picked.
                    None if free => {
                        st.busy.insert(q.entry.key.clone());
                        taken.push(at);
                    }
                    None => {}
                }
            }
            let mut picked: Vec<(RunKey, u64)> = Vec::with_capacity(taken.len());
            let mut commits: Vec<Commit> = Vec::with_capacity(taken.len());
            for at in taken {
                let Some(q) = st.queue.take(at) else { continue };
                picked.push((q.entry.key, q.entry.seq));
                let mut commit = q.entry.commit;
                materialize_latest(&mut commit, q.entry.latest_put);
                commits.push(commit);
            }
            if picked.is_empty() {
                break;
            }
            took += commits.len();
            let store = self.store.clone();
            self.calls.push(Box::pin(async move {
                let results = store.commit_batch(&commits).await;
                (picked, results)
            }));
        }
        let rearm = held_until.filter(|&at| st.armed.is_none_or(|a| at < a));
        if rearm.is_some() {
            st.armed = rearm;
        }
        drop(guard);
        // Each place freed lets one submit waiting for room go on.
        self.shared.made_room(took);
        Launched { rearm, stop: false }
    }

    fn finish(&mut self, (picked, results): Done) {
        let commits = picked.len();
        let mut results = results.into_iter();
        let done = picked.into_iter().map(|(key, seq)| {
            let result = results.next().unwrap_or_else(|| {
                Err(Error::unexpected(
                    "store answered fewer results than commits in the batch",
                ))
            });
            (key, seq, result)
        });
        let dropped = record(&mut self.shared.lock(), commits, done);
        self.shared.made_room(dropped);
    }
}

/// Whether `new` may merge into `old` but for the key count ([`keys_fit`]): one claim, each
/// within the store's limits on its own, the merged payload within [`MAX_MERGED_BYTES`].
fn mergeable(old: &Commit, new: &Commit, limits: Limits) -> bool {
    old.epoch == new.epoch
        && limits.admits(old)
        && limits.admits(new)
        && old.byte_len() + new.byte_len() <= MAX_MERGED_BYTES
}

/// Whether `old` gaining `more` keys (new puts, the latest pointer) stays within the store's
/// key limit.
fn keys_fit(old: &Commit, more: usize, limits: Limits) -> bool {
    limits.max_keys.is_none_or(|m| old.puts.len() + more <= m)
}

/// Below this many puts a merged commit finds keys by scanning; above, through an index.
const SCAN_MAX: usize = 16;

/// Merge `newer` into the queued `older` (both of one run claim): every put of both, the newer
/// value for a key in both, the newer latest pointer if it has one, the newer attention if it
/// has one, and the newer sequence number. Returns `newer` back (and changes nothing) if either is outside the store's limits
/// on its own, or the merged commit would carry more keys than the store takes or more than
/// [`MAX_MERGED_BYTES`].
fn merge(older: &mut Queued, newer: Entry, limits: Limits) -> Option<Entry> {
    let (old, new) = (&older.entry.commit, &newer.commit);
    if !mergeable(old, new, limits) {
        return Some(newer);
    }
    if older.index.is_none() && old.puts.len() + new.puts.len() > SCAN_MAX {
        older.index = Some(
            old.puts
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect(),
        );
    }
    let position =
        |index: &Option<HashMap<String, usize>>, puts: &[(String, Vec<u8>)], k: &str| match index {
            Some(index) => index.get(k).copied(),
            None => puts.iter().position(|(o, _)| o == k),
        };
    let added = new
        .puts
        .iter()
        .filter(|(k, _)| position(&older.index, &old.puts, k).is_none())
        .count();
    let latest = usize::from(
        old.latest.is_some()
            || new.latest.is_some()
            || older.entry.latest_put.is_some()
            || newer.latest_put.is_some(),
    );
    if !keys_fit(old, added + latest, limits) {
        return Some(newer);
    }
    let Entry {
        seq,
        commit,
        latest_put,
        ..
    } = newer;
    let old = &mut older.entry.commit;
    // The newer commit moves the pointer: the older one's lazy pointer is dropped unmade.
    if latest_put.is_some() || commit.latest.is_some() {
        older.entry.latest_put = None;
        old.latest = None;
    }
    for (j, (k, v)) in commit.puts.into_iter().enumerate() {
        let i = match position(&older.index, &old.puts, &k) {
            Some(i) => {
                // The pointer holds the value it was given, not a newer value of its key.
                if older.entry.latest_put == Some(i) {
                    older.entry.latest_put = None;
                    old.latest = Some(std::mem::replace(&mut old.puts[i].1, v));
                } else {
                    old.puts[i].1 = v;
                }
                i
            }
            None => {
                if let Some(index) = older.index.as_mut() {
                    index.insert(k.clone(), old.puts.len());
                }
                old.puts.push((k, v));
                old.puts.len() - 1
            }
        };
        if latest_put == Some(j) {
            older.entry.latest_put = Some(i);
        }
    }
    if commit.latest.is_some() {
        old.latest = commit.latest;
    }
    if commit.attention.is_some() {
        old.attention = commit.attention;
    }
    older.entry.seq = seq;
    None
}
