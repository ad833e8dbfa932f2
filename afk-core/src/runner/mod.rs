//! The runner: drives an [`Agent`] with its model and tools, checkpointing every phase, and
//! resumes runs from their checkpoints after a crash, a deploy or a pause.
//!
//! * [`Runner::run`] starts a fresh run, [`Runner::resume`] continues a stored one,
//!   [`Runner::resume_with_decision`] continues a run paused for approval. Each returns a
//!   [`RunHandle`] at once; the run executes on the Tokio runtime.
//!   [`Runner::resume_settling`] continues a run stopped by an uncertain at-most-once effect
//!   ([`ErrorKind::EffectUncertain`]) once a human has said what happened ([`Settlement`]).
//! * The loop and its phase order are in `exec.rs`, tool batches and the effect journal in
//!   `tools.rs`, **the resume rules in `resume.rs`**, delegation in `subagent.rs`.
//! * Every error path resolves the handle with an [`Error`]: store failures, corrupt records,
//!   fencing, panicking tools (caught and recorded as failed calls) and panics of the run task.

mod agent;
mod clock;
mod exec;
#[cfg(feature = "test-kit")]
pub mod fixture_check;
mod llm;
mod operator;
mod output_limit;
mod persist;
mod resume;
#[cfg(any(test, feature = "test-kit"))]
pub mod scripted;
mod settle;
mod state;
mod stats;
mod subagent;
mod tool;
mod tools;

use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tracing::Instrument;

pub use agent::{Agent, FailurePolicies, FailurePolicy, GateDecision, Limits, ToolGate};
pub use clock::{Clock, IdGen, ManualClock, RandomIds, SequentialIds, SystemClock};
pub use llm::{LlmClient, LlmRequest};
pub use operator::Recorded;
pub use settle::Settlement;
pub use stats::RunnerStats;
pub use subagent::child_run_id;
pub use tool::{EffectPolicy, Tool, ToolContext, ToolError, ToolRef, ToolSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::schema::{AgentResult, PauseRequest, RunStatus};
use crate::store::{Epoch, RandomSource, Store};
use crate::writer::{CheckpointConfig, Writer};
use exec::RunTask;
use persist::Checkpointer;
use state::RunState;

/// Runner settings: `RunnerConfig::default()` and the `with_*` setters (new settings may be
/// added without a breaking change).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunnerConfig {
    /// Time source (records' timestamps, budgets).
    pub clock: Arc<dyn Clock>,
    /// Run id source for [`Runner::run`].
    pub ids: Arc<dyn IdGen>,
    /// Capacity of each run's event channel; slow subscribers miss the oldest events.
    pub event_capacity: usize,
    /// The write-behind writer's settings (async writes, queue size, coalescing, retries, and
    /// `flush_timeout`, the bound for making the terminal record durable before the result is
    /// returned).
    pub checkpoint: CheckpointConfig,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            event_capacity: 256,
            checkpoint: CheckpointConfig::default(),
        }
    }
}

impl RunnerConfig {
    /// Set the time source ([`RunnerConfig::clock`]).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Set the run id source ([`RunnerConfig::ids`]).
    #[must_use]
    pub fn with_ids(mut self, ids: Arc<dyn IdGen>) -> Self {
        self.ids = ids;
        self
    }

    /// Set the capacity of each run's event channel ([`RunnerConfig::event_capacity`]).
    #[must_use]
    pub fn with_event_capacity(mut self, event_capacity: usize) -> Self {
        self.event_capacity = event_capacity;
        self
    }

