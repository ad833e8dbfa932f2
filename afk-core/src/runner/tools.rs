//! One tool batch: the approval gate, the effect journal (intent before, result after each
//! call), concurrent execution, replay of durable results, and the tool records and messages.
//!
//! Effect rules (DESIGN §5 step 5), evaluated for every call before anything runs:
//! * result row (`status` done, or an AFK v1 row without status) whose `input_hash` matches:
//!   successful -> replay its output; failed -> execute again, except a row a human settled as
//!   failed (`"settlement": "failed"`, see [`super::settle`]) -> a failed call with its error;
//!   a re-execution after a `did_not_run` settlement keeps that marker on its rows; a row
//!   whose output was too large for the store (`output_dropped`, see [`super::output_limit`])
//!   -> the same failed call, not executed;
//! * `input_hash` differs -> `Corrupt` ("Effect journal integrity conflict");
//! * intent row without result -> [`EffectPolicy::Idempotent`] tools execute again with the
//!   same idempotency key, [`EffectPolicy::AtMostOnce`] tools stop the run with
//!   `EffectUncertain` (message naming the call id and tool, key the effect row) until a human
//!   settles the call with `Runner::resume_settling`;
//! * no row -> execute.
//!
//! Intent rows of every call about to execute are committed (and the write barrier passed)
//! before the first one starts; each result row is committed as soon as that call finishes.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::Decision;
use super::agent::{FailurePolicy, GateDecision};
use super::exec::{RunTask, text_message};
use super::output_limit::{OUTPUT_DROPPED, OutputLimit, tool_text};
use super::settle;
use super::subagent::{self, ChildOutcome};
use super::tool::{EffectPolicy, ToolContext};
use crate::error::{Error, ErrorKind, Result};
use crate::hash::{input_hash_of_args, output_hash};
use crate::keys;
use crate::schema::{
    EffectRow, EffectStatus, Extra, LlmResponse, PauseKind, PauseRequest, PausedPayload,
    PhasePayload, Role, ToolCall, ToolExecution,
};

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
}

#[derive(Debug)]
enum Plan {
    Replay(Value),
    Execute,
    /// A human settled the call as failed (`Settlement::Failed`); not executed.
    SettledFailed(String),
    Denied(String),
    Unknown,
}

/// The outcome of one call.
#[derive(Debug, Clone)]
struct CallResult {
    success: bool,
    output: Value,
    error: Option<String>,
    latency_ms: Option<f64>,
}

/// The id of the `i`th call of a step's batch (`auto_<step>_<i>` when the model gave none).
pub(crate) fn call_id(step: u64, i: usize, call: &ToolCall) -> String {
    call.id
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("auto_{step}_{i}"))
}

/// The ids of a batch's calls, in order ([`call_id`] of each).
pub(crate) fn call_ids(step: u64, calls: &[ToolCall]) -> Vec<String> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| call_id(step, i, c))
        .collect()
}

/// The ids a batch's calls go by in the effect journal (effect rows, idempotency keys, child
/// runs): each call's id ([`call_id`]), made distinct within the batch. A model may give two
/// calls one id; they must still never share an effect row (a resume would replay one call's
/// result for the other, or find its input hash a mismatch), an idempotency key (a tool's
/// service would take the second call for a retry of the first) or a child run. A repeat at
/// position `i` goes by `<id>.<i>` (with more `.` while that is taken by another call of the
/// batch); the first occurrence keeps its id. Derived from the batch alone, so a resume of the
/// step finds the same rows.
pub(crate) fn effect_ids(ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        if !ids[..i].contains(id) {
            out.push(id.clone());
            continue;
        }
        let mut alias = format!("{id}.{i}");
        while ids.contains(&alias) || out.contains(&alias) {
            alias.push('.');
        }
        out.push(alias);
    }
    out
}

