//! Settling an uncertain effect: the way out of [`ErrorKind::EffectUncertain`].
//!
//! An [`EffectPolicy::AtMostOnce`](super::EffectPolicy::AtMostOnce) call whose intent row is
//! durable but whose result row is not may or may not have performed its side effect, so the
//! runner refuses to guess. A human (or an operator tool) who found out what happened calls
//! [`Runner::resume_settling`](super::Runner::resume_settling) with a [`Settlement`]; this
//! module validates it against the stored run and writes it durably as the call's result row
//! (status `done`, marked `"settled": "human"` and `"settlement": "ran" | "did_not_run" |
//! "failed"`), under the run's claim epoch, before the normal resume goes on. The effect rules
//! in `tools.rs` then do the rest: a `ran` row is replayed, a `did_not_run` row is executed
//! (once, with the same idempotency key), a `failed` row becomes a failed call.

use serde_json::Value;

use super::persist::Checkpointer;
use super::state::RunState;
use super::tool::ToolContext;
use super::tools::{call_ids, effect_ids};
use crate::error::{Error, ErrorKind, Result};
use crate::hash::{input_hash_of_args, output_hash};
use crate::ids::RunId;
use crate::keys;
use crate::schema::{EffectRow, EffectStatus, Extra};

/// Effect-row field naming who settled the call (`"human"`).
pub(crate) const SETTLED: &str = "settled";
/// Effect-row field naming the settlement (`ran`, `did_not_run`, `failed`).
pub(crate) const SETTLEMENT: &str = "settlement";
/// Effect-row field holding a `failed` settlement's error.
pub(crate) const SETTLED_ERROR: &str = "error";

/// What a human found out about a tool call that stopped its run with
/// [`ErrorKind::EffectUncertain`].
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The side effect happened. `output` is recorded as the call's successful result and
    /// replayed as if the tool had returned it; the tool is not executed.
    Ran {
        /// The output to record (what the tool returned or would have returned).
        output: Value,
    },
    /// The side effect did not happen. The call is executed now, once, with the same
    /// idempotency key (`ToolContext::idempotency_key`) as the uncertain attempt.
    DidNotRun,
    /// The call failed (for example the payment provider declined it). It is recorded as a
    /// failed call with `error` and not executed; the agent's tool-failure policy applies.
    Failed {
        /// The failed call's error message.
        error: String,
    },
}

impl Settlement {
    fn name(&self) -> &'static str {
        match self {
            Settlement::Ran { .. } => "ran",
            Settlement::DidNotRun => "did_not_run",
            Settlement::Failed { .. } => "failed",
        }
    }

    /// Whether the stored, settled row `row` records exactly this settlement.
    fn matches(&self, row: &EffectRow) -> bool {
        let stored = row.extra.get(SETTLEMENT).and_then(Value::as_str);
        if row.extra.get(SETTLED).is_none() || stored != Some(self.name()) {
            return false;
        }
        match self {
            Settlement::Ran { output } => row.success && row.output == *output,
            // After the re-execution the row holds the real result, still marked.
            Settlement::DidNotRun => true,
            Settlement::Failed { error } => {
                !row.success
                    && row.extra.get(SETTLED_ERROR).and_then(Value::as_str) == Some(error.as_str())
            }
        }
    }
}

/// The markers a settled row carries, to be kept on the rows of a `did_not_run` re-execution.
pub(crate) fn did_not_run_marks() -> Extra {
    let mut m = Extra::new();
    m.insert(SETTLED.to_owned(), Value::String("human".to_owned()));
    m.insert(
        SETTLEMENT.to_owned(),
        Value::String(Settlement::DidNotRun.name().to_owned()),
    );
    m
}

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
    let Some(call) = effect_ids(&call_ids(step, &resp.tool_calls))
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
    let hash = input_hash_of_args(&call.tool_name, &call.arguments);
    let mut value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupt_record(&key, format!("effect row is not JSON: {e}")))?;
    if let Value::Object(map) = &mut value
        && !map.contains_key("input_hash")
    {
        // An AFK v1 row (a result, never an intent) carries no hash.
        map.insert("input_hash".to_owned(), Value::String(hash.clone()));
    }
    let mut row: EffectRow = serde_json::from_value(value)
        .map_err(|e| Error::corrupt_record(&key, format!("effect row is invalid: {e}")))?;
    if row.input_hash != hash {
        return Err(Error::corrupt_record(
            &key,
            format!("Effect journal integrity conflict for tool_call_id={id}"),
        ));
    }
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
    let mut extra = Extra::new();
    extra.insert(SETTLED.to_owned(), Value::String("human".to_owned()));
    extra.insert(
        SETTLEMENT.to_owned(),
        Value::String(settlement.name().to_owned()),
    );
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
        output_hash: Some(output_hash(&output)),
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
    ckpt.effect(step, id, &settled).await?;
    ckpt.barrier().await
}
