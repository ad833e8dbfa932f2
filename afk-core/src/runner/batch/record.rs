//! The end of a batch: every call's outcome (replayed, denied, settled, unknown or executed)
//! becomes its tool record and tool message, in call order, and the failure policies decide
//! whether the run goes on, degrades or fails.

use serde_json::Value;

use super::{Batch, BatchOutcome, CallResult, PlannedCall};
use crate::error::{Error, ErrorKind, Result};
use crate::runner::agent::FailurePolicy;
use crate::runner::events::RunEvent;
use crate::runner::journal::Plan;
use crate::runner::prompt::{text_message, tool_text};
use crate::runner::subagent;
use crate::runner::telemetry;
use crate::schema::{Role, ToolExecution};

/// Record every call of the batch in order, with `results` of the executed ones.
pub(super) fn apply(
    b: &mut Batch<'_>,
    calls: &[PlannedCall<'_>],
    mut results: Vec<Option<CallResult>>,
) -> Result<BatchOutcome> {
    let step = b.st.snap.step;
    let mut failures = 0;
    let mut degrade = None;
    let mut fail: Option<Error> = None;
    for (i, c) in calls.iter().enumerate() {
        let replayed = matches!(c.plan, Plan::Replay(_));
        if replayed {
            // No fresh call: a span that says so, and nothing else.
            drop(telemetry::execute_tool(&c.call.tool_name, &c.id, step, true).entered());
        }
        let res = outcome(b, c, results.get_mut(i).and_then(Option::take));
        b.st.snap.tool_calls += 1;
        if !res.success {
            failures += 1;
            let policy = if matches!(c.plan, Plan::Denied(_)) {
                b.agent.policies.approval
            } else {
                b.agent.policies.tool
            };
            let msg = res.error.clone().unwrap_or_default();
            match policy {
                FailurePolicy::Continue => {}
                FailurePolicy::Degrade => degrade = degrade.or(Some(msg)),
                FailurePolicy::Fail => fail = fail.or(Some(Error::new(ErrorKind::Tool, msg))),
            }
        }
        let success = res.success;
        push_records(b, c, res);
        b.events.emit(|| RunEvent::ToolCompleted {
            step,
            tool_call_id: c.id.clone(),
            success,
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

/// The outcome of call `c`; `executed`: its result, if it was executed.
fn outcome(b: &mut Batch<'_>, c: &PlannedCall<'_>, executed: Option<CallResult>) -> CallResult {
    match &c.plan {
        Plan::Replay(out) => {
            b.st.snap.replayed_effect_count += 1;
            // A delegation answered from its result row keeps its subagent record, as when it
            // ran (the record lives in the snapshot a crash may have lost).
            if c.delegation {
                subagent::record(b.st, &c.call.tool_name, out, None, None);
            }
            CallResult {
                success: true,
                output: out.clone(),
                error: None,
                latency_ms: None,
            }
        }
        Plan::Denied(r) => CallResult::failed(format!("Tool call denied: {r}")),
        Plan::SettledFailed(e) => CallResult::failed(e.clone()),
        Plan::Unknown => CallResult::failed(format!("Unknown tool '{}'", c.call.tool_name)),
        Plan::Execute => executed
            .unwrap_or_else(|| CallResult::failed("tool did not report a result".to_owned())),
    }
}

/// The call's tool execution record and its tool message.
fn push_records(b: &mut Batch<'_>, c: &PlannedCall<'_>, res: CallResult) {
    let call = c.call;
    let error = res
        .error
        .as_deref()
        .map_or(Value::Null, |e| Value::String(e.to_owned()));
    let text = tool_text(&call.tool_name, res.success, &res.output, &error);
    b.st.tool_executions.push(ToolExecution {
        tool_name: call.tool_name.clone(),
        tool_call_id: call.id.clone(),
        success: res.success,
        output: res.output,
        error: res.error,
        latency_ms: res.latency_ms,
        agent_name: Some(b.agent.name.clone()),
        agent_depth: Some(u64::from(b.delegator.depth)),
        agent_path: Some(b.agent.name.clone()),
        extra: Default::default(),
    });
    let mut msg = text_message(Role::Tool, text, Some(call.tool_name.clone()));
    msg.tool_call_id = Some(c.id.clone());
    b.st.push_message(msg);
}
