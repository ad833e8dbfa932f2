//! The write-behind checkpoint writer.
//!
//! The runner hands every checkpoint [`Commit`] to a [`Writer`]. With
//! [`CheckpointConfig::async_writes`] on (the default) commits go into a bounded queue that
//! merges a run's consecutive unwritten commits into one atomic commit and holds them until
//! someone waits for them (a barrier, a flush, a ticket) or they are
//! [`CheckpointConfig::hold`] old. A barrier writes its run's queued commit itself when the run
//! has none in flight; one background tokio task writes the rest, keeps one commit of each run
//! in flight, batches commits of different runs into one [`Store::commit_batch`] call; both
//! retry retryable failures. With it off, [`Writer::submit`] writes inline. A step thus costs
//! one store round trip, the barrier's, instead of one per commit, and on a fast store it stays
//! on its run's thread. The guarantees are the same in both modes:
//!
//! - **per-run order**: a run's commits reach the store in submission order; merging only joins
//!   a commit to the run's newest queued one (records unioned, the newer value and the newer
//!   latest pointer win), so the merged commit is the run's commits applied in order, atomically;
//! - **per claim**: the writer tracks each claim of a run (its [`Epoch`]) on its own: sequence
//!   numbers, durability and errors belong to `(thread, run, epoch)`. Once a run is claimed
//!   again, the older claim's queued commits can only fail with `Fenced`, so they are never
//!   ordered against the new claim's and their failure is not the new claim's;
//! - **barrier**: [`Writer::barrier`] returns once everything queued for the run claim is
//!   durable (the runner calls it before every side effect);
//! - **terminal flush**: [`Writer::flush`] is the barrier bounded by a timeout; a timeout is
//!   `Timeout` and a store error is returned, never only logged (AFK swallowed both);
//! - **failures**: a write that still fails after the retry policy fails its run claim: every
//!   later `submit`, `barrier` and `flush` of that claim returns that error, and the claim's
//!   queued commits are dropped with it (a `Fenced` claim's all fail with `Fenced`). Nothing is
//!   dropped silently. The error stays with that claim only: resuming the run means claiming
//!   it again (a new epoch), whose commits go through the same writer afresh. The state of a
//!   failed claim is forgotten when a newer claim of the run submits its first commit;
//! - **no hang**: if the background task dies (panic, abort, runtime shutdown), every pending and
//!   later call returns `Unavailable` ("checkpoint writer stopped"), not retryable; a store
//!   that panics in a write a barrier makes itself fails that run claim (`Unexpected`), not
//!   the caller's task;
//! - **shutdown**: [`Writer::shutdown`] drains the queue within a bound and reports what could
//!   not be written.
//!
//! Commits are atomic in the store, and a merged commit is one commit, so aborting the writer at
//! any point leaves every run at some prefix of its commits: never a pointer to a missing
//! record.
//!
//! Private: the writer is an internal of the [`Runner`](crate::runner::Runner), which builds
//! its own and exposes its counters as [`RunnerStats`](crate::runner::RunnerStats). The runner
//! uses `new`, `submit`, `barrier`, `flush` and `stats`; `shutdown`, `abort`, `run_error` and
//! [`Ticket`] complete the contract above and are exercised by the writer's tests.

mod config;
mod queue;
mod state;
mod worker;

#[cfg(test)]
mod tests;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::task::JoinHandle;

pub use config::CheckpointConfig;
pub(crate) use state::{Ticket, WriterStats};

use state::{RunKey, Shared, replay, stopped};
use worker::{Entry, Limits, Worker};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::store::{Commit, Epoch, RandomSource, RetryStore, Store};

/// How long a flush that gave up waited, and for how long before that the store had answered
/// no write.
struct Silence {
    waited: Duration,
    silent: Duration,
}

