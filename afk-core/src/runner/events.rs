//! The run's event and decision types: how a run is entered ([`Start`]), what a caller asks of
//! it ([`Signal`], [`Decision`]), what it reports while it runs ([`RunEvent`], sent through
//! [`Events`]) and how it ends ([`Outcome`]). Pure vocabulary: no store, no I/O.

use std::collections::BTreeMap;

use tokio::sync::{broadcast, watch};

use super::agent::Agent;
use super::journal::Settlement;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::schema::{AgentResult, PauseRequest, RunStatus};
use crate::store::Epoch;

/// Where a fork starts: a step of the source, and optionally a new text for the run's last
/// user message before it (the input, usually), which the fork's model sees from that step on.
///
/// `runner.fork(&agent, &thread, &source, 3, new_run)` takes a step number as it is;
/// `ForkPoint::step(1).with_user_message("…")` asks the question again, differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkPoint {
    pub(crate) step: u64,
    pub(crate) user_message: Option<String>,
}

impl ForkPoint {
    /// The start of `step` of the source run.
    pub fn step(step: u64) -> ForkPoint {
        ForkPoint {
            step,
            user_message: None,
        }
    }

    /// With the run's last user message before the step replaced by `text`.
    #[must_use]
    pub fn with_user_message(mut self, text: impl Into<String>) -> ForkPoint {
        self.user_message = Some(text.into());
        self
    }

    /// The step the fork starts at.
    pub fn at(&self) -> u64 {
        self.step
    }
}

impl From<u64> for ForkPoint {
    fn from(step: u64) -> ForkPoint {
        ForkPoint::step(step)
    }
}

/// A human decision about a paused tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run the call.
    Approve,
    /// Do not run it; the reason becomes the failed call's error.
    Deny(String),
}

/// Decisions meant for a paused child run, by the parent's delegating call id: the child's
/// paused call id and the decision.
pub(crate) type ChildDecisions = BTreeMap<String, (String, Decision)>;

/// How a run ended (for now).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outcome {
    /// The run reached a terminal state (`completed`, `degraded`, or a stored `failed` /
    /// `cancelled` result returned by the terminal short-circuit).
    Completed(Box<AgentResult>),
    /// The run waits for a human decision; the `paused` record holding `request` is durable.
    Paused {
        /// What the human is asked.
        request: PauseRequest,
    },
    /// Every model the run may use failed with a retryable error (a rate limit, a 5xx, a
    /// timeout, a lost connection): the run waits out the outage rather than ending. Its
    /// suspended snapshot is durable, nothing terminal is written, and a resume at or after
    /// `not_before_ms` redoes the model turn (see [`Suspension`](crate::schema::Suspension)).
    Suspended {
        /// The model error that suspended the run.
        reason: String,
        /// Milliseconds since the epoch before which a resume would most likely fail again.
        not_before_ms: u64,
    },
}

impl Outcome {
    /// The result, if the run is terminal.
    pub fn result(&self) -> Option<&AgentResult> {
        match self {
            Outcome::Completed(r) => Some(r),
            Outcome::Paused { .. } | Outcome::Suspended { .. } => None,
        }
    }
}

/// What happens during a run, for observers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run started or resumed.
    RunStarted {
        /// The run id.
        run_id: String,
        /// Whether this is a resume.
        resumed: bool,
    },
    /// A step began.
    StepStarted {
        /// The step.
        step: u64,
    },
    /// The model answered (or a saved answer was reused).
    LlmCompleted {
        /// The step.
        step: u64,
        /// Tool calls in the answer.
        tool_calls: usize,
    },
    /// A tool call was processed.
    ToolCompleted {
        /// The step.
        step: u64,
        /// The call id.
        tool_call_id: String,
        /// Whether it succeeded.
        success: bool,
        /// Whether its output came from the effect journal.
        replayed: bool,
    },
    /// The run paused for approval.
    Paused {
        /// The step.
        step: u64,
    },
    /// The run suspended: its models are unavailable.
    Suspended {
        /// The step.
        step: u64,
        /// Before this time (ms since the epoch) a resume would most likely fail again.
        not_before_ms: u64,
    },
    /// The run reached a terminal state.
    Finished {
        /// `completed`, `degraded`, ….
        state: RunStatus,
    },
    /// The run stopped with an error.
    Failed {
        /// The error kind.
        kind: ErrorKind,
        /// The error message.
        message: String,
    },
}

