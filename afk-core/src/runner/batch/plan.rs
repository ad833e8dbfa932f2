//! Planning a batch: the approval gate, then the effect rules applied to the stored rows.

use super::{Batch, PlannedCall, approval_request};
use crate::error::Result;
use crate::keys;
use crate::runner::agent::GateDecision;
use crate::runner::events::Decision;
use crate::runner::fork::Origin;
use crate::runner::journal::{self, Plan, Policy};
use crate::runner::tool::{EffectPolicy, ToolContext};
use crate::schema::{Extra, PauseRequest, ToolCall};

/// What the gate made of a batch.
pub(super) enum Gated<'r> {
    /// Every call, executing or denied.
    Calls(Vec<PlannedCall<'r>>),
    /// A call needs a human decision: the run pauses with this request.
    Pause(PauseRequest),
}

/// The approval gate, with human decisions taking precedence, over the calls in order; the
/// first call that needs approval pauses the run before anything else happens.
pub(super) fn gate<'r>(b: &mut Batch<'_>, calls: &'r [ToolCall], step: u64) -> Result<Gated<'r>> {
    let ids = journal::call_ids(step, calls);
    let forked = Origin::of(b.st).filter(|o| o.guards(step));
    let mut plans = Vec::with_capacity(calls.len());
    for (call, id) in calls.iter().zip(&ids) {
        let decision = match b.decisions.get(id) {
            Some(Decision::Approve) => GateDecision::Allow,
            Some(Decision::Deny(r)) => GateDecision::Deny(r.clone()),
            None => match &b.agent.gate {
                Some(g) => g.decide(step, call),
                None => GateDecision::Allow,
            },
        };
        let decision = match (decision, &forked) {
            (GateDecision::Allow, Some(o))
                if b.decisions.get(id).is_none() && at_most_once(b, call) =>
            {
                GateDecision::RequestApproval(format!(
                    "this run is a fork of run {} at step {}, which had reached step {}: it may \
                     already have made this at-most-once call's effect",
                    o.run, o.step, o.source_step
                ))
            }
            (d, _) => d,
        };
        plans.push(match decision {
            GateDecision::Allow => Plan::Execute,
            GateDecision::Deny(r) => Plan::Denied(r),
            GateDecision::RequestApproval(reason) => {
                return Ok(Gated::Pause(approval_request(call, id, step, reason)));
            }
        });
    }
    let eids = journal::effect_ids(&ids);
    let mut out = Vec::with_capacity(calls.len());
    for (((call, id), eid), plan) in calls.iter().zip(ids).zip(eids).zip(plans) {
        out.push(PlannedCall {
            key: keys::effect_key(&b.ckpt.run, step, &eid)?,
            hash: (b.ckpt.hashes()).input_hash_of_args(&call.tool_name, &call.arguments),
            idempotency_key: ToolContext::idempotency_key_for(b.ckpt.run.as_str(), step, &eid),
            delegation: b.agent.subagent(&call.tool_name).is_some(),
            call,
            id,
            eid,
            plan,
            marks: Extra::new(),
        });
    }
    Ok(Gated::Calls(out))
}

/// Whether `call`'s tool may not run twice (a tool the agent does not have is not: it fails).
fn at_most_once(b: &mut Batch<'_>, call: &ToolCall) -> bool {
    b.toolbox
        .tool(b.agent, &call.tool_name)
        .is_some_and(|t| t.effect_policy() == EffectPolicy::AtMostOnce)
}

/// Apply the effect rules to the stored rows of the calls the gate let through, read in one
/// round trip; skipped for a step this claim began (it can hold no row yet, see
/// `Checkpointer::steps_fresh_after`).
pub(super) async fn read_journal(
    b: &mut Batch<'_>,
    calls: &mut [PlannedCall<'_>],
    step: u64,
) -> Result<()> {
    let rows = if b.ckpt.journal_may_hold(step) {
        let keys: Vec<String> = calls.iter().map(|c| c.key.clone()).collect();
        b.ckpt.store().get_many(&b.ckpt.thread, &keys).await?
    } else {
        vec![None; calls.len()]
    };
    for (c, row) in calls.iter_mut().zip(rows) {
        if !c.executes() {
            continue;
        }
        // A tool this agent does not have (the model named one that never existed, or the
        // run was started by an agent that had it): with a row, the row still decides, as for
        // an at-most-once tool, since nothing says what the tool was. A stored result is
        // replayed and an intent without one is uncertain; only what would have to run
        // becomes an unknown tool's failed call.
        let policy = match b.toolbox.tool(b.agent, &c.call.tool_name) {
            Some(t) => Policy {
                effect: t.effect_policy(),
                known: true,
            },
            None if c.delegation => Policy {
                effect: EffectPolicy::Idempotent,
                known: true,
            },
            None => Policy {
                effect: EffectPolicy::AtMostOnce,
                known: false,
            },
        };
        let stored = match row {
            Some(bytes) => {
                let other = || {
                    (b.ckpt.hashes()).other_input_hash_of_args(&c.call.tool_name, &c.call.arguments)
                };
                journal::read_row(&bytes, &c.key, &c.eid, (&c.hash, other))?
            }
            None => None,
        };
        if let Some(row) = stored {
            let names = (c.eid.as_str(), c.call.tool_name.as_str());
            (c.plan, c.marks) = journal::plan_from_row(row, &c.key, names, policy)?;
        }
        if !policy.known && c.executes() {
            c.plan = Plan::Unknown;
        }
    }
    Ok(())
}
