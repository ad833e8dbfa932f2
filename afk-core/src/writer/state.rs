//! State shared by the writer handle, its tickets and its background task.
//!
//! Per run claim (run and epoch): how many commits were accepted (`submitted`, the sequence number of the newest),
//! the newest sequence number known durable (`durable`; per-run order makes it a watermark:
//! everything at or below it is written), and the error that failed the run, if any. A
//! claim's waiters (barriers, flushes, tickets) re-check after every change of that claim,
//! woken through the claim's own `Notify`, registered under the lock, so no wake-up is lost
//! and a write that ends wakes only the waiters of the claims it wrote (with thousands of runs
//! waiting, waking all of them on every write cost more than the writes). Submits waiting for
//! room in a full queue wait in line ([`RoomWait`]): each place that frees wakes one of them
//! (with thousands waiting, waking all of them for every place cost more than the writes);
//! all of them are woken when the writer shuts down or its background task stops.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;

use super::queue::Queue;

use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};
use crate::store::Epoch;

/// A run's claim inside the writer: the run and the epoch its commits carry. Each claim of a
/// run has its own sequence numbers and its own error, so a re-claimed run (a resume after a
/// failure or an abort, in this process or another) starts afresh, and the commits an aborted
/// attempt left queued (which fail `Fenced` after the new claim) never touch the new attempt.
pub(crate) type RunKey = (ThreadId, RunId, Epoch);

/// A map by run claim. foldhash's seeded fast hasher: every commit looks its claim up a few
/// times, and SipHash over two ids was most of that cost.
pub(crate) type RunMap<V> = HashMap<RunKey, V, foldhash::fast::RandomState>;

/// Counters of a [`Writer`](super::Writer), for tests and metrics (the public view is
/// [`RunnerStats`](crate::runner::RunnerStats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WriterStats {
    /// Commits accepted by `submit`.
    pub submitted: u64,
    /// Commits handed to the store and acknowledged (a merged commit counts once).
    pub written: u64,
    /// Commits that will never be written: failed, or dropped because their run had failed.
    pub failed: u64,
    /// Commits merged into a newer one of their run before being written.
    pub coalesced: u64,
    /// Store calls that wrote commits: `Store::commit_batch` calls of the background task and
    /// `Store::commit` calls of barriers writing their run's commit (sync mode: every write).
    pub batches: u64,
    /// Most commits handed to the store in one call.
    pub max_batch_len: u64,
    /// Of `batches`, the writes barriers made themselves (`Writer::barrier`).
    pub inline: u64,
    /// Accepted commits known durable (written, or merged into a written commit); filled in
    /// by [`Writer::stats`](super::Writer::stats).
    pub durable: u64,
    /// Store calls retried by the retry policy; filled in by
    /// [`Writer::stats`](super::Writer::stats).
    pub retries: u64,
    /// Wake-ups of submits waiting for room in a full queue; filled in by
    /// [`Writer::stats`](super::Writer::stats).
    pub room_wakeups: u64,
}

impl WriterStats {
    /// Commits accepted and not yet resolved (written, failed or merged).
    pub(crate) fn pending(&self) -> u64 {
        self.submitted
            .saturating_sub(self.written + self.failed + self.coalesced)
    }
}

#[derive(Debug, Default)]
pub(crate) struct RunState {
    pub(crate) submitted: u64,
    pub(crate) durable: u64,
    /// The newest sequence number someone waits for (a barrier, a flush, a ticket): the
    /// background task writes the run's held commits up to it without waiting for more.
    pub(crate) wanted: u64,
    pub(crate) error: Option<Arc<Error>>,
    /// Wakes the claim's waiters when its state changes; made by its first waiter.
    pub(crate) waiters: Option<Arc<Notify>>,
}

