//! [`Worker`]: finishes the runs nobody is working on, without anyone calling `resume`.
//!
//! The application registers its agents (by name and version) and starts a worker on its
//! [`Runner`]. The worker reads the store's index of runs that need attention
//! ([`Store::list_attention`](crate::store::Store::list_attention)), never the finished runs,
//! and resumes:
//! - runs whose owner's lease has expired (plus [`RunnerConfig::lease_skew`]): a process died,
//!   or hangs, while working on them;
//! - runs its own earlier incarnation held (the same [`RunnerConfig::owner`], an entry
//!   written before this worker started), without waiting for their leases;
//! - runs stopped without an ending (a store outage, an interrupt) and runs a human answered
//!   (`afk decide`, `afk settle`, [`Runner::decide`], [`Runner::settle`]);
//! - suspended runs, from their not-before time on.
//!
//! Runs paused for approval or stopped on an uncertain effect wait for a human; child runs are
//! resumed by their parents. Several workers (processes) may share a store: a takeover is a
//! claim, which fences whoever held the run before, so at most one of them goes on with it.
//! Each run that fails to resume is retried after a backoff that doubles (jittered) up to
//! [`WorkerConfig::max_backoff`]; at most [`WorkerConfig::concurrency`] runs at once.
//!
//! With [`WorkerConfig::with_retention`], the worker also deletes finished runs past an age
//! ([`sweep_finished`](super::sweep_finished), every [`WorkerConfig::sweep_every`]) on stores
//! that keep an index of finished runs (RocksDB, S3); runs that have not finished never go.
//!
//! [`WorkerHandle::shutdown`] stops taking runs, interrupts the ones in flight (they stop at
//! their next safe point, with nothing terminal written, and let go of their leases so another
//! worker takes them at once) and waits for them up to a deadline; runs still going then are
//! aborted, and their leases expire.
//!
//! [`RunnerConfig::lease_skew`]: super::RunnerConfig::lease_skew
//! [`RunnerConfig::owner`]: super::RunnerConfig::owner

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::agent::Agent;
use super::api::Runner;
use super::events::{Outcome, Signal};
use crate::error::{ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::schema::{MarkState, RunMark};
use crate::store::Epoch;

/// A worker's settings: `WorkerConfig::default()` and the `with_*` setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Most runs resumed at once. Default 16.
    pub concurrency: usize,
    /// How often the worker looks at the index, jittered by ±50% so that workers sharing a
    /// store spread out. Default 1 s.
    pub poll_interval: Duration,
    /// The first retry delay of a run that failed to resume, doubled with each failure.
    /// Default 1 s.
    pub backoff: Duration,
    /// The longest retry delay. Default 5 min.
    pub max_backoff: Duration,
    /// How long [`WorkerHandle::shutdown`] waits for interrupted runs. Default 10 s.
    pub shutdown_deadline: Duration,
    /// Delete runs that finished longer ago than this (a retention sweep); `None` (the
    /// default) keeps them. Only on stores with
    /// [`Capabilities::finished`](crate::store::Capabilities::finished); on Redis the per-run
    /// time to live does this.
    pub retention: Option<Duration>,
    /// How often the retention sweep runs (jittered by ±50%), the first time right after the
    /// worker starts. Default 10 min.
    pub sweep_every: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 16,
            poll_interval: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            shutdown_deadline: Duration::from_secs(10),
            retention: None,
            sweep_every: Duration::from_secs(600),
        }
    }
}

