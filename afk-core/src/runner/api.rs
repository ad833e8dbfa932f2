//! The runner's public face: [`Runner`] starts, resumes, settles and decides runs on one
//! store.

use std::sync::Arc;

use futures::FutureExt as _;
use tokio::sync::{broadcast, watch};
use tracing::Instrument;

use super::agent::Agent;
use super::config::RunnerConfig;
use super::events::{Decision, Entry, Outcome, RunEvent, Signal, Start};
use super::fork::ForkPoint;
use super::handle::RunHandle;
use super::journal::Settlement;
use super::start::{Shared, execute};
use super::stats::RunnerStats;
use super::telemetry;
use crate::error::Result;
use crate::ids::{RunId, ThreadId};
use crate::store::{Epoch, Store};

/// Starts and resumes runs on one store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runner {
    pub(super) shared: Arc<Shared>,
}

impl Runner {
    /// A runner writing to `store`.
    pub fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Self {
        Runner {
            shared: Arc::new(Shared::new(store, config)),
        }
    }

    /// The store this runner writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// Checkpoint statistics of every run of this runner so far (queue depth, commits,
    /// store writes, retries, the durable watermark), for metrics. All zero before the first
    /// run starts its writer. See [`RunnerStats`] for what each counter means.
    pub fn stats(&self) -> RunnerStats {
        self.shared
            .writer
            .get()
            .map(|w| RunnerStats::from(w.stats()))
            .unwrap_or_default()
    }

    /// Start a fresh run of `agent` in `thread` with the user's `input`, under a new run id.
    /// Must be called inside a Tokio runtime.
    pub fn run(&self, agent: &Agent, thread: &ThreadId, input: impl Into<String>) -> RunHandle {
        match RunId::new(self.shared.config.ids.new_id("run")) {
            Ok(run) => self.run_with_id(agent, thread, run, input),
            Err(e) => RunHandle::failed(thread.clone(), e),
        }
    }

    /// Start a fresh run under a caller-chosen run id.
    ///
    /// Errors (through the handle): `Conflict` if the thread already holds checkpoints of
    /// `run` (use [`Runner::resume`] for it); nothing is claimed or written then. Two starts of
    /// one run id at once: at most one of them runs it. The other finds the run under its
    /// claim and ends with `Conflict`, having run nothing; its claim fences the winner if that
    /// is still running (it then ends with `Fenced`), so resume the run.
    pub fn run_with_id(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        run: RunId,
        input: impl Into<String>,
    ) -> RunHandle {
        self.spawn(agent, thread, run, Start::Fresh(input.into()))
    }

    /// Resume a stored run (see the resume rules in the `runner` module's docs). A terminal run returns
    /// its stored result; a paused run returns [`Outcome::Paused`](super::Outcome::Paused) again.
    ///
    /// A run is resumable from its first commit on, after any number of crashes, and ends
    /// with the result it would have had without them. `NotFound` means nothing of the run
    /// was committed (a crash before its first commit): start it with
    /// [`Runner::run_with_id`] under the same run id.
    pub fn resume(&self, agent: &Agent, thread: &ThreadId, run: &RunId) -> RunHandle {
        self.spawn(agent, thread, run.clone(), Start::Resume(None))
    }

    /// Fork `source`: a new run `new_run` in the same thread that starts from the source's
    /// state at the start of `step` (its transcript, counters and records up to there; a
    /// [`ForkPoint`] may also replace the last user message), and runs from there with
    /// `agent`, the source left untouched. The new run's records name
    /// where it came from (`forked_from` in its `run_started` record and its snapshots). Steps
    /// before `step` are not run again; step `step` asks the model anew. An at-most-once call
    /// of a step the source had reached pauses for a human's approval instead of running (the
    /// source may have made that effect). Resume the new run like any other.
    ///
    /// The source may be running: the fork reads only records of steps the source has left
    /// (it must have begun `step`), never claims it, and does not disturb it.
    ///
    /// Errors: `InvalidInput` for step 0 or `new_run` equal to `source`; `NotFound` when the
    /// source has no records; `Conflict` when the source has not begun `step`, or when
    /// `new_run` already exists; `AgentMismatch` when `agent` is not the source's (nor
    /// declares its version compatible); `Corrupt` for unusable records.
    pub fn fork(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        source: &RunId,
        step: impl Into<ForkPoint>,
        new_run: RunId,
    ) -> RunHandle {
        let start = Start::Fork {
            source: source.clone(),
            point: step.into(),
        };
        self.spawn(agent, thread, new_run, start)
    }

    /// Resume a run a worker found in the index with its entry written under `seen`: claimed
    /// only if nobody claimed it since.
    pub(super) fn take_over(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        run: &RunId,
        seen: Epoch,
    ) -> RunHandle {
        self.spawn(agent, thread, run.clone(), Start::Takeover(seen))
    }

    /// Resume a run paused for approval, applying `decision` to the paused tool call. Works
    /// from any process with access to the store.
    pub fn resume_with_decision(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        run: &RunId,
        decision: Decision,
    ) -> RunHandle {
        self.spawn(agent, thread, run.clone(), Start::Resume(Some(decision)))
    }

