//! The write-behind checkpoint writer.
//!
//! The runner hands every checkpoint [`Commit`] to a [`Writer`]. With
//! [`CheckpointConfig::async_writes`] on (the default) commits go through a bounded queue to one
//! background tokio task that merges a run's consecutive unwritten commits into one atomic
//! commit, holds them until someone waits for them (a barrier, a flush, a ticket) or they are
//! [`CheckpointConfig::hold`] old, keeps one commit of each run in flight, batches commits of
//! different runs into one [`Store::commit_batch`] call, and retries retryable failures; with
//! it off, [`Writer::submit`] writes inline. A step thus costs one store round trip, the
//! barrier's, instead of one per commit. The guarantees are the same in both modes:
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
//!   later call returns `Unavailable` ("checkpoint writer stopped"), not retryable;
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
mod state;
mod worker;

#[cfg(test)]
mod claim_tests;
#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod latest_tests;
#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use config::CheckpointConfig;
pub(crate) use state::{Ticket, WriterStats};

use state::{RunKey, Shared, replay, stopped};
use worker::{Entry, Msg, Worker};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::store::{Commit, Epoch, RandomSource, RetryStore, Store};

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
    tx: Option<mpsc::Sender<Msg>>,
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
        let (tx, task) = if config.async_writes {
            let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
                Error::invalid_config("the checkpoint writer needs a tokio runtime").with_source(e)
            })?;
            let (tx, rx) = mpsc::channel(config.queue_maxsize);
            let worker = Worker::new(shared.clone(), retrying.clone(), config.clone());
            (Some(tx), Some(runtime.spawn(worker.run(rx))))
        } else {
            (None, None)
        };
        let inner = Inner {
            shared,
            store,
            retrying,
            config,
            tx,
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
        let Some(tx) = &self.inner.tx else {
            worker::materialize_latest(&mut commit, latest_put);
            return self.submit_sync(key, commit).await;
        };
        // A full queue may keep `reserve` waiting: a claim that already failed learns it now.
        if tx.capacity() == 0
            && let Some(e) = self.inner.shared.lock().refuse(&key)
        {
            return Err(e);
        }
        let permit = tx.reserve().await.map_err(|_| self.stopped_now())?;
        let mut st = self.inner.shared.lock();
        if let Some(e) = st.refuse(&key) {
            return Err(e);
        }
        // One lookup for a claim already known (every commit but a claim's first).
        let seq = match st.runs.get_mut(&key) {
            Some(run) => {
                run.submitted += 1;
                run.submitted
            }
            None => {
                st.forget_older_claims(&key);
                let run = st.runs.entry(key.clone()).or_default();
                run.submitted += 1;
                run.submitted
            }
        };
        st.stats.submitted += 1;
        // Sent under the lock, so channel order is sequence order even for concurrent submits.
        permit.send(Msg::Commit(Entry {
            key: key.clone(),
            seq,
            commit,
            latest_put,
        }));
        drop(st);
        Ok(Ticket {
            shared: self.inner.shared.clone(),
            key,
            seq,
        })
    }

    async fn submit_sync(&self, key: RunKey, commit: Commit) -> Result<Ticket> {
        if let Some(e) = self.inner.shared.lock().refuse(&key) {
            return Err(e);
        }
        let result = self.inner.retrying.commit(&commit).await;
        let mut st = self.inner.shared.lock();
        st.stats.submitted += 1;
        st.stats.batches += 1;
        st.stats.max_batch_len = 1;
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

    fn stopped_now(&self) -> Error {
        let st = self.inner.shared.lock();
        if st.closed {
            stopped("shut down")
        } else {
            stopped(st.dead.unwrap_or("channel closed"))
        }
    }

    /// Returns once every commit submitted for `(thread, run)` under claim `epoch` so far is
    /// durable; or the error that failed that claim; or `Unavailable` if the writer stopped
    /// first. Not bounded by time (the retry policy bounds each write); use [`Writer::flush`]
    /// for a bound.
    pub(crate) async fn barrier(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        let key: RunKey = (thread.clone(), run.clone(), epoch);
        let target = {
            let st = self.inner.shared.lock();
            match st.runs.get(&key) {
                None => return Ok(()),
                Some(r) => match &r.error {
                    Some(e) => return Err(replay(e)),
                    None => r.submitted,
                },
            }
        };
        self.inner.shared.wait_for(&key, target).await
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

    /// The terminal flush: [`Writer::barrier`] bounded by `timeout` (the runner passes
    /// [`CheckpointConfig::flush_timeout`]). On success the writer forgets the run's state (a
    /// later submit of the run starts afresh); a failed run's error is kept.
    ///
    /// Errors: `Timeout` if the run's commits are not durable in time (they stay queued); the
    /// run's store error; `Unavailable` if the writer stopped first.
    pub(crate) async fn flush(
        &self,
        thread: &ThreadId,
        run: &RunId,
        epoch: Epoch,
        timeout: Duration,
    ) -> Result<()> {
        match tokio::time::timeout(timeout, self.barrier(thread, run, epoch)).await {
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "checkpoint flush of run {run} did not finish within {:.3} s",
                    timeout.as_secs_f64()
                ),
            )),
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
        let handle = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let (Some(handle), Some(tx)) = (handle, &self.inner.tx) {
            let abort = handle.abort_handle();
            let drained = tokio::time::timeout(timeout, async {
                // A send error means the task is already gone; the join tells how.
                let _ = tx.send(Msg::Shutdown).await;
                handle.await
            })
            .await;
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