impl RunState {
    /// Wake the claim's waiters so they re-check (call after changing its state).
    pub(crate) fn wake(&self) {
        if let Some(n) = &self.waiters {
            n.notify_waiters();
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) runs: RunMap<RunState>,
    /// Shutdown has started: no new commits.
    pub(crate) closed: bool,
    /// Why the background task is gone, once it is.
    pub(crate) dead: Option<&'static str>,
    pub(crate) stats: WriterStats,
    pub(crate) first_failure: Option<Arc<Error>>,
    /// Durable commits of claims whose state was forgotten (see [`State::durable_total`]).
    pub(crate) retired_durable: u64,
    /// Every handle is gone: the background task writes what is queued and stops.
    pub(crate) dropped: bool,
    /// Accepted commits not handed to the store yet, merged per run (see the `worker`
    /// module). `submit` puts them here itself, under the lock, so a commit that merges into
    /// a queued one, or that the background task's timer will see in time, wakes nobody.
    pub(crate) queue: Queue,
    /// Run claims with a commit in a store call.
    pub(crate) busy: HashSet<RunKey, foldhash::fast::RandomState>,
    /// When the background task's timer fires next, if it is set: a held commit due no
    /// earlier needs no wake-up.
    pub(crate) armed: Option<Instant>,
    /// When a store call that wrote commits last answered (success or failure), whoever made
    /// it: a flush's deadline counts the store's silence from here, not the time the flush
    /// waited behind other runs' writes.
    pub(crate) answered: Option<Instant>,
}

impl State {
    /// The error a new commit of `key` must get, if any.
    pub(crate) fn refuse(&self, key: &RunKey) -> Option<Error> {
        if let Some(e) = self.runs.get(key).and_then(|r| r.error.as_ref()) {
            return Some(replay(e));
        }
        if self.closed {
            return Some(stopped("shut down"));
        }
        self.dead.map(stopped)
    }

    /// Forget the failed or finished states of claims of `key`'s run older than `key`'s epoch
    /// (called when a newer claim submits its first commit). A claim with commits still
    /// unresolved is kept, so its waiters still learn how they end.
    pub(crate) fn forget_older_claims(&mut self, key: &RunKey) {
        // A run's first claim (epoch 1) has no older claim to forget: a fresh run skips the
        // walk over every run's state, which cost O(runs in flight) per fresh run (O(N²) when
        // N runs start together).
        if key.2 <= Epoch(1) {
            return;
        }
        let mut retired = 0;
        self.runs.retain(|k, r| {
            let forget = k.0 == key.0
                && k.1 == key.1
                && k.2 < key.2
                && (r.error.is_some() || r.durable >= r.submitted);
            if forget {
                retired += r.durable;
                r.wake();
            }
            !forget
        });
        self.retired_durable += retired;
    }

    /// Forget the state of claim `key` (its commits are all durable).
    pub(crate) fn forget(&mut self, key: &RunKey) {
        if let Some(r) = self.runs.remove(key) {
            self.retired_durable += r.durable;
            r.wake();
        }
    }

    /// Accepted commits known durable, over every claim this writer has seen: per-run order
    /// makes each claim's `durable` a watermark (every commit at or below it is written), so
    /// the sum counts exactly the durable commits.
    pub(crate) fn durable_total(&self) -> u64 {
        self.retired_durable + self.runs.values().map(|r| r.durable).sum::<u64>()
    }

    /// Record that `key` failed with `error`: every later call for the run returns it.
    /// Returns the error the run now reports.
    pub(crate) fn fail_run(&mut self, key: &RunKey, error: Error) -> Arc<Error> {
        let error = Arc::new(error);
        let run = self.runs.entry(key.clone()).or_default();
        let kept = run.error.get_or_insert_with(|| error.clone()).clone();
        run.wake();
        self.stats.failed += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(error);
        }
        kept
    }
}

/// The error returned for a run that failed earlier: the same error again (kind, message, key
/// and source), not a wrapper that would say it twice.
pub(crate) fn replay(e: &Arc<Error>) -> Error {
    Error::clone(e)
}