    /// Settle an uncertain tool call, then resume the run. Works from any process with access
    /// to the store, at any later time.
    ///
    /// Use it when a resume failed with [`ErrorKind::EffectUncertain`](crate::ErrorKind::EffectUncertain): an at-most-once tool
    /// call has a durable intent row but no result, so the runner cannot know whether its side
    /// effect happened. That error's message names the call id and tool, and its
    /// [`Error::key`](crate::Error::key) is the call's effect row `effect:<run>:<step>:<call_id>`. Pass that
    /// `call_id` and what really happened:
    /// * [`Settlement::Ran`]: the output is recorded as the call's result and replayed; the
    ///   tool is not executed.
    /// * [`Settlement::DidNotRun`]: the tool is executed now, once, with the same idempotency
    ///   key.
    /// * [`Settlement::Failed`]: recorded as a failed call; the agent's tool-failure policy
    ///   applies.
    ///
    /// The settlement is written first, durably, as the call's result row (status `done`,
    /// marked `"settled": "human"` and `"settlement": "ran" | "did_not_run" | "failed"`), under
    /// this resume's claim epoch; then the run resumes as [`Runner::resume`] would and the
    /// effect-replay rules use that row. A crash right after the settlement loses nothing: a
    /// plain [`Runner::resume`] then continues from it.
    ///
    /// This is a method of its own rather than a [`Decision`] variant because a decision answers
    /// the one call a `paused` record names, while a settlement answers a run that is not
    /// paused, about a call the caller names, and is stored in the effect journal (the place
    /// the replay rules read) rather than in a `resumed` record.
    ///
    /// Errors (through the handle), with nothing written: `InvalidInput` if the run has no
    /// pending tool batch or `call_id` is not in it; `Conflict` if the run is terminal or
    /// paused, or the call has no lone intent row (it never started, or it already has a
    /// result). Settling again with an identical settlement writes nothing and resumes;
    /// a different one is a `Conflict`. Plus every error of [`Runner::resume`].
    pub fn resume_settling(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        run: &RunId,
        call_id: impl Into<String>,
        settlement: Settlement,
    ) -> RunHandle {
        let start = Start::Settle(call_id.into(), settlement);
        self.spawn(agent, thread, run.clone(), start)
    }

    fn spawn(&self, agent: &Agent, thread: &ThreadId, run: RunId, start: Start) -> RunHandle {
        let (task, ctl, ev_rx) = self.task(agent, thread, &run, start);
        let join = tokio::spawn(task);
        RunHandle::new(run, thread.clone(), join, ctl, ev_rx)
    }

    /// The future a run's task polls (every run in flight holds it, while it waits on its
    /// model too), and the handle's ends of the run's control and event channels.
    fn task(
        &self,
        agent: &Agent,
        thread: &ThreadId,
        run: &RunId,
        start: Start,
    ) -> (
        impl Future<Output = Result<Outcome>> + Send + 'static,
        watch::Sender<Signal>,
        broadcast::Receiver<RunEvent>,
    ) {
        let (ctl, control) = watch::channel(Signal::Run);
        let (events, ev_rx) = broadcast::channel(self.shared.config.event_capacity.max(1));
        let resumed = !matches!(start, Start::Fresh(_) | Start::Fork { .. });
        let span =
            telemetry::invoke_agent(&agent.name, thread.as_str(), run.as_str(), Some(resumed));
        let fut = execute(
            self.shared.clone(),
            Entry {
                agent: agent.clone(),
                thread: thread.clone(),
                run: run.clone(),
                start,
                depth: 0,
                parent: None,
                control,
                events: Some(events),
            },
        );
        let failed = span.clone();
        // A combinator, not an `async` block awaiting `fut`: that would hold the run's future
        // twice (as the block's capture and as the future it awaits), doubling every run's
        // memory while it waits.
        let fut = fut.inspect(move |out| {
            if let Err(e) = out {
                telemetry::record_error(&failed, e.kind().as_str());
            }
        });
        (fut.instrument(span), ctl, ev_rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::scripted::ScriptedLlm;
    use crate::store::MemoryStore;

    /// A run's task future stays a few KB: 10,000 runs waiting on their models hold 10,000
    /// of them. (8 KB when written; twice that with an `async` block around the run's future,
    /// which holds that future twice.)
    #[test]
    fn a_runs_task_future_is_small() {
        let runner = Runner::new(Arc::new(MemoryStore::new()), RunnerConfig::default());
        let agent = Agent::new("a", "", "m", ScriptedLlm::new(Vec::new()));
        let thread = ThreadId::new("t").unwrap();
        let run = RunId::new("r").unwrap();
        let (task, _ctl, _events) = runner.task(&agent, &thread, &run, Start::Fresh("hi".into()));
        let size = std::mem::size_of_val(&task);
        assert!(size <= 12 * 1024, "a run's task future is {size} bytes");
    }
}
