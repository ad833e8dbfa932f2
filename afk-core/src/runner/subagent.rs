//! Delegation to subagents: a tool call named like one of the agent's subagents runs a child
//! run in the same thread, with its own checkpoints.
//!
//! The child's run id is derived from `(parent run, step, tool call id)`, so after a crash the
//! parent finds the same child again: a child whose terminal result is stored is not run
//! again (its result is returned by the terminal short-circuit), a child that crashed is
//! resumed (a v2 run is resumable from its first commit), and a child whose output reached
//! the parent's effect journal is not even looked at (the call is replayed like any tool).
//! The parent's `pre_subagent_batch` and `post_subagent_batch` records name the child run ids.
//!
//! Only the child's own final outcome becomes the delegation's result ([`ChildOutcome`]):
//! * completed -> the call's output; ended `failed` / `degraded` / `cancelled`, or stopped by
//!   an error that ends a run for good (its policy failed it: `Tool`, `Llm`,
//!   `BudgetExceeded`; the child's terminal record holds it) -> a failed call;
//! * paused for approval -> the parent pauses too, with the child's request, naming the
//!   child run and its paused call; `resume_with_decision` on the parent passes the decision
//!   down to that call of the child;
//! * any other error (`EffectUncertain`, `Unavailable`, `Fenced`, `Timeout`, `Corrupt`, a
//!   panic, …) -> the parent stops with the same error kind, naming the child run and the
//!   delegating call. Nothing is recorded in the parent's effect journal (its intent row
//!   stays), so once the cause is dealt with (e.g. the child's call settled with
//!   `Runner::resume_settling` on the child run), a plain resume of the parent resumes the
//!   child and goes on.
//!
//! A child run is started through [`Launch`], the runner's one entry point for running a run,
//! which the orchestration hands down: this module never names it, so the recursion a child
//! run makes (run -> tool batch -> child run) is no import cycle.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::Instrument;

use super::agent::Agent;
use super::delegation::{CHILD_CALL_KEY, CHILD_RUN_KEY, child_run_id};
use super::events::{ChildDecisions, Decision, Entry, Outcome, Signal, Start};
use super::persist::Checkpointer;
use super::state::RunState;
use super::telemetry;
use crate::error::{Error, ErrorKind, Result};
use crate::hash::canonical_json;
use crate::ids::{RunId, ThreadId};
use crate::schema::{
    PauseRequest, PhasePayload, PostSubagentBatchPayload, PreSubagentBatchPayload,
    SubagentExecution,
};

/// The runner's entry point for running a run to its end or pause, boxed (a child run's
/// future holds its parent's batch, which holds the child's future: only a boxed future ends
/// that recursion for the `Send` check).
pub(crate) trait Launch: fmt::Debug + Send + Sync {
    /// Run (or resume) the run `entry` describes.
    fn launch(self: Arc<Self>, entry: Entry) -> BoxFuture<'static, Result<Outcome>>;
}

/// What a run needs to delegate: the entry point, its own nesting depth and the human
/// decisions its resume found for paused child runs.
#[derive(Debug, Clone)]
pub(crate) struct Delegator {
    pub(crate) launch: Arc<dyn Launch>,
    pub(crate) depth: u32,
    pub(crate) decisions: ChildDecisions,
}

impl Delegator {
    /// The child run of the delegation of call `call_id` (its effect-journal id) of step
    /// `step` of run `parent`, to `agent`.
    pub(crate) fn child(
        &self,
        agent: Agent,
        (thread, parent): (&ThreadId, &RunId),
        step: u64,
        call_id: &str,
    ) -> ChildRun {
        ChildRun {
            launch: Arc::clone(&self.launch),
            agent,
            thread: thread.clone(),
            run: child_run_id(parent, step, call_id),
            depth: self.depth + 1,
            parent: (parent.clone(), step, call_id.to_owned()),
            decision: self.decisions.get(call_id).cloned(),
        }
    }
}

/// How a delegation ended, for the parent's batch.
#[derive(Debug)]
pub(crate) enum ChildOutcome {
    /// The child's final outcome: the delegation's output, or a failed call with this error.
    Final(std::result::Result<Value, String>),
    /// The child waits for a human decision: the parent pauses with this request.
    Paused(PauseRequest),
    /// The child stopped without a final outcome: the parent stops with this error.
    Stopped(Error),
}

/// A child run about to be started or resumed.
#[derive(Debug)]
pub(crate) struct ChildRun {
    launch: Arc<dyn Launch>,
    agent: Agent,
    thread: ThreadId,
    run: RunId,
    depth: u32,
    /// `(parent run, step, delegating call id)`, for messages.
    parent: (RunId, u64, String),
    /// A human's decision for the child's paused call, passed down by the parent.
    decision: Option<(String, Decision)>,
}

impl ChildRun {
    /// The error the parent stops with: the child's kind (and retry flag and key, e.g. the
    /// child's uncertain effect row), naming the child run and the delegating call.
    fn stopped(&self, e: Error) -> ChildOutcome {
        let (parent, step, call) = &self.parent;
        let mut out = Error::new(
            e.kind(),
            format!(
                "subagent '{}' (tool call {call} of run {parent}, step {step}) stopped without \
                 a final outcome in child run {}: {}",
                self.agent.name,
                self.run,
                e.message()
            ),
        )
        .with_retryable(e.is_retryable());
        if let Some(k) = e.key() {
            out = out.with_key(k.to_owned());
        }
        ChildOutcome::Stopped(out.with_source(e))
    }

