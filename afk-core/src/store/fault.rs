//! A fault-injecting store wrapper for tests: failures, latency, crashes, panics, and a log.
//!
//! [`FaultStore`] forwards every call to the store it wraps, after applying the faults set on
//! it (all settable at any time through `&self`, so a test can change them mid-run):
//! - [`FaultStore::fail_nth`]: the n-th call of one operation (or of any) fails with a kind;
//! - [`FaultStore::fail_with_probability`]: calls fail with a seeded probability;
//! - [`FaultStore::set_latency`]: every call first sleeps (tokio time, so tests can pause it);
//! - [`FaultStore::crash_after_commits`]: after `n` persisted commits the store "crashes": in
//!   [`CrashMode::Silent`] later commits answer `Ok` but write nothing (a process that died with
//!   writes in flight); in [`CrashMode::Down`] every later call fails with `Unavailable`;
//! - [`FaultStore::panic_on_nth`]: the n-th call of an operation panics (kills its caller task);
//! - [`FaultStore::hold_nth`]: the n-th call of an operation waits, before it reaches the inner
//!   store, until the test releases it (to order a call between two steps of another runner).
//!
//! It counts calls per operation and keeps a [`FaultEvent`] log of the claims and commits the
//! inner store accepted, in the order it applied them: claims and commits are passed to the
//! inner store one at a time, so the log order is the apply order. Injected failures never reach
//! the inner store, so they write nothing.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rand::{Rng, SeedableRng};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::store::{Capabilities, Commit, CommitRejected, Epoch, ListPage, Store, commit_by_ref};

/// The operations of [`Store`], for counting calls and aiming faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Store::get`].
    Get,
    /// [`Store::get_many`].
    GetMany,
    /// [`Store::list`].
    List,
    /// [`Store::delete`].
    Delete,
    /// [`Store::delete_run`].
    DeleteRun,
    /// [`Store::claim`].
    Claim,
    /// [`Store::commit`], and each commit of a [`Store::commit_batch`].
    Commit,
    /// [`Store::commit_batch`] as a whole (a fault here fails every commit of the batch).
    CommitBatch,
}

/// What a crashed [`FaultStore`] does. See [`FaultStore::crash_after_commits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Later commits answer `Ok` and write nothing; other calls still reach the inner store.
    Silent,
    /// The commit that would exceed the limit and every later call fail with `Unavailable`.
    Down,
}

/// A call held by [`FaultStore::hold_nth`]: wait until it is held, then let it go on.
#[derive(Debug, Clone)]
pub struct Hold {
    inner: Arc<HoldInner>,
}

#[derive(Debug)]
struct HoldInner {
    reached: tokio::sync::Semaphore,
    released: tokio::sync::Semaphore,
}

impl Hold {
    fn new() -> Self {
        Hold {
            inner: Arc::new(HoldInner {
                reached: tokio::sync::Semaphore::new(0),
                released: tokio::sync::Semaphore::new(0),
            }),
        }
    }

    /// Resolves once the held call has arrived (it is waiting now, or was released since).
    pub async fn reached(&self) {
        if let Ok(p) = self.inner.reached.acquire().await {
            p.forget();
        }
        self.inner.reached.add_permits(1);
    }

    /// Let the held call go on (also before it arrives: then it does not wait).
    pub fn release(&self) {
        self.inner.released.add_permits(1);
    }

    async fn wait(&self) {
        self.inner.reached.add_permits(1);
        if let Ok(p) = self.inner.released.acquire().await {
            p.forget();
        }
    }
}

/// One entry of the [`FaultStore::log`]: a claim or a commit the inner store accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultEvent {
    /// A successful claim.
    Claim {
        /// The thread.
        thread: ThreadId,
        /// The run claimed.
        run: RunId,
        /// The epoch handed out.
        epoch: Epoch,
    },
    /// A commit the inner store applied.
    Commit(Commit),
}

#[derive(Default)]
struct State {
    calls: HashMap<Op, u64>,
    fail_nth: Vec<(Option<Op>, u64, ErrorKind)>,
    panic_nth: Vec<(Op, u64)>,
    hold_nth: Vec<(Op, u64, Hold)>,
    probability: Option<(f64, Option<Op>, ErrorKind, rand::rngs::StdRng)>,
    latency: Duration,
    crash: Option<(u64, CrashMode)>,
    crashed: bool,
    persisted: u64,
    dropped: u64,
    injected: u64,
    log: Vec<FaultEvent>,
}