/// Handle to a checkpoint writer. Cheap to clone; all clones share one queue and task. See the
/// module docs for the guarantees.
#[derive(Clone)]
pub(crate) struct Writer {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    store: Arc<dyn Store>,
    retrying: Arc<RetryStore<dyn Store>>,
    config: CheckpointConfig,
    /// The store's limits a merged commit respects.
    limits: Limits,
    #[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
    task: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("store", &self.inner.store)
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Writer {
    /// Start a writer over `store` with `config` (clamped, see [`CheckpointConfig::clamped`]),
    /// drawing retry jitter from `jitter`. In async mode this spawns the background task on the
    /// current tokio runtime; outside a runtime it fails with `InvalidConfig`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        config: CheckpointConfig,
        jitter: RandomSource,
    ) -> Result<Self> {
        let config = config.clamped();
        let shared = Arc::new(Shared::new());
        let retrying = Arc::new(RetryStore::from_arc(
            store.clone(),
            config.retry.clone(),
            jitter,
        ));
        let task = if config.async_writes {
            let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
                Error::invalid_config("the checkpoint writer needs a tokio runtime").with_source(e)
            })?;
            let worker = Worker::new(shared.clone(), retrying.clone(), config.clone());
            Some(runtime.spawn(worker.run()))
        } else {
            None
        };
        let inner = Inner {
            shared,
            limits: Limits::of(store.as_ref()),
            store,
            retrying,
            config,
            task: Mutex::new(task),
        };
        Ok(Writer {
            inner: Arc::new(inner),
        })
    }

    #[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
    /// The settings in force (after clamping).
    pub(crate) fn config(&self) -> &CheckpointConfig {
        &self.inner.config
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> WriterStats {
        let st = self.inner.shared.lock();
        WriterStats {
            durable: st.durable_total(),
            retries: self.inner.retrying.retries(),
            room_wakeups: self
                .inner
                .shared
                .room_wakeups
                .load(std::sync::atomic::Ordering::Relaxed),
            ..st.stats
        }
    }

    #[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
    /// The error that failed the run's claim `epoch`, if one did.
    pub(crate) fn run_error(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Option<Error> {
        let key = (thread.clone(), run.clone(), epoch);
        self.inner
            .shared
            .lock()
            .runs
            .get(&key)
            .and_then(|r| r.error.as_ref())
            .map(replay)
    }

    /// Queue `commit` (async mode) or write it now (sync mode).
    ///
    /// `coalescible` marks a pure snapshot commit (the runner's `runtime_state` writes). Every
    /// commit, snapshot or not, may be merged into the run's newest queued commit that is not
    /// yet written (unless [`CheckpointConfig::coalesce_runtime_state`] is off); the flag only
    /// describes the commit. Waits while the queue is full (backpressure).
    ///
    /// Errors: the error that failed the run earlier; `Unavailable` (not retryable) after
    /// [`Writer::shutdown`] or if the background task is gone. In sync mode, the store's error
    /// after retries (which also fails the run).
    pub(crate) async fn submit(&self, commit: Commit, coalescible: bool) -> Result<Ticket> {
        // Merging does not depend on it (see above); kept so callers need not change.
        let _ = coalescible;
        self.submit_entry(commit, None).await
    }

    /// [`Writer::submit`] of a commit of one record that also moves the latest pointer to it:
    /// `commit` has one put and no `latest`; the pointer's value (the record's bytes) is made
    /// when the commit is handed to the store, so a record that a newer one supersedes in a
    /// merged commit is never copied for the pointer.
    pub(crate) async fn submit_record(&self, commit: Commit) -> Result<Ticket> {
        debug_assert!(commit.puts.len() == 1 && commit.latest.is_none());
        let latest = (commit.puts.len() == 1 && commit.latest.is_none()).then_some(0);
        self.submit_entry(commit, latest).await
    }

    /// Queue or write `commit`; `latest_put`: the latest pointer takes the value of that put
    /// (see [`Entry::latest_put`]).
    async fn submit_entry(&self, mut commit: Commit, latest_put: Option<usize>) -> Result<Ticket> {
        let key: RunKey = (commit.thread.clone(), commit.run.clone(), commit.epoch);
        if !self.inner.config.async_writes {
            worker::materialize_latest(&mut commit, latest_put);
            return self.submit_sync(key, commit).await;
        }
        let shared = &self.inner.shared;
        let mut commit = Some(commit);
        loop {
            // The queue is full: wait in line until the task makes room (backpressure).
            let room = match self.enqueue(&key, &mut commit, latest_put)? {
                Ok(ticket) => return Ok(ticket),
                Err(room) => room,
            };
            shared.wake.notify_one();
            room.wait().await;
        }
    }

    /// One attempt of [`Writer::submit_entry`] in async mode, under the lock: the ticket, or,
    /// when the queue has no room for it, `commit` left in place and a place in line for room
    /// (taken under the lock, so a place freed after it is not missed). A submit that leaves
    /// room behind it, or that leaves with an error, wakes the next in line: a wake-up is
    /// never spent on a submit that no longer needs it.
    fn enqueue(
        &self,
        key: &RunKey,
        commit: &mut Option<Commit>,
        latest_put: Option<usize>,
    ) -> Result<std::result::Result<Ticket, state::RoomWait>> {
        let shared = &self.inner.shared;
        let mut st = shared.lock();
        let room_left = st.queue.len() < self.inner.config.queue_maxsize;
        if let Some(e) = st.refuse(key) {
            drop(st);
            shared.made_room(usize::from(room_left));
            return Err(e);
        }
        let Some(c) = commit.take() else {
            return Err(Error::unexpected("a commit submitted twice"));
        };
        // A full queue makes a commit that needs a place of its own wait; one that merges
        // into its run's queued entry takes no place.
        if st.queue.len() >= self.inner.config.queue_maxsize
            && !worker::would_merge(&st, key, &c, self.inner.limits)
        {
            *commit = Some(c);
            return Ok(Err(shared.wait_room()));
        }
        // One lookup for a claim already known (every commit but a claim's first).
        let seq = match st.runs.get_mut(key) {
            Some(run) => {
                run.submitted += 1;
                run.submitted
            }
            None => {
                st.forget_older_claims(key);
                let run = st.runs.entry(key.clone()).or_default();
                run.submitted += 1;
                run.submitted
            }
        };
        st.stats.submitted += 1;
        let entry = Entry {
            key: key.clone(),
            seq,
            commit: c,
            latest_put,
        };
        let wake = worker::enqueue(&mut st, entry, self.inner.limits, &self.inner.config);
        let room_left = st.queue.len() < self.inner.config.queue_maxsize;
        drop(st);
        if wake {
            shared.wake.notify_one();
        }
        shared.made_room(usize::from(room_left));
        Ok(Ok(Ticket {
            shared: shared.clone(),
            key: key.clone(),
            seq,
        }))
    }

    async fn submit_sync(&self, key: RunKey, commit: Commit) -> Result<Ticket> {
        if let Some(e) = self.inner.shared.lock().refuse(&key) {
            return Err(e);
        }
        // Handed over: the store may keep the bytes instead of copying them.
        let result = self
            .inner
            .retrying
            .commit_owned(commit)
            .await
            .map_err(Error::from);
        let mut st = self.inner.shared.lock();
        st.stats.submitted += 1;
        st.stats.batches += 1;
        st.stats.max_batch_len = 1;
        st.answered = Some(tokio::time::Instant::now());
        match result {
            Ok(()) => {
                st.stats.written += 1;
                if !st.runs.contains_key(&key) {
                    st.forget_older_claims(&key);
                }
                let run = st.runs.entry(key.clone()).or_default();
                run.submitted += 1;
                run.durable = run.submitted;
                let seq = run.submitted;
                Ok(Ticket {
                    shared: self.inner.shared.clone(),
                    key,
                    seq,
                })
            }
            Err(e) => Err(replay(&st.fail_run(&key, e))),
        }
    }

    /// Returns once every commit submitted for `(thread, run)` under claim `epoch` so far is
    /// durable; or the error that failed that claim; or `Unavailable` if the writer stopped
    /// first. Not bounded by time (the retry policy bounds each write); use [`Writer::flush`]
    /// for a bound.
    ///
    /// When the run has no commit in a store call, the caller writes the run's queued commit
    /// itself, on its own task, rather than waking the background task and waiting to be woken
    /// back: a step then stays on one thread. The write is the same one the task would make
    /// (same merged commit, same retries, same bookkeeping). If the caller is dropped while
    /// that write is in flight (its run was aborted), the write is finished on a task of its
    /// own and recorded as if the background task had made it, so an abort loses nothing the
    /// task would have written.
    pub(crate) async fn barrier(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        let key: RunKey = (thread.clone(), run.clone(), epoch);
        // What was submitted when the barrier was called; later commits are not its business.
        let mut goal = None;
        loop {
            let (target, entry) = {
                let mut guard = self.inner.shared.lock();
                let st = &mut *guard;
                let target = match st.runs.get(&key) {
                    None => return Ok(()),
                    Some(r) => match &r.error {
                        Some(e) => return Err(replay(e)),
                        None => *goal.get_or_insert(r.submitted),
                    },
                };
                if st.runs.get(&key).is_some_and(|r| r.durable >= target) {
                    return Ok(());
                }
                if let Some(why) = st.dead {
                    return Err(stopped(why));
                }
                let entry = if st.busy.contains(&key) {
                    None
                } else {
                    worker::take_next(st, &key)
                };
                (target, entry)
            };
            let Some(entry) = entry else {
                return self.inner.shared.wait_for(&key, target).await;
            };
            // A place freed: the next submit waiting for room goes on.
            self.inner.shared.made_room(1);
            let mut call = InlineCall::start(&self.inner, entry);
            // A store that panics fails this claim, as a write of the background task fails
            // it; it does not take the run's task down.
            let result = match AssertUnwindSafe(&mut call).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => Err(Error::unexpected(format!(
                    "the store panicked during a checkpoint write: {}",
                    panic_text(panic.as_ref())
                ))),
            };
            call.finish(result);
        }
    }

    /// Stop holding the commits submitted for `(thread, run)` under claim `epoch` so far: the
    /// background task writes them as soon as the run has no write in flight, as a barrier
    /// would, without waiting for them. The runner calls it when a run's task ends without a
    /// terminal flush (e.g. it was aborted), so that run's last commits reach the store now
    /// instead of after [`CheckpointConfig::hold`].
    pub(crate) fn release(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) {
        let key: RunKey = (thread.clone(), run.clone(), epoch);
        let raised = {
            let mut st = self.inner.shared.lock();
            match st.runs.get_mut(&key) {
                Some(r) if r.error.is_none() && r.wanted < r.submitted => {
                    r.wanted = r.submitted;
                    true
                }
                _ => false,
            }
        };
        if raised {
            self.inner.shared.wake.notify_one();
        }
    }

    /// The terminal flush: [`Writer::barrier`] bounded by `timeout` of the store's silence (the
    /// runner passes [`CheckpointConfig::flush_timeout`]; see `within_silence`). On success
    /// the writer forgets the run's state (a later submit of the run starts afresh); a failed
    /// run's error is kept.
    ///
    /// Errors: `Timeout` if the run's commits are not durable after `timeout` with no store
    /// answer for `timeout` (they stay queued); the run's store error; `Unavailable` if the
    /// writer stopped first.
    pub(crate) async fn flush(
        &self,
        thread: &ThreadId,
        run: &RunId,
        epoch: Epoch,
        timeout: Duration,
    ) -> Result<()> {
        // A timeout cuts nothing short: a write the barrier was making goes on as a task of its
        // own (see `barrier`), and what is still queued is released to the background task.
        match self
            .within_silence(timeout, self.barrier(thread, run, epoch))
            .await
        {
            Err(silent) => {
                self.release(thread, run, epoch);
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "checkpoint flush of run {run} did not finish: it waited {:.3} s and the \
                         store answered no checkpoint write for {:.3} s",
                        silent.waited.as_secs_f64(),
                        silent.silent.as_secs_f64()
                    ),
                ))
            }
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => {
                let key: RunKey = (thread.clone(), run.clone(), epoch);
                let mut st = self.inner.shared.lock();
                if st
                    .runs
                    .get(&key)
                    .is_some_and(|r| r.error.is_none() && r.durable >= r.submitted)
                {
                    st.forget(&key);
                }
                Ok(())
            }
        }
    }

    /// Await `work` until it ends, or until it has waited `timeout` and no store call that
    /// writes commits (of any run) has answered for `timeout`: the bound counts the store's
    /// silence, not the time a flush waits its turn behind thousands of other runs' writes on
    /// a busy process (overload slows runs down; it does not fail them), and a store that
    /// stopped answering still fails every flush within `timeout` of its last answer.
    async fn within_silence<T>(
        &self,
        timeout: Duration,
        work: impl std::future::Future<Output = T>,
    ) -> std::result::Result<T, Silence> {
        let start = tokio::time::Instant::now();
        let mut check = start + timeout;
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Ok(out),
                () = tokio::time::sleep_until(check) => {
                    let now = tokio::time::Instant::now();
                    let answered = self.inner.shared.lock().answered;
                    let quiet_since = answered.map_or(start, |a| a.max(start));
                    if now.duration_since(quiet_since) >= timeout {
                        return Err(Silence {
                            waited: now.duration_since(start),
                            silent: now.duration_since(quiet_since),
                        });
                    }
                    check = quiet_since + timeout;
                }
            }
        }
    }

    #[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
    /// Stop accepting commits, write what is queued, and stop the background task, within
    /// `timeout`. Later `submit`s fail with `Unavailable`. Calling it again is harmless.
    ///
    /// Errors: `Timeout` (naming how many commits were not written) if the queue did not drain
    /// in time (the task is then aborted and their waiters get `Unavailable`); otherwise, if any
    /// commit accepted by this writer was never written, an error of the first failure's kind
    /// naming how many; `Unavailable` if the task had died.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> Result<()> {
        self.inner.shared.lock().closed = true;
        // Submits waiting for room get their error now.
        self.inner.shared.wake_all_room();
        let handle = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = handle {
            let abort = handle.abort_handle();
            // The task drains the queue and stops once it sees `closed`.
            self.inner.shared.wake.notify_one();
            let drained = tokio::time::timeout(timeout, handle).await;
            match drained {
                Err(_) => {
                    abort.abort();
                    // Submitted commits not durable yet, merged ones included.
                    let pending: u64 = {
                        let st = self.inner.shared.lock();
                        st.runs
                            .values()
                            .filter(|r| r.error.is_none())
                            .map(|r| r.submitted.saturating_sub(r.durable))
                            .sum()
                    };
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "checkpoint writer shutdown: {pending} commits not written within {:.3} s",
                            timeout.as_secs_f64()
                        ),
                    ));
                }
                Ok(Err(join)) => {
                    return Err(
                        stopped("the background task panicked or was aborted").with_source(join)
                    );
                }
                Ok(Ok(())) => {}
            }
        }
        let st = self.inner.shared.lock();
        match &st.first_failure {
            Some(first) if st.stats.failed > 0 => Err(Error::new(
                first.kind(),
                format!(
                    "{} checkpoint commits could not be written; first error: {}",
                    st.stats.failed,
                    first.message()
                ),
            )
            .with_source(first.clone())),
            _ => Ok(()),
        }
    }

    #[cfg_attr(not(test), allow(dead_code))] // see "Private" in the module docs
    /// Abort the background task at once, without draining (a crash, or a hard stop). Pending
    /// and later calls get `Unavailable`. No effect in sync mode.
    pub(crate) fn abort(&self) {
        if let Some(h) = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            h.abort();
        }
    }
}