/// A run's event stream, as its steps see it. Not `Clone`: the run's task holds the only
/// sender, which is what lets [`Events::release_unheard`] drop the channel.
#[derive(Debug)]
pub(crate) struct Events(Option<broadcast::Sender<RunEvent>>);

impl Events {
    /// The stream into `sender`'s channel; `None` for a run whose events nobody can receive
    /// (a child run's).
    pub(crate) fn new(sender: Option<broadcast::Sender<RunEvent>>) -> Self {
        Events(sender)
    }

    /// Send the event `ev` makes, if anyone still listens (most runs are only awaited, so an
    /// event nobody receives is not even built).
    pub(crate) fn emit(&self, ev: impl FnOnce() -> RunEvent) {
        if let Some(tx) = self.0.as_ref().filter(|tx| tx.receiver_count() > 0) {
            let _ = tx.send(ev());
        }
    }

    /// Drop the channel once its last receiver is gone: no receiver can appear again (a new
    /// one comes only from an existing one, and the sender is not shared), and the channel's
    /// ring of `event_capacity` slots (16 KB at the default 256) would otherwise stay in the
    /// run's memory until it ends, though most runs are only awaited.
    pub(crate) fn release_unheard(&mut self) {
        if self.0.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
            self.0 = None;
        }
    }
}

/// What the caller asks of a running run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Run,
    Cancel,
    Interrupt,
}

impl Signal {
    /// `Cancelled` when the caller asked the run to stop.
    pub(crate) fn check(control: &watch::Receiver<Signal>) -> Result<()> {
        match *control.borrow() {
            Signal::Run => Ok(()),
            Signal::Cancel => Err(Error::new(ErrorKind::Cancelled, "Run cancelled")),
            Signal::Interrupt => Err(Error::new(
                ErrorKind::Cancelled,
                "Run interrupted by caller",
            )),
        }
    }
}

/// How a run is entered.
#[derive(Debug)]
pub(crate) enum Start {
    Fresh(String),
    /// A child run: fresh with this input if nothing of it is stored once claimed, else
    /// resumed (with the parent's decision for one of its calls, if any).
    Child(String, Option<(String, Decision)>),
    Resume(Option<Decision>),
    /// Resume a run a worker found with its index entry written under this epoch: claimed
    /// only if no other claim came since (see `Store::claim_if`).
    Takeover(Epoch),
    /// Resume a child run, applying the decision only if it is paused on this call id (a
    /// human's decision the parent passes down).
    ResumeFor(String, Decision),
    /// Settle the uncertain call with this id, then resume.
    Settle(String, Settlement),
    /// A new run from the state of `source` at the start of `step` (see `fork`).
    Fork {
        source: RunId,
        point: ForkPoint,
    },
}

/// Everything a run is entered with: a top-level run's from its [`RunHandle`], a child run's
/// from its parent's delegation.
///
/// [`RunHandle`]: super::RunHandle
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) agent: Agent,
    pub(crate) thread: ThreadId,
    pub(crate) run: RunId,
    pub(crate) start: Start,
    /// Nesting depth: 0 for a top-level run, one more for each delegation.
    pub(crate) depth: u32,
    /// The parent run of a child run.
    pub(crate) parent: Option<RunId>,
    pub(crate) control: watch::Receiver<Signal>,
    /// Where its events go: `None` for a child run, whose events nobody receives.
    pub(crate) events: Option<broadcast::Sender<RunEvent>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The channel goes once its last receiver is gone, not before: a receiver made from
    /// another (`resubscribe`) keeps it, and events reach it until then.
    #[test]
    fn the_channel_goes_once_nobody_can_receive() {
        let (tx, rx) = broadcast::channel(4);
        let mut events = Events::new(Some(tx));
        events.release_unheard();
        assert!(events.0.is_some(), "a receiver listens");
        let mut later = rx.resubscribe();
        drop(rx);
        events.release_unheard();
        assert!(events.0.is_some(), "the resubscribed receiver listens");
        events.emit(|| RunEvent::StepStarted { step: 1 });
        assert_eq!(later.try_recv(), Ok(RunEvent::StepStarted { step: 1 }));
        drop(later);
        events.release_unheard();
        assert!(events.0.is_none(), "nobody can receive any more");
        events.emit(|| unreachable!("an event nobody can receive is not built"));
    }
}