    /// The paused child's request, as the parent's: about the delegating call, naming the
    /// child run and its paused call.
    fn paused(&self, mut request: PauseRequest) -> ChildOutcome {
        let (_, _, call) = &self.parent;
        if let Some(c) = request.tool_call_id.take() {
            request
                .payload
                .insert(CHILD_CALL_KEY.to_owned(), Value::String(c));
        }
        request.payload.insert(
            CHILD_RUN_KEY.to_owned(),
            Value::String(self.run.to_string()),
        );
        request.payload.insert(
            "subagent".to_owned(),
            Value::String(self.agent.name.clone()),
        );
        request.tool_call_id = Some(call.clone());
        ChildOutcome::Paused(request)
    }

    /// Run (or resume) the child (see the module docs for what becomes of its outcome).
    pub(super) async fn run(self, args: Value) -> ChildOutcome {
        if self.depth > 8 {
            return ChildOutcome::Final(Err("subagent nesting deeper than 8".to_owned()));
        }
        let input = args
            .get("input")
            .and_then(Value::as_str)
            .map_or_else(|| canonical_json(&args), str::to_owned);
        // Fresh or resumed is decided under the child's claim (another parent, fenced or not
        // yet, may be starting the same child).
        let start = Start::Child(input, self.decision.clone());
        // The child answers no caller of its own: its signal never changes (the sender lives
        // as long as the child runs) and nobody listens to its events.
        let (_ctl, control) = watch::channel(Signal::Run);
        // Nested in the delegating call's `execute_tool` span (an agent used as a tool).
        let span = telemetry::invoke_agent(
            &self.agent.name,
            self.thread.as_str(),
            self.run.as_str(),
            None, // fresh or resumed is decided under the child's claim
        );
        let fut = Arc::clone(&self.launch).launch(Entry {
            agent: self.agent.clone(),
            thread: self.thread.clone(),
            run: self.run.clone(),
            start,
            depth: self.depth,
            parent: Some(self.parent.0.clone()),
            control,
            events: None,
        });
        let run = &self.run;
        match AssertUnwindSafe(fut.instrument(span)).catch_unwind().await {
            Ok(Ok(Outcome::Completed(r))) if r.state == "completed" => ChildOutcome::Final(Ok(
                json!({"run_id": run.as_str(), "final_text": r.final_text}),
            )),
            Ok(Ok(Outcome::Completed(r))) => ChildOutcome::Final(Err(format!(
                "subagent run {run} ended {}: {}",
                r.state, r.final_text
            ))),
            Ok(Ok(Outcome::Paused { request })) => self.paused(request),
            // The child waits out its models' outage: the parent stops, resumable (its
            // delegation has no result), and its resume resumes the child.
            Ok(Ok(Outcome::Suspended {
                reason,
                not_before_ms,
            })) => self.stopped(
                Error::unavailable(format!(
                    "suspended until {not_before_ms} (ms since the epoch): {reason}"
                ))
                .with_retryable(true),
            ),
            Ok(Err(e)) if ends_run(e.kind()) => ChildOutcome::Final(Err(e.to_string())),
            Ok(Err(e)) => self.stopped(e),
            Err(_) => self.stopped(Error::unexpected(format!(
                "the child run task panicked (child run {run})"
            ))),
        }
    }
}

/// Errors after which a run has written its own terminal `failed` record (its failure
/// policy or a budget ended it): the child's final outcome.
fn ends_run(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Tool | ErrorKind::Llm | ErrorKind::BudgetExceeded
    )
}

/// `pre_subagent_batch` at `step` naming the targets (subagent name, delegating call's
/// effect-journal id) and their child run ids.
pub(crate) async fn pre_batch(
    ckpt: &mut Checkpointer,
    step: u64,
    targets: Vec<(String, String)>,
) -> Result<()> {
    let children: Vec<Value> = targets
        .iter()
        .map(|(_, id)| Value::String(child_run_id(&ckpt.run, step, id).to_string()))
        .collect();
    let mut p = PreSubagentBatchPayload {
        targets: targets.into_iter().map(|(n, _)| n).collect(),
        router_parallel: true,
        extra: Default::default(),
    };
    p.extra
        .insert("child_run_ids".into(), Value::Array(children));
    ckpt.checkpoint(step, PhasePayload::PreSubagentBatch(p))
        .await
}

/// `post_subagent_batch` at `step` with the counts.
pub(crate) async fn post_batch(
    ckpt: &mut Checkpointer,
    step: u64,
    ok: u64,
    failed: u64,
) -> Result<()> {
    let p = PostSubagentBatchPayload {
        success_count: ok,
        failure_count: failed,
        extra: Default::default(),
    };
    ckpt.checkpoint(step, PhasePayload::PostSubagentBatch(p))
        .await
}

/// Add the subagent execution record.
pub(crate) fn record(
    st: &mut RunState,
    name: &str,
    output: &Value,
    error: Option<String>,
    latency_ms: Option<f64>,
) {
    st.subagent_executions.push(SubagentExecution {
        subagent_name: name.to_owned(),
        success: error.is_none(),
        output_text: output
            .get("final_text")
            .and_then(Value::as_str)
            .map(str::to_owned),
        error,
        latency_ms,
        extra: Default::default(),
    });
}