/// Run the tool calls of `resp` for the current step. `answer_size`: the answer's recorded
/// size, if the model turn measured it.
pub(crate) async fn run_batch(
    task: &mut RunTask,
    resp: &LlmResponse,
    answer_size: Option<usize>,
) -> Result<BatchOutcome> {
    let step = task.st.snap.step;
    let calls = &resp.tool_calls;
    let ids = call_ids(step, calls);
    let eids = effect_ids(&ids);

    // 1. The gate, with human decisions taking precedence.
    let mut plans: Vec<Plan> = Vec::with_capacity(calls.len());
    for (call, id) in calls.iter().zip(&ids) {
        let decision = match task.decisions.get(id) {
            Some(Decision::Approve) => GateDecision::Allow,
            Some(Decision::Deny(r)) => GateDecision::Deny(r.clone()),
            None => match &task.agent.gate {
                Some(g) => g.decide(step, call),
                None => GateDecision::Allow,
            },
        };
        match decision {
            GateDecision::Allow => plans.push(Plan::Execute),
            GateDecision::Deny(r) => plans.push(Plan::Denied(r)),
            GateDecision::RequestApproval(reason) => {
                return pause(task, call, id, reason).await;
            }
        }
    }

    // 2. The effect journal, one round trip; skipped for a step this claim began (it can hold
    //    no row yet, see `Checkpointer::steps_fresh_after`).
    let effect_keys = eids
        .iter()
        .map(|id| keys::effect_key(&task.ckpt.run, step, id))
        .collect::<Result<Vec<String>>>()?;
    let rows = if task.ckpt.journal_may_hold(step) {
        task.ckpt
            .store()
            .get_many(&task.ckpt.thread, &effect_keys)
            .await?
    } else {
        vec![None; effect_keys.len()]
    };
    let mut hashes = Vec::with_capacity(calls.len());
    // Markers a `did_not_run` settlement puts on the rows of the call's re-execution.
    let mut marks = vec![Extra::new(); calls.len()];
    for (i, call) in calls.iter().enumerate() {
        hashes.push(input_hash_of_args(&call.tool_name, &call.arguments));
        if !matches!(plans[i], Plan::Execute) {
            continue;
        }
        let is_sub = task.agent.subagent(&call.tool_name).is_some();
        // A tool this agent does not have (the model named one that never existed, or the
        // run was started by an agent that had it): with a row, the row still decides, as for
        // an at-most-once tool, since nothing says what the tool was. A stored result is
        // replayed and an intent without one is uncertain; only what would have to run
        // becomes an unknown tool's failed call.
        let (policy, unknown) = match task.tool(&call.tool_name) {
            Some(t) => (t.effect_policy(), false),
            None if is_sub => (EffectPolicy::Idempotent, false),
            None => (EffectPolicy::AtMostOnce, true),
        };
        let Some(bytes) = &rows[i] else {
            if unknown {
                plans[i] = Plan::Unknown;
            }
            continue;
        };
        let (plan, settled) = decide_from_row(
            bytes,
            &effect_keys[i],
            &eids[i],
            call,
            &hashes[i],
            (policy, !unknown),
        )?;
        plans[i] = match plan {
            Plan::Execute if unknown => Plan::Unknown,
            plan => plan,
        };
        marks[i] = settled;
    }

    // 3. Intents, then the barrier: nothing runs before every intent is durable.
    let now_ms = task.shared.clock.now_ms();
    for (i, call) in calls.iter().enumerate() {
        if matches!(plans[i], Plan::Execute) {
            let row = EffectRow {
                input_hash: hashes[i].clone(),
                output_hash: None,
                output: Value::Null,
                success: false,
                status: Some(EffectStatus::Intent),
                idempotency_key: Some(ToolContext::idempotency_key_for(
                    task.ckpt.run.as_str(),
                    step,
                    &eids[i],
                )),
                tool_name: Some(call.tool_name.clone()),
                started_at_ms: Some(now_ms),
                extra: marks[i].clone(),
            };
            task.ckpt.effect(step, &eids[i], &row).await?;
        }
    }
    task.ckpt.barrier().await?;

    // 4. Execute concurrently; commit each result row as soon as that call finishes.
    let limit = OutputLimit::for_step(
        task.ckpt.store().capabilities().max_value_size,
        resp,
        answer_size,
    );
    let results =
        match execute(task, calls, (&ids, &eids), &plans, (&hashes, &marks), limit).await? {
            Executed::Done(results) => results,
            Executed::Paused(request) => return commit_pause(task, request).await,
        };

    // 5. Records and messages, in call order.
    let mut failures = 0;
    let mut degrade = None;
    let mut fail: Option<Error> = None;
    for (i, call) in calls.iter().enumerate() {
        let (res, replayed) = match &plans[i] {
            Plan::Replay(out) => {
                task.st.snap.replayed_effect_count += 1;
                // A delegation answered from its result row keeps its subagent record, as
                // when it ran (the record lives in the snapshot a crash may have lost).
                if task.agent.subagent(&call.tool_name).is_some() {
                    subagent::record(task, &call.tool_name, out, None, None);
                }
                (
                    CallResult {
                        success: true,
                        output: out.clone(),
                        error: None,
                        latency_ms: None,
                    },
                    true,
                )
            }
            Plan::Denied(r) => (failed(format!("Tool call denied: {r}")), false),
            Plan::SettledFailed(e) => (failed(e.clone()), false),
            Plan::Unknown => (failed(format!("Unknown tool '{}'", call.tool_name)), false),
            Plan::Execute => match results.get(&i) {
                Some(r) => (r.clone(), false),
                None => (failed("tool did not report a result".to_owned()), false),
            },
        };
        task.st.snap.tool_calls += 1;
        if !res.success {
            failures += 1;
            let policy = if matches!(plans[i], Plan::Denied(_)) {
                task.agent.policies.approval
            } else {
                task.agent.policies.tool
            };
            let msg = res.error.clone().unwrap_or_default();
            match policy {
                FailurePolicy::Continue => {}
                FailurePolicy::Degrade => degrade = degrade.or(Some(msg)),
                FailurePolicy::Fail => {
                    fail = fail.or(Some(Error::new(ErrorKind::Tool, msg)));
                }
            }
        }
        push_records(task, call, &ids[i], &res);
        task.emit(|| super::RunEvent::ToolCompleted {
            step,
            tool_call_id: ids[i].clone(),
            success: res.success,
            replayed,
        });
    }
    if let Some(e) = fail {
        return Err(e);
    }
    Ok(BatchOutcome::Done {
        total: calls.len() as u64,
        failures,
        degrade,
    })
}

