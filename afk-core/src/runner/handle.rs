//! [`RunHandle`]: a running run, to await, stop or watch.

use tokio::sync::{broadcast, watch};

use super::events::{Outcome, RunEvent, Signal};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};

/// A running run: await its result, stop it, watch its events.
#[derive(Debug)]
pub struct RunHandle {
    run_id: RunId,
    thread_id: ThreadId,
    join: Option<tokio::task::JoinHandle<Result<Outcome>>>,
    ctl: watch::Sender<Signal>,
    events: Option<broadcast::Receiver<RunEvent>>,
    early: Option<Error>,
}

impl RunHandle {
    pub(super) fn new(
        run_id: RunId,
        thread_id: ThreadId,
        join: tokio::task::JoinHandle<Result<Outcome>>,
        ctl: watch::Sender<Signal>,
        events: broadcast::Receiver<RunEvent>,
    ) -> Self {
        RunHandle {
            run_id,
            thread_id,
            join: Some(join),
            ctl,
            events: Some(events),
            early: None,
        }
    }

    pub(super) fn failed(thread: ThreadId, e: Error) -> Self {
        let (ctl, _) = watch::channel(Signal::Run);
        let run_id = RunId::new("invalid_run_id").expect("a literal valid run id");
        RunHandle {
            run_id,
            thread_id: thread,
            join: None,
            ctl,
            events: None,
            early: Some(e),
        }
    }

    /// The run id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The thread id.
    pub fn thread_id(&self) -> &ThreadId {
        &self.thread_id
    }

    /// The event stream of this run (the first call gets every event from the start; later
    /// calls get `None`).
    pub fn events(&mut self) -> Option<broadcast::Receiver<RunEvent>> {
        self.events.take()
    }

    /// Stop the run for good: it ends with a `cancelled` terminal record and the handle
    /// resolves with [`ErrorKind::Cancelled`]. Takes effect at the next step boundary or model
    /// call.
    pub fn cancel(&self) {
        let _ = self.ctl.send(Signal::Cancel);
    }

    /// Stop the run without ending it: nothing terminal is written, so a later
    /// [`Runner::resume`](super::Runner::resume) continues it. The handle resolves with [`ErrorKind::Cancelled`].
    pub fn interrupt(&self) {
        let _ = self.ctl.send(Signal::Interrupt);
    }

    /// What [`RunHandle::interrupt`] sends, for a caller that hands the handle to
    /// [`RunHandle::result`] and may still want to interrupt the run.
    pub(super) fn interrupter(&self) -> watch::Sender<Signal> {
        self.ctl.clone()
    }

    /// A handle that aborts the run task at its current await point, as a crash of this
    /// process would (nothing more is written by the task; commits it already handed to the
    /// writer may still land). The handle then resolves with [`ErrorKind::Cancelled`] and a
    /// later [`Runner::resume`](super::Runner::resume) continues the run from its checkpoints. `None` for a handle
    /// that failed before starting.
    pub fn abort_handle(&self) -> Option<tokio::task::AbortHandle> {
        self.join.as_ref().map(|j| j.abort_handle())
    }

    /// Wait for the run to end or pause.
    pub async fn result(mut self) -> Result<Outcome> {
        // No one can take the event stream from here on: with its last receiver gone, the
        // run drops the channel (and its ring of slots) at its next step and builds no event.
        self.events = None;
        if let Some(e) = self.early.take() {
            return Err(e);
        }
        let Some(join) = self.join.take() else {
            return Err(Error::unexpected("run handle has no task"));
        };
        match join.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => Err(Error::unexpected("the run task panicked")),
            Err(e) => Err(Error::new(
                ErrorKind::Cancelled,
                format!("the run task was aborted: {e}"),
            )),
        }
    }
}
