//! Executing a batch's calls: tools and delegations concurrently (at most
//! `Limits::tool_parallelism` at a time), each result row committed as soon as its call
//! finishes. Every call runs to its end (and its result row is committed) even when a
//! delegation stopped or paused: nothing is left cut mid-effect.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::{Batch, CallResult, PlannedCall};
use crate::error::{Error, Result};
use crate::runner::journal::{OUTPUT_DROPPED, SETTLED_ERROR};
use crate::runner::output_limit::OutputLimit;
use crate::runner::subagent::{self, ChildOutcome};
use crate::runner::telemetry;
use crate::runner::tool::ToolContext;
use crate::schema::{Extra, PauseRequest};

/// How the execution of a batch ended.
pub(super) enum Executed {
    /// Every executed call has a result, at its position in the batch (a call not executed
    /// has none).
    Done(Vec<Option<CallResult>>),
    /// A child run paused; the parent pauses with this request.
    Paused(PauseRequest),
    /// A child run stopped without a final outcome; the parent stops with its error.
    ChildStopped(Error),
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

/// What the calls of a batch ended with, as they finish.
#[derive(Default)]
struct Finished {
    /// By position in the batch (a vector, not a map: one small allocation per batch).
    results: Vec<Option<CallResult>>,
    paused: Option<PauseRequest>,
    stopped: Option<Error>,
    delegations_ok: u64,
    delegations_failed: u64,
}

/// Execute the calls planned to run, recording each result as it comes.
pub(super) async fn run(
    b: &mut Batch<'_>,
    calls: &[PlannedCall<'_>],
    limit: Option<OutputLimit>,
) -> Result<Executed> {
    let step = b.st.snap.step;
    let targets: Vec<(String, String)> = calls
        .iter()
        .filter(|c| c.executes() && c.delegation)
        .map(|c| (c.call.tool_name.clone(), c.eid.clone()))
        .collect();
    let delegates = !targets.is_empty();
    if delegates {
        subagent::pre_batch(b.ckpt, step, targets).await?;
    }
    let started = start(b, calls, step);
    let mut pending = Pending::new(started, b.agent.limits.tool_parallelism);
    let mut done = Finished {
        results: std::iter::repeat_with(|| None).take(calls.len()).collect(),
        ..Finished::default()
    };
    while let Some((i, call)) = pending.next().await {
        match call {
            Call::Done(res) => finish(b, &calls[i], res, limit, &mut done, i).await?,
            Call::Paused(request) => done.paused = done.paused.or(Some(request)),
            Call::Stopped(e) => done.stopped = done.stopped.or(Some(e)),
        }
    }
    if let Some(e) = done.stopped {
        return Ok(Executed::ChildStopped(e));
    }
    if let Some(request) = done.paused {
        return Ok(Executed::Paused(request));
    }
    if delegates {
        let (ok, failed) = (done.delegations_ok, done.delegations_failed);
        subagent::post_batch(b.ckpt, step, ok, failed).await?;
    }
    Ok(Executed::Done(done.results))
}

/// A started call: its position in the batch, its future and its span.
type Started = (usize, BoxFuture<'static, Call>, tracing::Span);

/// The futures of the calls planned to run: a tool's call, a delegation's child run, or an
/// unknown tool's failure.
fn start(b: &mut Batch<'_>, calls: &[PlannedCall<'_>], step: u64) -> Vec<Started> {
    let mut out = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate().filter(|(_, c)| c.executes()) {
        let (run, thread) = (b.ckpt.run.as_str(), b.ckpt.thread.as_str());
        let ctx = ToolContext {
            run_id: run.to_owned(),
            thread_id: thread.to_owned(),
            tool_call_id: c.id.clone(),
            step,
            idempotency_key: c.idempotency_key.clone(),
        };
        let args = Value::Object(c.call.arguments.clone());
        let name = c.call.tool_name.clone();
        let span = telemetry::execute_tool(&name, &c.id, step, false);
        let fut: BoxFuture<'static, Call> = if let Some(tool) = b.toolbox.tool(b.agent, &name) {
            Box::pin(async move {
                let t0 = Instant::now();
                let out = AssertUnwindSafe(tool.call(ctx, args)).catch_unwind().await;
                let out = out.map(|r| r.map_err(|e| e.message));
                Call::Done(call_result(out, &name, t0))
            })
        } else if let Some(sub) = b.agent.subagent(&name).cloned() {
            let ids = (&b.ckpt.thread, &b.ckpt.run);
            let child = b.delegator.child(sub, ids, step, &c.eid);
            Box::pin(async move {
                let t0 = Instant::now();
                match child.run(args).await {
                    ChildOutcome::Final(r) => Call::Done(call_result(Ok(r), &name, t0)),
                    ChildOutcome::Paused(request) => Call::Paused(request),
                    ChildOutcome::Stopped(e) => Call::Stopped(e),
                }
            })
        } else {
            Box::pin(async move {
                let t0 = Instant::now();
                let out = Err(format!("Unknown tool '{name}'"));
                Call::Done(call_result(Ok(out), &name, t0))
            })
        };
        out.push((i, fut, span));
    }
    out
}

/// The started calls, driven to their ends: one call (most batches) is awaited as it is;
/// several run concurrently, at most `parallelism` at a time.
enum Pending {
    One(Option<Started>),
    Many(FuturesUnordered<BoxFuture<'static, (usize, Call)>>),
}

impl Pending {
    fn new(mut started: Vec<Started>, parallelism: usize) -> Self {
        if started.len() == 1 {
            return Pending::One(started.pop());
        }
        let sem = Arc::new(Semaphore::new(parallelism.max(1)));
        let all = FuturesUnordered::new();
        for (i, fut, span) in started {
            let sem = sem.clone();
            let fut = async move {
                let _permit = sem.acquire_owned().await;
                (i, fut.await)
            };
            all.push(fut.instrument(span).boxed());
        }
        Pending::Many(all)
    }