fn failed(error: String) -> CallResult {
    CallResult {
        success: false,
        output: Value::Null,
        error: Some(error),
        latency_ms: None,
    }
}

/// Apply the effect rules to a stored row: the plan, and the settlement markers to keep on
/// the rows of a `did_not_run` re-execution.
fn decide_from_row(
    bytes: &[u8],
    key: &str,
    id: &str,
    call: &ToolCall,
    hash: &str,
    (policy, known): (EffectPolicy, bool),
) -> Result<(Plan, Extra)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt_record(key, format!("effect row is not JSON: {e}")))?;
    if let Some(stored) = value.get("input_hash").and_then(Value::as_str)
        && stored != hash
    {
        return Err(Error::corrupt_record(
            key,
            format!("Effect journal integrity conflict for tool_call_id={id}"),
        ));
    }
    let Value::Object(mut map) = value else {
        return Ok((Plan::Execute, Extra::new())); // AFK: a non-map row is no row
    };
    if !map.contains_key("input_hash") {
        map.insert("input_hash".to_owned(), Value::String(hash.to_owned()));
    }
    let row: EffectRow = serde_json::from_value(Value::Object(map))
        .map_err(|e| Error::corrupt_record(key, format!("effect row is invalid: {e}")))?;
    let settlement = row.extra.get(settle::SETTLEMENT).and_then(Value::as_str);
    // A failure recorded for good (a human's `failed` settlement, a dropped output): its error.
    let recorded_failure = if settlement == Some("failed") {
        Some("settled as failed")
    } else if row.extra.contains_key(OUTPUT_DROPPED) {
        Some("the tool's output was too large to keep")
    } else {
        None
    };
    Ok(match row.status() {
        EffectStatus::Done if row.success => (Plan::Replay(row.output), Extra::new()),
        EffectStatus::Done if recorded_failure.is_some() => {
            let error = row
                .extra
                .get(settle::SETTLED_ERROR)
                .and_then(Value::as_str)
                .or(recorded_failure)
                .unwrap_or_default()
                .to_owned();
            (Plan::SettledFailed(error), Extra::new())
        }
        EffectStatus::Done if settlement == Some("did_not_run") => {
            (Plan::Execute, settle::did_not_run_marks())
        }
        EffectStatus::Done => (Plan::Execute, Extra::new()),
        EffectStatus::Intent => match policy {
            EffectPolicy::Idempotent => (Plan::Execute, Extra::new()),
            EffectPolicy::AtMostOnce => {
                let why = if known {
                    "its tool is at-most-once"
                } else {
                    "this agent has no such tool, so nothing says it may run again"
                };
                return Err(Error::new(
                    ErrorKind::EffectUncertain,
                    format!(
                        "tool call {id} (tool '{}') may or may not have run (intent recorded, \
                         no result) and {why}; settle it with \
                         Runner::resume_settling(.., \"{id}\", Settlement::..)",
                        call.tool_name
                    ),
                )
                .with_key(key));
            }
        },
    })
}