    /// Set the checkpoint writer's settings ([`RunnerConfig::checkpoint`]).
    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: CheckpointConfig) -> Self {
        self.checkpoint = checkpoint;
        self
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

/// How a run ended (for now).
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The run reached a terminal state (`completed`, `degraded`, or a stored `failed` /
    /// `cancelled` result returned by the terminal short-circuit).
    Completed(Box<AgentResult>),
    /// The run waits for a human decision; the `paused` record holding `request` is durable.
    Paused {
        /// What the human is asked.
        request: PauseRequest,
    },
}

impl Outcome {
    /// The result, if the run is terminal.
    pub fn result(&self) -> Option<&AgentResult> {
        match self {
            Outcome::Completed(r) => Some(r),
            Outcome::Paused { .. } => None,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Run,
    Cancel,
    Interrupt,
}

#[derive(Debug)]
pub(crate) enum Start {
    Fresh(String),
    /// A child run: fresh with this input if nothing of it is stored once claimed, else
    /// resumed (with the parent's decision for one of its calls, if any).
    Child(String, Option<(String, Decision)>),
    Resume(Option<Decision>),
    /// Resume a child run, applying the decision only if it is paused on this call id (a
    /// human's decision the parent passes down).
    ResumeFor(String, Decision),
    /// Settle the uncertain call with this id, then resume.
    Settle(String, Settlement),
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub config: RunnerConfig,
    pub writer: tokio::sync::OnceCell<Writer>,
}

impl Shared {
    /// The writer, started on first use (it needs the Tokio runtime the runs execute on).
    pub(crate) async fn writer(&self) -> Result<Writer> {
        self.writer
            .get_or_try_init(|| async {
                Writer::new(
                    self.store.clone(),
                    self.config.checkpoint.clone(),
                    RandomSource::from_os(),
                )
            })
            .await
            .cloned()
    }
}

/// Starts and resumes runs on one store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runner {
    shared: Arc<Shared>,
}

impl Runner {
    /// A runner writing to `store`.
    pub fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Self {
        let clock = config.clock.clone();
        Runner {
            shared: Arc::new(Shared {
                store,
                clock,
                config,
                writer: tokio::sync::OnceCell::new(),
            }),
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

    /// Resume a stored run (see the resume rules in `runner/resume.rs`). A terminal run returns
    /// its stored result; a paused run returns [`Outcome::Paused`] again.
    ///
    /// A run is resumable from its first commit on, after any number of crashes, and ends
    /// with the result it would have had without them. `NotFound` means nothing of the run
    /// was committed (a crash before its first commit): start it with
    /// [`Runner::run_with_id`] under the same run id.
    pub fn resume(&self, agent: &Agent, thread: &ThreadId, run: &RunId) -> RunHandle {
        self.spawn(agent, thread, run.clone(), Start::Resume(None))
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
    /// Use it when a resume failed with [`ErrorKind::EffectUncertain`]: an at-most-once tool
    /// call has a durable intent row but no result, so the runner cannot know whether its side
    /// effect happened. That error's message names the call id and tool, and its
    /// [`Error::key`] is the call's effect row `effect:<run>:<step>:<call_id>`. Pass that
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
        let (ctl, rx) = watch::channel(Signal::Run);
        let (ev_tx, ev_rx) = broadcast::channel(self.shared.config.event_capacity.max(1));
        let span = tracing::info_span!("run", run = %run, thread = %thread);
        let fut = execute(
            self.shared.clone(),
            agent.clone(),
            thread.clone(),
            run.clone(),
            start,
            0,
            rx,
            ev_tx,
        );
        let join = tokio::spawn(fut.instrument(span));
        RunHandle {
            run_id: run,
            thread_id: thread.clone(),
            join: Some(join),
            ctl,
            events: Some(ev_rx),
            early: None,
        }
    }
}

/// Execute a fresh run or a resume to its end (or pause). Used for top-level runs and
/// subagent child runs.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute(
    shared: Arc<Shared>,
    agent: Agent,
    thread: ThreadId,
    run: RunId,
    start: Start,
    depth: u32,
    control: watch::Receiver<Signal>,
    events: broadcast::Sender<RunEvent>,
) -> Result<Outcome> {
    let lk = crate::store::latest_key(&run);
    // A fresh run never continues or overwrites a stored one. Looked at before claiming too
    // (`claim_if_new`, one round trip where the store can), so that a live run under that id
    // is not fenced off by a refused start.
    let epoch = if matches!(start, Start::Fresh(_)) {
        match shared.store.claim_if_new(&thread, &run).await? {
            Some(epoch) => epoch,
            None => {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "run {run} already exists in thread {thread}; resume it or start a run \
                         under a new run id"
                    ),
                )
                .with_key(lk));
            }
        }
    } else {
        shared.store.claim(&thread, &run).await?
    };
    // Whether the run exists is only settled under the claim: another runner may have started
    // it since the look above, and its commits are fenced from here on. Starting it over would
    // take its steps for fresh (so its effect journal unread) and redo its effects. The first
    // epoch ever handed out for the run needs no second look: epochs only grow, so no runner
    // of ours claimed it before, and nothing of it can be committed. (A writer that never
    // claims, an older AFK still running on the same store, is out of reach of any fence.) A
    // child run is always looked at: an older AFK's parent may have left it stored.
    let start = match start {
        Start::Fresh(input) => {
            if epoch > Epoch(1) {
                match look(&shared, &thread, &run, epoch).await? {
                    Stored::Nothing => {}
                    Stored::Run => {
                        return Err(Error::new(
                            ErrorKind::Conflict,
                            format!(
                                "run {run} of thread {thread} was started by another runner \
                                 while this one was starting it; nothing was run here, and this \
                                 claim fenced the other runner: resume the run"
                            ),
                        )
                        .with_key(lk));
                    }
                    Stored::KeysOnly(key) => return Err(keys_only(&thread, &run, key)),
                }
            }
            Start::Fresh(input)
        }
        Start::Child(input, decision) => match look(&shared, &thread, &run, epoch).await? {
            Stored::Run => match decision {
                Some((call, d)) => Start::ResumeFor(call, d),
                None => Start::Resume(None),
            },
            Stored::KeysOnly(key) => return Err(keys_only(&thread, &run, key)),
            Stored::Nothing => Start::Fresh(input),
        },
        other => other,
    };
    let start_input = match &start {
        Start::Fresh(input) => Some(input.clone()),
        _ => None,
    };
    let writer = shared.writer().await?;
    let mut ckpt = Checkpointer::new(
        shared.store.clone(),
        writer,
        shared.clock.clone(),
        shared.config.checkpoint.flush_timeout,
        thread,
        run,
        epoch,
    );
    let (decision, only_for, settlement) = match start {
        Start::Fresh(_) | Start::Child(..) => (None, None, None),
        Start::Resume(d) => (d, None, None),
        Start::ResumeFor(c, d) => (Some(d), Some(c), None),
        Start::Settle(id, s) => (None, None, Some((id, s))),
    };
    let (st, decisions, child_decisions, input) = match start_input {
        Some(input) => (
            RunState::default(),
            Default::default(),
            Default::default(),
            Some(input),
        ),
        None => match resume::load(&mut ckpt, decision, only_for.as_deref()).await? {
            resume::Loaded::Terminal(r) => {
                if let Some((id, _)) = settlement {
                    return Err(settle::terminal_refusal(&ckpt.run, &id));
                }
                return Ok(Outcome::Completed(r));
            }
            resume::Loaded::Paused(request) => {
                if let Some((id, _)) = settlement {
                    return Err(settle::paused_refusal(&ckpt.run, &id));
                }
                return Ok(Outcome::Paused { request });
            }
            resume::Loaded::Continue(restored) => {
                if let Some((id, s)) = &settlement {
                    settle::apply(&mut ckpt, &restored.state, id, s).await?;
                }
                ckpt.continue_log(restored.transcript.as_ref());
                (
                    restored.state,
                    restored.decisions,
                    restored.child_decisions,
                    None,
                )
            }
        },
    };
    let segment_start_ms = shared.clock.now_ms();
    let mut task = RunTask {
        agent,
        shared,
        ckpt,
        st,
        decisions,
        child_decisions,
        stopped_by_child: false,
        depth,
        control,
        events,
        segment_start_ms,
        specs: None,
    };
    let res = task.run_loop(input).await;
    if let Err(e) = &res {
        task.on_error(e).await;
    }
    res
}