impl WorkerConfig {
    /// Set [`WorkerConfig::concurrency`] (at least 1).
    #[must_use]
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Set [`WorkerConfig::poll_interval`] (at least 1 ms).
    #[must_use]
    pub fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d.max(Duration::from_millis(1));
        self
    }

    /// Set [`WorkerConfig::backoff`] and [`WorkerConfig::max_backoff`].
    #[must_use]
    pub fn with_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// Set [`WorkerConfig::shutdown_deadline`].
    #[must_use]
    pub fn with_shutdown_deadline(mut self, d: Duration) -> Self {
        self.shutdown_deadline = d;
        self
    }

    /// Delete runs that finished more than `older_than` ago ([`WorkerConfig::retention`]),
    /// sweeping every `every` ([`WorkerConfig::sweep_every`], at least 1 ms).
    #[must_use]
    pub fn with_retention(mut self, older_than: Duration, every: Duration) -> Self {
        self.retention = Some(older_than);
        self.sweep_every = every.max(Duration::from_millis(1));
        self
    }
}

/// What a worker did, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Runs it resumed.
    pub resumed: u64,
    /// Of those, runs it took over from an expired lease.
    pub taken_over: u64,
    /// Resumes that completed the run.
    pub completed: u64,
    /// Resumes that ended paused, suspended or stopped (waiting again).
    pub stopped: u64,
    /// Resumes that failed (retried after a backoff).
    pub failed: u64,
    /// Resumes that another process's claim fenced (it took the run).
    pub fenced: u64,
    /// Runs of an agent this worker has not registered, seen at its last look.
    pub unknown_agent: u64,
    /// For each takeover of an expired lease: how long after the lease's end it happened, in
    /// ms (the newest 10,000).
    pub takeover_delays_ms: Vec<u64>,
    /// Finished runs the retention sweeps deleted.
    pub swept: u64,
    /// Retention sweeps that ended with an error (retried at the next sweep).
    pub sweep_errors: u64,
}

/// Resumes the runs that need it; see the module docs.
#[derive(Debug)]
pub struct Worker {
    runner: Runner,
    agents: BTreeMap<(String, String), Agent>,
    config: WorkerConfig,
}

/// A started worker: [`WorkerHandle::shutdown`] stops it.
#[derive(Debug)]
pub struct WorkerHandle {
    stop: watch::Sender<bool>,
    join: tokio::task::JoinHandle<()>,
    stats: Arc<Mutex<WorkerStats>>,
}

impl Worker {
    /// A worker resuming runs with `runner` (its store, its owner id, its lease).
    pub fn new(runner: Runner) -> Self {
        Worker {
            runner,
            agents: BTreeMap::new(),
            config: WorkerConfig::default(),
        }
    }

    /// Resume the runs of `agent` (matched by name and version, or a version it declares
    /// compatible with [`Agent::compatible_with`]).
    #[must_use]
    pub fn register(mut self, agent: Agent) -> Self {
        self.agents
            .insert((agent.name.clone(), agent.version.clone()), agent);
        self
    }

    /// Set the worker's settings.
    #[must_use]
    pub fn with_config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Start the worker on the current Tokio runtime.
    pub fn start(self) -> WorkerHandle {
        let (stop, stopped) = watch::channel(false);
        let stats = Arc::new(Mutex::new(WorkerStats::default()));
        let started_ms = self.runner.shared.config.clock.now_ms();
        let state = Loop {
            runner: self.runner,
            agents: Arc::new(self.agents),
            config: self.config,
            stats: Arc::clone(&stats),
            stopped,
            backoff: HashMap::new(),
            refused: HashMap::new(),
            started_from: HashMap::new(),
            in_flight: Arc::new(Mutex::new(HashMap::new())),
            tasks: JoinSet::new(),
            started_ms,
            sweep: None,
            next_sweep: tokio::time::Instant::now(),
        };
        WorkerHandle {
            stop,
            join: tokio::spawn(state.run()),
            stats,
        }
    }
}

impl WorkerHandle {
    /// What the worker did so far.
    pub fn stats(&self) -> WorkerStats {
        lock(&self.stats).clone()
    }