/// `ids`: the calls' ids and their effect-journal ids ([`effect_ids`]).
async fn execute(
    task: &mut RunTask,
    calls: &[ToolCall],
    (ids, eids): (&[String], &[String]),
    plans: &[Plan],
    (hashes, marks): (&[String], &[Extra]),
    limit: Option<OutputLimit>,
) -> Result<Executed> {
    let step = task.st.snap.step;
    let sub_targets: Vec<(String, String)> = calls
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            matches!(plans[*i], Plan::Execute) && task.agent.subagent(&c.tool_name).is_some()
        })
        .map(|(i, c)| (c.tool_name.clone(), eids[i].clone()))
        .collect();
    if !sub_targets.is_empty() {
        subagent::pre_batch(task, sub_targets.clone()).await?;
    }
    let mut calls_to_run: Vec<(
        usize,
        futures::future::BoxFuture<'static, Call>,
        tracing::Span,
    )> = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        if !matches!(plans[i], Plan::Execute) {
            continue;
        }
        let ctx = ToolContext {
            run_id: task.run_str(),
            thread_id: task.thread_str(),
            tool_call_id: ids[i].clone(),
            step,
            idempotency_key: ToolContext::idempotency_key_for(
                task.ckpt.run.as_str(),
                step,
                &eids[i],
            ),
        };
        let args = Value::Object(call.arguments.clone());
        let name = call.tool_name.clone();
        let span = tracing::info_span!("tool_call", tool = %name, call_id = %ids[i], step);
        let tool_name = call.tool_name.clone();
        let fut: futures::future::BoxFuture<'static, Call> = if let Some(tool) = task.tool(&name) {
            Box::pin(async move {
                let t0 = Instant::now();
                let out = AssertUnwindSafe(tool.call(ctx, args)).catch_unwind().await;
                let out = out.map(|r| r.map_err(|e| e.message));
                Call::Done(call_result(out, &tool_name, t0))
            })
        } else if let Some(sub) = task.agent.subagent(&name).cloned() {
            let child = subagent::ChildRun::new(task, sub, &eids[i]);
            Box::pin(async move {
                let t0 = Instant::now();
                match child.run(args).await {
                    ChildOutcome::Final(r) => Call::Done(call_result(Ok(r), &tool_name, t0)),
                    ChildOutcome::Paused(request) => Call::Paused(request),
                    ChildOutcome::Stopped(e) => Call::Stopped(e),
                }
            })
        } else {
            Box::pin(async move {
                let t0 = Instant::now();
                let out = Err(format!("Unknown tool '{name}'"));
                Call::Done(call_result(Ok(out), &tool_name, t0))
            })
        };
        calls_to_run.push((i, fut, span));
    }
    // One call (most batches) is awaited as it is; several run concurrently, at most
    // `tool_parallelism` at a time.
    let mut only = None;
    let mut futs = None;
    if calls_to_run.len() == 1 {
        only = calls_to_run.pop();
    } else {
        let sem = Arc::new(Semaphore::new(task.agent.limits.tool_parallelism.max(1)));
        let all = futs.insert(FuturesUnordered::new());
        for (i, fut, span) in calls_to_run {
            let sem = sem.clone();
            all.push(
                async move {
                    let _permit = sem.acquire_owned().await;
                    (i, fut.await)
                }
                .instrument(span),
            );
        }
    }
    let mut results = BTreeMap::new();
    let mut paused = None;
    let mut stopped = None;
    let mut sub_ok = 0;
    let mut sub_failed = 0;
    // Every call runs to its end (and its result row is committed) even when a delegation
    // stopped or paused: nothing is left cut mid-effect.
    loop {
        let next = match (only.take(), futs.as_mut()) {
            (Some((i, fut, span)), _) => Some((i, fut.instrument(span).await)),
            (None, Some(all)) => all.next().await,
            (None, None) => None,
        };
        let Some((i, call)) = next else { break };
        let mut extra = marks[i].clone();
        let res = match call {
            Call::Done(res) => {
                let records = 1 + usize::from(task.agent.subagent(&calls[i].tool_name).is_some());
                within_limit(limit, (&calls[i].tool_name, records), res, &mut extra)
            }
            Call::Paused(request) => {
                paused = paused.or(Some(request));
                continue;
            }
            Call::Stopped(e) => {
                stopped = stopped.or(Some(e));
                continue;
            }
        };
        let row = EffectRow {
            input_hash: hashes[i].clone(),
            output_hash: Some(output_hash(&res.output)),
            output: res.output.clone(),
            success: res.success,
            status: Some(EffectStatus::Done),
            idempotency_key: Some(ToolContext::idempotency_key_for(
                task.ckpt.run.as_str(),
                step,
                &eids[i],
            )),
            tool_name: Some(calls[i].tool_name.clone()),
            started_at_ms: None,
            extra,
        };
        task.ckpt.effect(step, &eids[i], &row).await?;
        if task.agent.subagent(&calls[i].tool_name).is_some() {
            if res.success {
                sub_ok += 1
            } else {
                sub_failed += 1
            }
            subagent::record(
                task,
                &calls[i].tool_name,
                &res.output,
                res.error.clone(),
                res.latency_ms,
            );
        }
        results.insert(i, res);
    }
    if let Some(e) = stopped {
        // The child's error, not the parent's: the parent stays resumable whatever its kind.
        task.stopped_by_child = true;
        return Err(e);
    }
    if let Some(request) = paused {
        return Ok(Executed::Paused(request));
    }
    if !sub_targets.is_empty() {
        subagent::post_batch(task, sub_ok, sub_failed).await?;
    }
    Ok(Executed::Done(results))
}