/// A [`Store`] wrapper that injects faults. See the module docs.
pub struct FaultStore<S: ?Sized = dyn Store> {
    inner: Arc<S>,
    state: Mutex<State>,
    apply_lock: tokio::sync::Mutex<()>,
}

impl<S: Store> FaultStore<S> {
    /// Wrap `inner` with no faults set.
    pub fn new(inner: S) -> Self {
        FaultStore::from_arc(Arc::new(inner))
    }
}

impl<S: Store + ?Sized> FaultStore<S> {
    /// Wrap a shared store with no faults set.
    pub fn from_arc(inner: Arc<S>) -> Self {
        FaultStore {
            inner,
            state: Mutex::new(State::default()),
            apply_lock: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The wrapped store (reads through it bypass every fault).
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Make the `n`-th call (1-based, counted from the wrapper's creation) of `op`, or of any
    /// operation when `op` is `None`, fail with `kind`. Several such rules may be set.
    pub fn fail_nth(&self, op: Option<Op>, n: u64, kind: ErrorKind) {
        self.state().fail_nth.push((op, n, kind));
    }

    /// Make calls of `op` (or of every operation) fail with `kind` with probability `p`,
    /// drawn from a generator seeded with `seed`. `p = 1.0` fails every call. Replaces an
    /// earlier probability rule.
    pub fn fail_with_probability(&self, op: Option<Op>, p: f64, seed: u64, kind: ErrorKind) {
        let rng = rand::rngs::StdRng::seed_from_u64(seed);
        self.state().probability = Some((p, op, kind, rng));
    }

    /// Remove every failure rule (n-th, probability); crash state and counters stay.
    pub fn clear_failures(&self) {
        let mut s = self.state();
        s.fail_nth.clear();
        s.probability = None;
    }

    /// Make the `n`-th call of `op` panic.
    pub fn panic_on_nth(&self, op: Op, n: u64) {
        self.state().panic_nth.push((op, n));
    }

    /// Hold the `n`-th call (1-based, counted from the wrapper's creation) of `op` before it
    /// reaches the inner store, until [`Hold::release`]. Its latency, if any, comes first.
    pub fn hold_nth(&self, op: Op, n: u64) -> Hold {
        let hold = Hold::new();
        self.state().hold_nth.push((op, n, hold.clone()));
        hold
    }

    /// Sleep `latency` at the start of every call.
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Crash after `n` more persisted commits in total (counted from the wrapper's creation).
    pub fn crash_after_commits(&self, n: u64, mode: CrashMode) {
        self.state().crash = Some((n, mode));
    }

    /// Calls made of `op` so far (failed ones included).
    pub fn calls(&self, op: Op) -> u64 {
        self.state().calls.get(&op).copied().unwrap_or(0)
    }

    /// Calls made of every operation so far.
    pub fn total_calls(&self) -> u64 {
        self.state().calls.values().sum()
    }

    /// Failures injected so far (not counting the inner store's own errors).
    pub fn injected_failures(&self) -> u64 {
        self.state().injected
    }

    /// Commits the inner store applied.
    pub fn persisted_commits(&self) -> u64 {
        self.state().persisted
    }

    /// Commits answered `Ok` after a silent crash without being written.
    pub fn dropped_commits(&self) -> u64 {
        self.state().dropped
    }

    /// Whether the crash point has been reached.
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// The claims and commits the inner store accepted, in apply order.
    pub fn log(&self) -> Vec<FaultEvent> {
        self.state().log.clone()
    }

    /// Count the call and decide its fate before it reaches the inner store.
    async fn enter(&self, op: Op) -> Result<()> {
        let (latency, hold, outcome) = {
            let mut s = self.state();
            let n = {
                let c = s.calls.entry(op).or_insert(0);
                *c += 1;
                *c
            };
            let hold = s
                .hold_nth
                .iter()
                .find(|(o, k, _)| *o == op && *k == n)
                .map(|(_, _, h)| h.clone());
            let any_n: u64 = s.calls.values().sum();
            if s.panic_nth.iter().any(|&(o, k)| o == op && k == n) {
                drop(s);
                panic!("FaultStore: injected panic on call {n} of {op:?}");
            }
            let mut outcome = Ok(());
            if s.crashed && matches!(s.crash, Some((_, CrashMode::Down))) {
                outcome = Err(ErrorKind::Unavailable);
            } else if let Some(&(_, _, kind)) = s.fail_nth.iter().find(|(o, k, _)| match o {
                Some(o) => *o == op && *k == n,
                None => *k == any_n,
            }) {
                outcome = Err(kind);
            } else if let Some((p, o, kind, rng)) = s.probability.as_mut()
                && o.is_none_or(|o| o == op)
                && rng.random::<f64>() < *p
            {
                outcome = Err(*kind);
            }
            if outcome.is_err() {
                s.injected += 1;
            }
            (s.latency, hold, outcome)
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some(hold) = hold {
            hold.wait().await;
        }
        outcome.map_err(|kind| Error::new(kind, format!("FaultStore: injected failure of {op:?}")))
    }

    async fn commit_one(&self, commit: &Commit) -> Result<()> {
        self.enter(Op::Commit).await?;
        let _order = self.apply_lock.lock().await;
        {
            let mut s = self.state();
            if let Some((limit, mode)) = s.crash
                && s.persisted >= limit
            {
                s.crashed = true;
                return match mode {
                    CrashMode::Silent => {
                        s.dropped += 1;
                        Ok(())
                    }
                    CrashMode::Down => {
                        s.injected += 1;
                        Err(Error::unavailable("FaultStore: crashed"))
                    }
                };
            }
        }
        self.inner.commit(commit).await?;
        let mut s = self.state();
        s.persisted += 1;
        s.log.push(FaultEvent::Commit(commit.clone()));
        Ok(())
    }
}

impl<S: Store + ?Sized> fmt::Debug for FaultStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: Store + ?Sized> Store for FaultStore<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        self.enter(Op::Get).await?;
        self.inner.get(thread, key).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.enter(Op::GetMany).await?;
        self.inner.get_many(thread, keys).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        self.enter(Op::List).await?;
        self.inner.list(thread, prefix, cursor, limit).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        self.enter(Op::Delete).await?;
        self.inner.delete(thread, keys).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        self.enter(Op::DeleteRun).await?;
        self.inner.delete_run(thread, run).await
    }

    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::ThreadPage> {
        self.enter(Op::List).await?;
        self.inner.list_threads(cursor, limit).await
    }

    async fn list_attention(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::AttentionPage> {
        self.enter(Op::List).await?;
        self.inner.list_attention(cursor, limit).await
    }

    /// Forwarded without faults: it reads the thread's keys, not the store.
    async fn effect_hashes(&self, thread: &ThreadId) -> Result<crate::hash::EffectHashes> {
        self.inner.effect_hashes(thread).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        self.enter(Op::Get).await?;
        self.inner.attention(thread, run).await
    }

    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::FinishedPage> {
        self.enter(Op::List).await?;
        self.inner.list_finished(before_ms, cursor, limit).await
    }

    async fn forget_finished(&self, entries: &[crate::store::FinishedRun]) -> Result<()> {
        self.enter(Op::Delete).await?;
        self.inner.forget_finished(entries).await
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        // Not counted as a call (the crash points of the tests count the others): only a crashed

        // store refuses it.

        if self.state().crashed {
            return Err(Error::unavailable("FaultStore: crashed"));
        }

        self.inner.finish_run(thread, run, epoch).await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        self.enter(Op::Claim).await?;
        self.inner.claim_if(thread, run, seen).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.enter(Op::Claim).await?;
        let _order = self.apply_lock.lock().await;
        let epoch = self.inner.claim(thread, run).await?;
        self.state().log.push(FaultEvent::Claim {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
        });
        Ok(epoch)
    }

    /// Through this wrapper's own `get` and `claim`, so their faults and holds apply.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        super::claim_if_new_each(self, thread, run).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.commit_one(commit).await
    }

    /// Through [`FaultStore::commit`]'s faults, by reference.
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        commit_by_ref(self, commit).await
    }

    /// Applies the commits one by one through [`FaultStore::commit`]'s faults, after the
    /// faults aimed at [`Op::CommitBatch`] (which fail every commit of the batch).
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        if let Err(e) = self.enter(Op::CommitBatch).await {
            return commits.iter().map(|_| Err(e.clone())).collect();
        }
        let mut out = Vec::with_capacity(commits.len());
        for c in commits {
            out.push(self.commit_one(c).await);
        }
        out
    }
}

#[cfg(test)]
mod tests;