    /// Stop: take no new runs, interrupt the ones in flight and wait for them up to
    /// [`WorkerConfig::shutdown_deadline`] (then abort them). Returns what the worker did.
    pub async fn shutdown(self) -> WorkerStats {
        let _ = self.stop.send(true);
        let _ = self.join.await;
        lock(&self.stats).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type RunKey = (ThreadId, RunId);

/// A run that failed to resume: how often, and not before when to try again (ms).
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    until_ms: u64,
}

/// The worker's task.
struct Loop {
    runner: Runner,
    agents: Arc<BTreeMap<(String, String), Agent>>,
    config: WorkerConfig,
    stats: Arc<Mutex<WorkerStats>>,
    stopped: watch::Receiver<bool>,
    backoff: HashMap<RunKey, Backoff>,
    /// Runs whose conditional claim was refused: the entry they had then, and when (ms).
    refused: HashMap<RunKey, (Vec<u8>, u64)>,
    /// The entry each run in flight was started from.
    started_from: HashMap<RunKey, Vec<u8>>,
    /// Runs in flight, with the sender that interrupts each.
    in_flight: Arc<Mutex<HashMap<RunKey, watch::Sender<Signal>>>>,
    tasks: JoinSet<(RunKey, Result<Outcome>)>,
    /// When this worker started (ms, by the runner's clock): entries of its own owner id
    /// written before are its earlier incarnation's.
    started_ms: u64,
    /// The retention sweep in progress, if any.
    sweep: Option<tokio::task::JoinHandle<Result<super::retention::Swept>>>,
    /// When the next retention sweep starts.
    next_sweep: tokio::time::Instant,
}

impl Loop {
    async fn run(mut self) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency));
        while !*self.stopped.borrow() {
            self.reap();
            self.retention().await;
            if let Err(e) = self.look(&slots).await {
                tracing::warn!(error = %e, "worker could not list the runs that need attention");
            }
            let pause = jittered(self.config.poll_interval);
            let mut stopped = self.stopped.clone();
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stopped.changed() => {}
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => self.settle(done),
            }
        }
        self.wind_down().await;
    }

    /// Collect a retention sweep that ended, and start one when it is due.
    async fn retention(&mut self) {
        let Some(older_than) = self.config.retention else {
            return;
        };
        if let Some(h) = self.sweep.take_if(|h| h.is_finished()) {
            let result = h.await; // finished: no wait
            let mut stats = lock(&self.stats);
            match result {
                Ok(Ok(swept)) => {
                    stats.swept += swept.deleted;
                    tracing::info!(
                        deleted = swept.deleted,
                        kept = swept.kept,
                        keys = swept.keys,
                        "retention sweep done"
                    );
                }
                Ok(Err(error)) => {
                    stats.sweep_errors += 1;
                    tracing::warn!(%error, "retention sweep failed; retried at the next sweep");
                }
                Err(error) => {
                    stats.sweep_errors += 1;
                    tracing::warn!(%error, "retention sweep panicked; retried at the next sweep");
                }
            }
        }
        let now = tokio::time::Instant::now();
        if self.sweep.is_some() || now < self.next_sweep {
            return;
        }
        self.next_sweep = now + jittered(self.config.sweep_every);
        let store = Arc::clone(self.runner.store());
        if !store.capabilities().finished {
            return;
        }
        // The index is stamped with the stores' clocks (wall clocks), not the runner's.
        let age = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
        let before = crate::store::store_now_ms().saturating_sub(age);
        self.sweep = Some(tokio::spawn(async move {
            super::retention::sweep_finished(store.as_ref(), before).await
        }));
    }

    /// One look at the index: start every run that is due, as slots allow.
    async fn look(&mut self, slots: &Arc<Semaphore>) -> Result<()> {
        let store = Arc::clone(self.runner.store());
        let mut cursor: Option<String> = None;
        let mut unknown = 0u64;
        let mut seen: HashSet<RunKey> = HashSet::new();
        loop {
            let page = store.list_attention(cursor.as_deref(), 1000).await?;
            for r in page.runs {
                let key = (r.thread, r.run);
                seen.insert(key.clone());
                let Some(mark) = RunMark::decode(&r.entry) else {
                    continue;
                };
                let mut mark = mark;
                if !self.claimable(&key, &r.entry, &mut mark) {
                    continue;
                }
                match self.due(&key, &mark) {
                    Due::No => continue,
                    Due::UnknownAgent => unknown += 1,
                    Due::Yes { agent, expired_ms } => {
                        let Ok(permit) = Arc::clone(slots).try_acquire_owned() else {
                            return Ok(()); // all slots busy: the next look goes on
                        };
                        self.started_from.insert(key.clone(), r.entry.clone());
                        self.start_one(key, *agent, (expired_ms, mark.epoch), permit);
                    }
                }
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        self.backoff.retain(|k, _| seen.contains(k));
        self.refused.retain(|k, _| seen.contains(k));
        lock(&self.stats).unknown_agent = unknown;
        Ok(())
    }

    /// Whether the run may be claimed from this entry. A conditional claim refused means a
    /// claim came after the entry was written: its claimer writes a new entry at once, unless
    /// it died first. So while the entry is the one that was refused, wait; once it stayed so
    /// for a lease and the skew allowance, the claimer is presumed dead, and the run is taken
    /// with an unconditional claim (`mark.epoch` set to 0: fencing still stops a claimer that
    /// was alive after all).
    fn claimable(&mut self, key: &RunKey, entry: &[u8], mark: &mut RunMark) -> bool {
        let Some((refused_entry, at)) = self.refused.get(key) else {
            return true;
        };
        if refused_entry.as_slice() != entry {
            self.refused.remove(key);
            return true;
        }
        let cfg = &self.runner.shared.config;
        let wait = cfg.lease.saturating_add(cfg.lease_skew);
        let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        if cfg.clock.now_ms() < at.saturating_add(wait) {
            return false;
        }
        mark.epoch = 0;
        mark.lease_until_ms = 0;
        true
    }

    /// Whether the run `key` with entry `mark` is due now, and with which agent.
    fn due(&self, key: &RunKey, mark: &RunMark) -> Due {
        if mark.depth > 0 || lock(&self.in_flight).contains_key(key) {
            return Due::No;
        }
        let cfg = &self.runner.shared.config;
        let now = cfg.clock.now_ms();
        if self.backoff.get(key).is_some_and(|b| now < b.until_ms) {
            return Due::No;
        }
        let skew = u64::try_from(cfg.lease_skew.as_millis()).unwrap_or(u64::MAX);
        let mine = mark.owner.as_deref() == Some(cfg.owner.as_str());
        let expired_ms = match mark.state {
            MarkState::Running if mine && mark.updated_ms < self.started_ms => None,
            // A lease end of 0: taken after a refused conditional claim, no lease to time.
            MarkState::Running if mark.lease_expired(now, skew) => {
                (mark.lease_until_ms > 0).then(|| now.saturating_sub(mark.lease_until_ms))
            }
            MarkState::Stopped | MarkState::Ready => None,
            MarkState::Suspended if now >= mark.not_before_ms => None,
            // Refused an agent before: only another one may try (a new deployment).
            MarkState::Mismatch => match self.agent_for(mark) {
                Some(a) if mark.refused.as_deref() != Some(a.fingerprint().as_str()) => None,
                _ => return Due::No,
            },
            _ => return Due::No,
        };
        match self.agent_for(mark) {
            Some(agent) => Due::Yes {
                agent: Box::new(agent),
                expired_ms,
            },
            None => Due::UnknownAgent,
        }
    }

    /// The registered agent for the run's entry: the same name and version, or one that
    /// declares the entry's version compatible.
    fn agent_for(&self, mark: &RunMark) -> Option<Agent> {
        let version = mark.version.clone().unwrap_or_default();
        if let Some(a) = self.agents.get(&(mark.agent.clone(), version.clone())) {
            return Some(a.clone());
        }
        self.agents
            .values()
            .find(|a| a.name == mark.agent && a.compatible_versions.contains(&version))
            .cloned()
    }

    fn start_one(
        &mut self,
        key: RunKey,
        agent: Agent,
        (expired_ms, epoch): (Option<u64>, u64),
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let handle = if epoch == 0 {
            self.runner.resume(&agent, &key.0, &key.1)
        } else {
            self.runner.take_over(&agent, &key.0, &key.1, Epoch(epoch))
        };
        lock(&self.in_flight).insert(key.clone(), handle.interrupter());
        {
            let mut s = lock(&self.stats);
            s.resumed += 1;
            if let Some(d) = expired_ms {
                s.taken_over += 1;
                if s.takeover_delays_ms.len() >= 10_000 {
                    s.takeover_delays_ms.remove(0);
                }
                s.takeover_delays_ms.push(d);
            }
        }
        tracing::info!(thread = %key.0, run = %key.1, "worker resumes the run");
        self.tasks.spawn(async move {
            let r = handle.result().await;
            drop(permit);
            (key, r)
        });
    }

    /// Collect the runs that ended since the last look.
    fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            self.settle(done);
        }
    }

    fn settle(
        &mut self,
        done: std::result::Result<(RunKey, Result<Outcome>), tokio::task::JoinError>,
    ) {
        let Ok((key, result)) = done else {
            return; // a panicking or aborted task: its entry is looked at again
        };
        lock(&self.in_flight).remove(&key);
        let started_from = self.started_from.remove(&key);
        let mut s = lock(&self.stats);
        match result {
            Ok(Outcome::Completed(_)) => {
                s.completed += 1;
                self.backoff.remove(&key);
            }
            Ok(_) => {
                s.stopped += 1;
                self.backoff.remove(&key);
            }
            Err(e) if e.kind() == ErrorKind::Fenced => {
                s.fenced += 1;
                if let Some(entry) = started_from {
                    let now = self.runner.shared.config.clock.now_ms();
                    self.refused.entry(key).or_insert((entry, now));
                }
            }
            Err(e) => {
                s.failed += 1;
                tracing::warn!(thread = %key.0, run = %key.1, error = %e, "worker could not resume the run");
                let now = self.runner.shared.config.clock.now_ms();
                let b = self.backoff.entry(key).or_insert(Backoff {
                    failures: 0,
                    until_ms: 0,
                });
                b.failures = b.failures.saturating_add(1);
                let delay = backoff_after(&self.config, b.failures);
                b.until_ms =
                    now.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
            }
        }
    }

    /// Interrupt what is in flight, wait up to the deadline, abort the rest.
    async fn wind_down(&mut self) {
        if let Some(sweep) = self.sweep.take() {
            sweep.abort(); // idempotent: the next worker's sweep finds what is left
        }
        for ctl in lock(&self.in_flight).values() {
            let _ = ctl.send(Signal::Interrupt);
        }
        let deadline = tokio::time::Instant::now() + self.config.shutdown_deadline;
        while !self.tasks.is_empty() {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(done)) => self.settle(done),
                Ok(None) => break,
                Err(_) => {
                    self.tasks.abort_all();
                    break;
                }
            }
        }
    }
}

enum Due {
    No,
    UnknownAgent,
    Yes {
        agent: Box<Agent>,
        expired_ms: Option<u64>,
    },
}

/// The delay after the `failures`th failure: the first backoff doubled for each earlier one, at
/// most the maximum, jittered by ±25%.
fn backoff_after(config: &WorkerConfig, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    let d = config
        .backoff
        .saturating_mul(1 << doublings)
        .min(config.max_backoff);
    d.mul_f64(0.75 + rand::random::<f64>() / 2.0)
}

/// `d` jittered by ±50%.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.5 + rand::random::<f64>())
}
