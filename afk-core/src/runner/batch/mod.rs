//! One tool batch: the approval gate, the effect journal (intent before, result after each
//! call), concurrent execution, replay of durable results, and the tool records and messages.
//!
//! A batch is a list of planned calls ([`PlannedCall`]): each call with the ids it goes by,
//! its effect row's key, its input hash and what the rules say to do with it. The phases run
//! in order over that list:
//! 1. [`plan::gate`]: the approval gate, with human decisions taking precedence; a call that
//!    needs approval pauses the run before anything else happens;
//! 2. [`plan::read_journal`]: the effect rules (see [`super::journal`]) applied to the stored
//!    rows, one round trip, skipped for a step this claim began;
//! 3. [`write_intents`]: the intent rows of every call about to execute, then the write
//!    barrier: nothing runs before every intent is durable;
//! 4. [`execute::run`]: the calls, concurrently, each result row committed as soon as that
//!    call finishes;
//! 5. [`record::apply`]: the records and tool messages in call order, and the failure
//!    policies.

mod execute;
mod plan;
mod record;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::agent::Agent;
use super::clock::Clock;
use super::events::{Decision, Events};
use super::journal::Plan;
use super::output_limit::OutputLimit;
use super::persist::Checkpointer;
use super::state::RunState;
use super::subagent::Delegator;
use super::toolbox::Toolbox;
use crate::error::{Error, Result};
use crate::schema::{
    EffectRowRef, EffectStatus, Extra, LlmResponse, PauseKind, PauseRequest, PausedPayload,
    PhasePayload, ToolCall,
};

/// What a tool batch works with: the agent and its tools, the run's state and writer, the
/// human decisions for this step, the way to run child runs, the event stream and the clock.
pub(crate) struct Batch<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) toolbox: &'a mut Toolbox,
    pub(crate) ckpt: &'a mut Checkpointer,
    pub(crate) st: &'a mut RunState,
    /// Human decisions by tool call id.
    pub(crate) decisions: &'a BTreeMap<String, Decision>,
    pub(crate) delegator: &'a Delegator,
    pub(crate) events: &'a Events,
    pub(crate) clock: &'a dyn Clock,
}

/// How a batch ended.
#[derive(Debug)]
pub(crate) enum BatchOutcome {
    /// A call needs a human decision; the `paused` record is durable.
    Paused(PauseRequest),
    /// Every call was processed.
    Done {
        total: u64,
        failures: u64,
        degrade: Option<String>,
    },
    /// A delegation's child run stopped without a final outcome: the run stops with the
    /// child's error (whatever its kind, the parent stays resumable).
    ChildStopped(Error),
}

/// One call of the batch and what to do with it.
#[derive(Debug)]
struct PlannedCall<'r> {
    call: &'r ToolCall,
    /// The call's id (the model's, or `auto_<step>_<i>`).
    id: String,
    /// Its id in the effect journal (distinct within the batch).
    eid: String,
    /// Its effect row's key.
    key: String,
    /// Its input hash.
    hash: String,
    /// The idempotency key handed to its tool (the same for every attempt of it).
    idempotency_key: String,
    plan: Plan,
    /// Markers its rows carry (a `did_not_run` settlement's).
    marks: Extra,
    /// A delegation to one of the agent's subagents.
    delegation: bool,
}

impl PlannedCall<'_> {
    fn executes(&self) -> bool {
        matches!(self.plan, Plan::Execute)
    }

    /// The call's intent row, begun at `now_ms`.
    fn intent(&self, now_ms: u64) -> EffectRowRef<'_> {
        EffectRowRef {
            input_hash: &self.hash,
            output_hash: None,
            output: &Value::Null,
            success: false,
            status: Some(EffectStatus::Intent),
            idempotency_key: Some(&self.idempotency_key),
            tool_name: Some(&self.call.tool_name),
            started_at_ms: Some(now_ms),
            extra: &self.marks,
        }
    }

    /// The call's result row for `res`, carrying `extra`, its output hashed as `output_hash`.
    fn result<'a>(
        &'a self,
        res: &'a CallResult,
        output_hash: &'a str,
        extra: &'a Extra,
    ) -> EffectRowRef<'a> {
        EffectRowRef {
            input_hash: &self.hash,
            output_hash: Some(output_hash),
            output: &res.output,
            success: res.success,
            status: Some(EffectStatus::Done),
            idempotency_key: Some(&self.idempotency_key),
            tool_name: Some(&self.call.tool_name),
            started_at_ms: None,
            extra,
        }
    }
}

/// The outcome of one call.
#[derive(Debug, Clone)]
struct CallResult {
    success: bool,
    output: Value,
    error: Option<String>,
    latency_ms: Option<f64>,
}

impl CallResult {
    fn failed(error: String) -> Self {
        CallResult {
            success: false,
            output: Value::Null,
            error: Some(error),
            latency_ms: None,
        }
    }
}

/// Run the tool calls of `resp` for the current step. `answer_size`: the answer's recorded
/// size, if the model turn measured it.
pub(crate) async fn run_batch(
    b: &mut Batch<'_>,
    resp: &LlmResponse,
    answer_size: Option<usize>,
) -> Result<BatchOutcome> {
    let step = b.st.snap.step;
    let mut calls = match plan::gate(b, &resp.tool_calls, step)? {
        plan::Gated::Calls(calls) => calls,
        plan::Gated::Pause(request) => return commit_pause(b, request).await,
    };
    plan::read_journal(b, &mut calls, step).await?;
    write_intents(b, &calls).await?;
    let limit = OutputLimit::for_step(
        b.ckpt.store().capabilities().max_value_size,
        resp,
        answer_size,
    );
    match execute::run(b, &calls, limit).await? {
        execute::Executed::Done(results) => record::apply(b, &calls, results),
        execute::Executed::Paused(request) => commit_pause(b, request).await,
        execute::Executed::ChildStopped(e) => Ok(BatchOutcome::ChildStopped(e)),
    }
}

/// The intent rows of every call about to execute, then the barrier: nothing runs before
/// every intent is durable.
async fn write_intents(b: &mut Batch<'_>, calls: &[PlannedCall<'_>]) -> Result<()> {
    let now_ms = b.clock.now_ms();
    for c in calls.iter().filter(|c| c.executes()) {
        b.ckpt.effect(c.key.clone(), c.intent(now_ms)).await?;
    }
    b.ckpt.barrier().await
}

/// The request of a run paused for approval of `call` (id `id`).
fn approval_request(call: &ToolCall, id: &str, step: u64, reason: String) -> PauseRequest {
    let mut payload = Map::new();
    payload.insert("tool_name".into(), Value::String(call.tool_name.clone()));
    payload.insert("arguments".into(), Value::Object(call.arguments.clone()));
    payload.insert("step".into(), json!(step));
    PauseRequest {
        kind: PauseKind::Approval,
        reason: Some(reason),
        prompt: None,
        tool_call_id: Some(id.to_owned()),
        payload,
        extra: Default::default(),
    }
}

/// Commit a `paused` record holding `request` (the gate's, or a paused child's as the
/// parent's), make it durable, and stop.
async fn commit_pause(b: &mut Batch<'_>, request: PauseRequest) -> Result<BatchOutcome> {
    let rec = PausedPayload {
        kind: request.kind,
        reason: request.reason.clone(),
        prompt: request.prompt.clone(),
        request: Some(request.clone()),
        extra: Default::default(),
    };
    b.ckpt
        .checkpoint(b.st.snap.step, PhasePayload::Paused(rec))
        .await?;
    b.ckpt.flush().await?;
    Ok(BatchOutcome::Paused(request))
}