/// The error for calls that can no longer be served because the background task is gone.
pub(crate) fn stopped(why: &str) -> Error {
    Error::unavailable(format!("checkpoint writer stopped ({why})")).with_retryable(false)
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Submits waiting for room in the queue, in line.
    room: Arc<Notify>,
    /// How many are waiting ([`RoomWait`]s alive).
    room_waiters: AtomicUsize,
    /// Wake-ups of submits waiting for room, so far.
    pub(crate) room_wakeups: std::sync::atomic::AtomicU64,
    /// Wakes the background task when a waiter raises a run's `wanted` (it may be holding
    /// that run's commits).
    pub(crate) wake: Notify,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            state: Mutex::new(State::default()),
            room: Arc::new(Notify::new()),
            room_waiters: AtomicUsize::new(0),
            room_wakeups: std::sync::atomic::AtomicU64::new(0),
            wake: Notify::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Get in line for room in the queue. Call it under the state lock, after seeing the
    /// queue full: a place freed after the lock is released wakes this waiter or one ahead of
    /// it.
    pub(crate) fn wait_room(self: &Arc<Self>) -> RoomWait {
        self.room_waiters.fetch_add(1, Ordering::SeqCst);
        let mut notified = Box::pin(self.room.clone().notified_owned());
        notified.as_mut().enable();
        RoomWait {
            notified,
            shared: self.clone(),
        }
    }

    /// `freed` places were freed: wake as many submits waiting for room (each re-checks).
    pub(crate) fn made_room(&self, freed: usize) {
        let waiting = self.room_waiters.load(Ordering::SeqCst);
        for _ in 0..freed.min(waiting) {
            self.room.notify_one();
        }
    }

    /// Wake every submit waiting for room (the writer shuts down or stopped: they re-check
    /// and get their error).
    pub(crate) fn wake_all_room(&self) {
        self.room.notify_waiters();
    }

    /// Wait until commit `seq` of `key` is durable (`Ok`), its run failed (that error), or the
    /// background task is gone with it unwritten (`Unavailable`, not retryable). Tells the
    /// background task that `seq` is wanted, so it stops holding it.
    pub(crate) async fn wait_for(&self, key: &RunKey, seq: u64) -> Result<()> {
        loop {
            let (notified, raised) = {
                let mut guard = self.lock();
                let st = &mut *guard;
                let dead = st.dead;
                let Some(run) = st.runs.get_mut(key) else {
                    return Ok(());
                };
                if run.durable >= seq {
                    return Ok(());
                }
                if let Some(e) = &run.error {
                    return Err(replay(e));
                }
                if let Some(why) = dead {
                    return Err(stopped(why));
                }
                let raised = run.wanted < seq;
                run.wanted = run.wanted.max(seq);
                // Registered under the lock: a change made after this check wakes it.
                let n = run.waiters.get_or_insert_with(Default::default).clone();
                let mut notified = Box::pin(n.notified_owned());
                notified.as_mut().enable();
                (notified, raised)
            };
            if raised {
                self.wake.notify_one();
            }
            notified.await;
        }
    }
}

/// Marks the writer dead when the background task ends, however it ends: return, panic, or
/// abort (dropping the task's future drops this guard).
#[derive(Debug)]
pub(crate) struct AliveGuard {
    pub(crate) shared: Arc<Shared>,
    pub(crate) finished: bool,
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        let why = if self.finished {
            "shut down"
        } else {
            "the background task panicked or was aborted"
        };
        {
            let mut st = self.shared.lock();
            st.dead.get_or_insert(why);
            st.runs.values().for_each(RunState::wake);
        }
        self.shared.wake_all_room();
    }
}

/// A submit's place in line for room in the queue ([`Shared::wait_room`]).
pub(crate) struct RoomWait {
    notified: std::pin::Pin<Box<OwnedNotified>>,
    shared: Arc<Shared>,
}

impl RoomWait {
    /// Wait until a place was freed for this waiter (or everyone is woken).
    pub(crate) async fn wait(mut self) {
        self.notified.as_mut().await;
        self.shared.room_wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for RoomWait {
    fn drop(&mut self) {
        // A waiter dropped after its wake-up passes it on (tokio's `notify_one` does that).
        self.shared.room_waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Proof that a commit was accepted; [`Ticket::wait`] awaits its durability.
#[derive(Debug, Clone)]
#[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
pub(crate) struct Ticket {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: RunKey,
    pub(crate) seq: u64,
}

#[cfg_attr(not(test), allow(dead_code))]
impl Ticket {
    /// Returns once this commit (and, per-run order, every earlier one of its run) is durable,
    /// or the error that failed its run, or `Unavailable` if the writer stopped before writing
    /// it. Never hangs on a dead writer.
    pub(crate) async fn wait(&self) -> Result<()> {
        self.shared.wait_for(&self.key, self.seq).await
    }
}
