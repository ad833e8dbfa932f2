//! The run's entry in the store's index of runs that need attention ([`RunMark`]), and the
//! lease in it.
//!
//! A runner that works on a run *holds* it: its entry says `running`, names the runner
//! ([`RunnerConfig::owner`](super::RunnerConfig::owner)) and a lease end. The lease is renewed
//! by the run's own commits once a third of it has passed, and by a timer while nothing is
//! committed (a long model or tool call). Whoever finds the lease expired (plus the allowed
//! clock skew) may take the run over; the claim it makes fences the former owner.
//!
//! Ordering: the entry a commit carries must never be older than one the run already wrote.
//! Only the run's task changes the state; the timer writes only `running` entries, and only
//! while the run is held. Both take one lock around "look at the state, submit the commit", and
//! the run's task lets go of the hold under that lock before it submits a new state, so a
//! renewal is either queued before that state or not at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::clock::Clock;
use crate::ids::{RunId, ThreadId};
use crate::schema::{MarkState, RunMark};
use crate::store::{Attention, Commit, Epoch};
use crate::writer::Writer;

/// The lease and entry of one run under one claim (shared with its renewal timer).
#[derive(Debug)]
pub(crate) struct Lease {
    inner: Arc<Inner>,
    timer: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    owner: String,
    lease_ms: u64,
    clock: Arc<dyn Clock>,
    /// The entry, and whether the next commit must carry it.
    cell: tokio::sync::Mutex<Cell>,
    /// Whether the run is held (`running` under this claim): renewals go on.
    held: AtomicBool,
    /// Whether the next commit must carry the entry (a new state not written yet).
    pending: AtomicBool,
    /// When the entry last written was written (ms), for the lock-free "is a renewal due".
    renewed_ms: AtomicU64,
}

#[derive(Debug)]
struct Cell {
    mark: RunMark,
    closed: bool,
}

impl Lease {
    pub(crate) fn new(owner: &str, lease: Duration, clock: Arc<dyn Clock>, epoch: Epoch) -> Self {
        let mut mark = RunMark::new(MarkState::Running);
        mark.epoch = epoch.0;
        Lease {
            inner: Arc::new(Inner {
                owner: owner.to_owned(),
                lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1),
                clock,
                cell: tokio::sync::Mutex::new(Cell {
                    mark,
                    closed: false,
                }),
                held: AtomicBool::new(false),
                pending: AtomicBool::new(false),
                renewed_ms: AtomicU64::new(0),
            }),
            timer: None,
        }
    }

    /// Set the run's entry to `state` (`not_before_ms` for a suspended run), written by the
    /// next commit. `running` holds the run (this runner, a fresh lease); every other state
    /// lets it go (no lease).
    pub(crate) async fn set(&self, state: MarkState, not_before_ms: u64) {
        let mut cell = self.inner.cell.lock().await;
        cell.mark.state = state;
        cell.mark.not_before_ms = not_before_ms;
        let held = state == MarkState::Running;
        cell.mark.owner = Some(self.inner.owner.clone());
        cell.mark.refused = None;
        if !held {
            cell.mark.lease_until_ms = 0;
        }
        self.inner.held.store(held, Ordering::SeqCst);
        self.inner.pending.store(true, Ordering::SeqCst);
    }

    /// The run's entry after a resume by the agent of fingerprint `refused` was refused: it
    /// waits for a human ([`MarkState::Mismatch`]) and names the run's own agent.
    pub(crate) async fn refuse(&self, agent: &str, version: &str, refused: &str) {
        self.set(MarkState::Mismatch, 0).await;
        let mut cell = self.inner.cell.lock().await;
        agent.clone_into(&mut cell.mark.agent);
        cell.mark.version = Some(version.to_owned()).filter(|v| !v.is_empty());
        cell.mark.refused = Some(refused.to_owned());
    }

    /// Name the agent, nesting depth and parent the entry reports (those of `like`).
    pub(crate) async fn describe(&self, like: &RunMark) {
        let mut cell = self.inner.cell.lock().await;
        cell.mark.agent.clone_from(&like.agent);
        cell.mark.version.clone_from(&like.version);
        cell.mark.depth = like.depth;
        cell.mark.parent.clone_from(&like.parent);
    }

    /// What the next commit carries: `Closed` when it ends the run (`closing`); the entry when
    /// a new state is pending or a renewal is due; otherwise nothing.
    pub(crate) async fn attach(&self, closing: bool) -> Option<Attention> {
        let i = &self.inner;
        if closing {
            let mut cell = i.cell.lock().await;
            cell.closed = true;
            i.held.store(false, Ordering::SeqCst);
            i.pending.store(false, Ordering::SeqCst);
            return Some(Attention::Closed);
        }
        if !i.pending.load(Ordering::SeqCst) && !self.due() {
            return None;
        }
        let mut cell = i.cell.lock().await;
        if cell.closed {
            return None;
        }
        Some(i.entry(&mut cell))
    }

    fn due(&self) -> bool {
        let i = &self.inner;
        i.held.load(Ordering::SeqCst)
            && i.clock.now_ms()
                >= i.renewed_ms
                    .load(Ordering::SeqCst)
                    .saturating_add(i.lease_ms / 3)
    }

    /// Renew the lease on a timer while the run is held: every third of the lease, an empty
    /// commit carrying the entry when no commit of the run renewed it meanwhile. Stops with
    /// the [`Lease`] (dropped with the run's writer).
    pub(crate) fn start_timer(
        &mut self,
        writer: Writer,
        thread: ThreadId,
        run: RunId,
        epoch: Epoch,
    ) {
        if self.timer.is_some() {
            return;
        }
        let inner = Arc::clone(&self.inner);
        let period = Duration::from_millis((inner.lease_ms / 3).max(1));
        self.timer = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let mut cell = inner.cell.lock().await;
                if cell.closed || !inner.held.load(Ordering::SeqCst) {
                    continue;
                }
                let now = inner.clock.now_ms();
                if now < inner.renewed_ms.load(Ordering::SeqCst) + inner.lease_ms / 3 {
                    continue;
                }
                let commit = Commit {
                    thread: thread.clone(),
                    run: run.clone(),
                    epoch,
                    puts: Vec::new(),
                    latest: None,
                    attention: Some(inner.entry(&mut cell)),
                };
                // Submitted under the lock: a state the run writes next is queued after it.
                if let Err(e) = writer.submit(commit, true).await {
                    tracing::debug!(run = %run, error = %e, "lease renewal not submitted");
                }
            }
        }));
    }
}

impl Inner {
    /// The entry as of now (a fresh lease end while held), marked as written.
    fn entry(&self, cell: &mut Cell) -> Attention {
        let now = self.clock.now_ms();
        if self.held.load(Ordering::SeqCst) {
            cell.mark.lease_until_ms = now.saturating_add(self.lease_ms);
        }
        cell.mark.updated_ms = now;
        self.renewed_ms.store(now, Ordering::SeqCst);
        self.pending.store(false, Ordering::SeqCst);
        Attention::Open(cell.mark.encode())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(t) = self.timer.take() {
            t.abort();
        }
    }
}