impl Drop for Inner {
    /// The last handle is gone: the background task writes what is queued and stops.
    fn drop(&mut self) {
        self.shared.lock().dropped = true;
        self.shared.wake.notify_one();
    }
}

/// A run's queued commit written by the run's own task ([`Writer::barrier`]). Polled inline;
/// if dropped before it ends, the write goes on as a task of its own and is recorded when it
/// ends, as the background task would record it.
struct InlineCall {
    shared: Arc<Shared>,
    key: RunKey,
    seq: u64,
    call: Option<futures::future::BoxFuture<'static, Result<()>>>,
}

impl InlineCall {
    /// Start writing `entry` (taken from the queue, its run marked busy).
    fn start(inner: &Inner, entry: Entry) -> Self {
        let Entry {
            key,
            seq,
            mut commit,
            latest_put,
        } = entry;
        worker::materialize_latest(&mut commit, latest_put);
        let store = inner.retrying.clone();
        InlineCall {
            shared: inner.shared.clone(),
            key,
            seq,
            // Handed over: the store may keep the bytes instead of copying them.
            call: Some(Box::pin(async move {
                store.commit_owned(commit).await.map_err(Error::from)
            })),
        }
    }

    /// Record how the write ended.
    fn finish(mut self, result: Result<()>) {
        self.call = None;
        worker::record_one(&self.shared, &self.key, self.seq, result);
    }
}