    /// The next call to finish, with its position.
    async fn next(&mut self) -> Option<(usize, Call)> {
        match self {
            Pending::One(one) => match one.take() {
                Some((i, fut, span)) => Some((i, fut.instrument(span).await)),
                None => None,
            },
            Pending::Many(all) => all.next().await,
        }
    }
}

/// Record the result of call `c` (at position `i`): fitted to the store's limit, its result
/// row committed, a delegation's record kept.
async fn finish(
    b: &mut Batch<'_>,
    c: &PlannedCall<'_>,
    res: CallResult,
    limit: Option<OutputLimit>,
    done: &mut Finished,
    i: usize,
) -> Result<()> {
    let mut extra = c.marks.clone();
    let records = 1 + usize::from(c.delegation);
    let res = within_limit(limit, (&c.call.tool_name, records), res, &mut extra);
    let output_hash = b.ckpt.hashes().output_hash(&res.output);
    let row = c.result(&res, &output_hash, &extra);
    b.ckpt.effect(c.key.clone(), row).await?;
    if c.delegation {
        if res.success {
            done.delegations_ok += 1;
        } else {
            done.delegations_failed += 1;
        }
        let error = res.error.clone();
        subagent::record(b.st, &c.call.tool_name, &res.output, error, res.latency_ms);
    }
    if let Some(slot) = done.results.get_mut(i) {
        *slot = Some(res);
    }
    Ok(())
}

/// `res` as the store can keep it (see [`crate::runner::output_limit`]; `records`: see
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
            extra.insert(SETTLED_ERROR.to_owned(), Value::String(error.clone()));
            CallResult {
                success: false,
                output: Value::Null,
                error: Some(error),
                latency_ms: res.latency_ms,
            }
        }
    }
}

/// The result of a call from its outcome (`Err`: it panicked).
fn call_result(
    out: std::result::Result<std::result::Result<Value, String>, Box<dyn std::any::Any + Send>>,
    tool_name: &str,
    t0: Instant,
) -> CallResult {
    let latency_ms = Some(t0.elapsed().as_secs_f64() * 1000.0);
    let error = match out {
        Ok(Ok(output)) => {
            return CallResult {
                success: true,
                output,
                error: None,
                latency_ms,
            };
        }
        Ok(Err(m)) => {
            telemetry::record_error(&tracing::Span::current(), "tool_error");
            format!("Error executing tool '{tool_name}': {m}")
        }
        Err(_) => {
            telemetry::record_error(&tracing::Span::current(), "panic");
            format!("Error executing tool '{tool_name}': tool panicked")
        }
    };
    CallResult {
        latency_ms,
        ..CallResult::failed(error)
    }
}