/// `res` as the store can keep it (see [`super::output_limit`]; `records`: see
/// [`OutputLimit::check`]): an output over its share becomes a failed call whose row is marked
/// [`OUTPUT_DROPPED`] (a resume replays it), and a failure's error is cut to fit.
fn within_limit(
    limit: Option<OutputLimit>,
    (tool_name, records): (&str, usize),
    res: CallResult,
    extra: &mut Extra,
) -> CallResult {
    let Some(limit) = limit else {
        return res;
    };
    if !res.success {
        let error = res.error.map(|e| limit.fit_error(tool_name, e, records));
        return CallResult { error, ..res };
    }
    match limit.check(tool_name, &res.output, records) {
        None => res,
        Some((bytes, error)) => {
            extra.insert(OUTPUT_DROPPED.to_owned(), Value::from(bytes));
            extra.insert(
                settle::SETTLED_ERROR.to_owned(),
                Value::String(error.clone()),
            );
            CallResult {
                success: false,
                output: Value::Null,
                error: Some(error),
                latency_ms: res.latency_ms,
            }
        }
    }
}

/// What one call's future ended with.
enum Call {
    /// A result to record (success or failure).
    Done(CallResult),
    /// A delegation whose child paused for approval (nothing recorded).
    Paused(PauseRequest),
    /// A delegation whose child stopped without a final outcome (nothing recorded).
    Stopped(Error),
}