impl std::future::Future for &mut InlineCall {
    type Output = Result<()>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        match self.get_mut().call.as_mut() {
            Some(call) => call.as_mut().poll(cx),
            None => std::task::Poll::Ready(Err(Error::unexpected("an inline write polled twice"))),
        }
    }
}

impl Drop for InlineCall {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        let recorder = Recorder {
            shared: self.shared.clone(),
            key: self.key.clone(),
            seq: self.seq,
            done: false,
        };
        // Without a runtime to finish it on (or if that runtime drops the task unrun), the
        // recorder fails the claim: whether the store applied the write is unknown, and a
        // resume claims the run afresh and reads what is there.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let result = call.await;
                recorder.finish(result);
            });
        }
    }
}

/// Records the end of a write that goes on after its barrier was dropped; dropped unfinished
/// (its task cancelled, its runtime gone), it records the write as failed, so the run claim is
/// never left busy with nobody to finish it.
struct Recorder {
    shared: Arc<Shared>,
    key: RunKey,
    seq: u64,
    done: bool,
}

impl Recorder {
    fn finish(mut self, result: Result<()>) {
        self.done = true;
        worker::record_one(&self.shared, &self.key, self.seq, result);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.done {
            worker::record_one(
                &self.shared,
                &self.key,
                self.seq,
                Err(stopped(
                    "a checkpoint write ended without a result: its task was cancelled or panicked",
                )),
            );
        }
    }
}

/// The message of a panic's payload, when it has one.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