/// What a start finds of a run under its claim.
enum Stored {
    /// No key of the run (the fence aside).
    Nothing,
    /// The run's latest pointer: the run exists.
    Run,
    /// Keys of the run but no latest pointer (this key, for one): written by something that
    /// writes its pointer last and has not finished (`afk import`, a fixture load).
    KeysOnly(String),
}

/// Look for the run under a claim at `epoch`: its latest pointer, or when that is missing and
/// the claim is not the run's first, any of its keys (one `list` per key family). The writers
/// that leave keys without a pointer (an import, a fixture load) claim before they write, so
/// under the first claim there are none to find and a fresh child run costs no `list`.
async fn look(shared: &Shared, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<Stored> {
    if shared
        .store
        .get(thread, &crate::store::latest_key(run))
        .await?
        .is_some()
    {
        return Ok(Stored::Run);
    }
    if epoch <= Epoch(1) {
        return Ok(Stored::Nothing);
    }
    for prefix in crate::keys::run_prefixes(run) {
        let page = shared.store.list(thread, &prefix, None, 1).await?;
        if let Some(key) = page.keys.into_iter().next() {
            return Ok(Stored::KeysOnly(key));
        }
    }
    Ok(Stored::Nothing)
}

/// `Conflict` for a start that found keys of the run without its pointer.
fn keys_only(thread: &ThreadId, run: &RunId, key: String) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "run {run} of thread {thread} has records but no latest pointer (an import or a load \
             that has not finished, or was stopped); nothing was run here. Finish it, or delete \
             the run (`afk prune --thread {thread} --run {run} --force`) before starting it"
        ),
    )
    .with_key(key)
}

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
    fn failed(thread: ThreadId, e: Error) -> Self {
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
    /// [`Runner::resume`] continues it. The handle resolves with [`ErrorKind::Cancelled`].
    pub fn interrupt(&self) {
        let _ = self.ctl.send(Signal::Interrupt);
    }

    /// A handle that aborts the run task at its current await point, as a crash of this
    /// process would (nothing more is written by the task; commits it already handed to the
    /// writer may still land). The handle then resolves with [`ErrorKind::Cancelled`] and a
    /// later [`Runner::resume`] continues the run from its checkpoints. `None` for a handle
    /// that failed before starting.
    pub fn abort_handle(&self) -> Option<tokio::task::AbortHandle> {
        self.join.as_ref().map(|j| j.abort_handle())
    }

    /// Wait for the run to end or pause.
    pub async fn result(mut self) -> Result<Outcome> {
        // No one can take the event stream from here on: with its last receiver gone, the
        // run's events cost it nothing more than a look at the receiver count.
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
