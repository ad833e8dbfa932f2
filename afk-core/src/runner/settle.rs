//! Settling an uncertain effect: the way out of [`ErrorKind::EffectUncertain`].
//!
//! An [`EffectPolicy::AtMostOnce`](super::EffectPolicy::AtMostOnce) call whose intent row is
//! durable but whose result row is not may or may not have performed its side effect, so the
//! runner refuses to guess. A human (or an operator tool) who found out what happened calls
//! [`Runner::resume_settling`](super::Runner::resume_settling) with a [`Settlement`]; this
//! module validates it against the stored run and writes it durably as the call's result row
//! (status `done`, marked `"settled": "human"` and `"settlement": "ran" | "did_not_run" |
//! "failed"`), under the run's claim epoch, before the normal resume goes on. The effect rules
//! (`journal.rs`) then do the rest: a `ran` row is replayed, a `did_not_run` row is executed
//! (once, with the same idempotency key), a `failed` row becomes a failed call.

use serde_json::Value;

use super::journal::{self, SETTLED_ERROR, Settlement};
use super::persist::Checkpointer;
use super::state::RunState;
use super::tool::ToolContext;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::RunId;
use crate::keys;
use crate::schema::{EffectRow, EffectStatus};

/// Validate `settlement` for call `id` of the restored run's pending batch and write it.
///
/// Errors: `InvalidInput` if the run has no pending tool batch or `id` is not in it;
/// `Conflict` if the call has no lone intent row (no row, or a result that is not this very
/// settlement); `Corrupt` if the stored row is unreadable or its `input_hash` differs. Nothing
/// is written on any error; an identical settlement already stored writes nothing either.
pub(crate) async fn apply(
    ckpt: &mut Checkpointer,
    state: &RunState,
    id: &str,
    settlement: &Settlement,
) -> Result<()> {
    if let Some(row) = check(ckpt, state, id, settlement).await? {
        write(ckpt, state.snap.step, id, settlement, &row).await?;
    }
    Ok(())
}

/// The refusal of a settlement for a terminal run.
pub(crate) fn terminal_refusal(run: &RunId, id: &str) -> Error {
    Error::conflict(format!(
        "run {run} is terminal; tool call {id} is not pending and cannot be settled"
    ))
}

/// The refusal of a settlement for a run paused for approval.
pub(crate) fn paused_refusal(run: &RunId, id: &str) -> Error {
    Error::conflict(format!(
        "run {run} is paused for approval; decide with resume_with_decision, \
         tool call {id} cannot be settled"
    ))
}

/// The checks of [`apply`], without writing: `Some(row)` is the lone intent row to settle,
/// `None` means this very settlement is already stored.
pub(crate) async fn check(
    ckpt: &Checkpointer,
    state: &RunState,
    id: &str,
    settlement: &Settlement,
) -> Result<Option<EffectRow>> {
    let step = state.snap.step;
    let run = ckpt.run.clone();
    let Some(resp) = &state.snap.pending_llm_response else {
        return Err(Error::invalid_input(format!(
            "run {run} has no pending tool batch at step {step}; tool call {id} cannot be settled"
        )));
    };
    // `id` is the call's id in the effect journal: its own, or for a repeat of an id within
    // the batch the alias `effect_ids` gives it (what `EffectUncertain` names).
    let Some(call) = journal::effect_ids(&journal::call_ids(step, &resp.tool_calls))
        .iter()
        .position(|e| e == id)
        .and_then(|i| resp.tool_calls.get(i))
    else {
        return Err(Error::invalid_input(format!(
            "tool call {id} is not in the pending batch of run {run} at step {step}"
        )));
    };
    let key = keys::effect_key(&run, step, id)?;
    let Some(bytes) = ckpt.store().get(&ckpt.thread, &key).await? else {
        return Err(Error::conflict(format!(
            "tool call {id} ({}) has no intent row: it never started, nothing to settle",
            call.tool_name
        ))
        .with_key(key));
    };
    let hashes = ckpt.hashes();
    let hash = hashes.input_hash_of_args(&call.tool_name, &call.arguments);
    let other = || hashes.other_input_hash_of_args(&call.tool_name, &call.arguments);
    let Some(mut row) = journal::read_row(&bytes, &key, id, (&hash, other))? else {
        return Err(Error::corrupt_record(
            &key,
            "effect row is invalid: not a JSON object",
        ));
    };
    if row.status() == EffectStatus::Done {
        if settlement.matches(&row) {
            return Ok(None); // the same settlement again: nothing to write
        }
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "tool call {id} ({}) already has a result row that is not this settlement",
                call.tool_name
            ),
        )
        .with_key(key));
    }
    row.tool_name = Some(call.tool_name.clone());
    Ok(Some(row))
}

/// Write `settlement` over the lone intent `row` of call `id` (checked by [`check`]) and wait
/// until it is durable.
pub(crate) async fn write(
    ckpt: &mut Checkpointer,
    step: u64,
    id: &str,
    settlement: &Settlement,
    row: &EffectRow,
) -> Result<()> {
    let run = ckpt.run.clone();
    let mut extra = settlement.marks();
    let (success, output) = match settlement {
        Settlement::Ran { output } => (true, output.clone()),
        Settlement::DidNotRun => (false, Value::Null),
        Settlement::Failed { error } => {
            extra.insert(SETTLED_ERROR.to_owned(), Value::String(error.clone()));
            (false, Value::Null)
        }
    };
    let settled = EffectRow {
        input_hash: row.input_hash.clone(),
        output_hash: Some(ckpt.hashes().output_hash(&output)),
        output,
        success,
        status: Some(EffectStatus::Done),
        idempotency_key: row
            .idempotency_key
            .clone()
            .or_else(|| Some(ToolContext::idempotency_key_for(run.as_str(), step, id))),
        tool_name: row.tool_name.clone(),
        started_at_ms: row.started_at_ms,
        extra,
    };
    tracing::info!(run = %run, step, call = id, settlement = settlement.name(), "settling an uncertain effect");
    ckpt.effect(keys::effect_key(&run, step, id)?, settled.view())
        .await?;
    ckpt.barrier().await
}