/// How the execution of a batch ended.
enum Executed {
    /// Every call has a result.
    Done(BTreeMap<usize, CallResult>),
    /// A child run paused; the parent pauses with this request.
    Paused(PauseRequest),
}

/// The result of a call from its outcome (`Err`: it panicked).
fn call_result(
    out: std::result::Result<std::result::Result<Value, String>, Box<dyn std::any::Any + Send>>,
    tool_name: &str,
    t0: Instant,
) -> CallResult {
    let latency = Some(t0.elapsed().as_secs_f64() * 1000.0);
    match out {
        Ok(Ok(v)) => CallResult {
            success: true,
            output: v,
            error: None,
            latency_ms: latency,
        },
        Ok(Err(m)) => CallResult {
            success: false,
            output: Value::Null,
            error: Some(format!("Error executing tool '{tool_name}': {m}")),
            latency_ms: latency,
        },
        Err(_) => CallResult {
            success: false,
            output: Value::Null,
            error: Some(format!("Error executing tool '{tool_name}': tool panicked")),
            latency_ms: latency,
        },
    }
}

fn push_records(task: &mut RunTask, call: &ToolCall, id: &str, res: &CallResult) {
    task.st.tool_executions.push(ToolExecution {
        tool_name: call.tool_name.clone(),
        tool_call_id: call.id.clone(),
        success: res.success,
        output: res.output.clone(),
        error: res.error.clone(),
        latency_ms: res.latency_ms,
        agent_name: Some(task.agent.name.clone()),
        agent_depth: Some(u64::from(task.depth)),
        agent_path: Some(task.agent.name.clone()),
        extra: Default::default(),
    });
    let error = res.error.clone().map_or(Value::Null, Value::String);
    let text = tool_text(&call.tool_name, res.success, &res.output, &error);
    let mut msg = text_message(Role::Tool, text, Some(call.tool_name.clone()));
    msg.tool_call_id = Some(id.to_owned());
    task.st.push_message(msg);
}

/// Commit a `paused` record holding the full request, make it durable, and stop.
async fn pause(
    task: &mut RunTask,
    call: &ToolCall,
    id: &str,
    reason: String,
) -> Result<BatchOutcome> {
    let mut payload = Map::new();
    payload.insert("tool_name".into(), Value::String(call.tool_name.clone()));
    payload.insert("arguments".into(), Value::Object(call.arguments.clone()));
    payload.insert("step".into(), json!(task.st.snap.step));
    let request = PauseRequest {
        kind: PauseKind::Approval,
        reason: Some(reason),
        prompt: None,
        tool_call_id: Some(id.to_owned()),
        payload,
        extra: Default::default(),
    };
    commit_pause(task, request).await
}

/// Commit a `paused` record holding `request` (the gate's, or a paused child's as the
/// parent's), make it durable, and stop.
async fn commit_pause(task: &mut RunTask, request: PauseRequest) -> Result<BatchOutcome> {
    let rec = PausedPayload {
        kind: request.kind,
        reason: request.reason.clone(),
        prompt: request.prompt.clone(),
        request: Some(request.clone()),
        extra: Default::default(),
    };
    task.ckpt
        .checkpoint(task.st.snap.step, PhasePayload::Paused(rec))
        .await?;
    task.ckpt.flush().await?;
    Ok(BatchOutcome::Paused(request))
}
