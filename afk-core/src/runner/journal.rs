//! The effect journal's vocabulary and rules, with no I/O: the ids a batch's calls go by, the
//! fields a row carries, how a human's [`Settlement`] is marked, and what a stored row says to
//! do with its call.
//!
//! The effect rules, evaluated for every call before anything of its batch runs:
//! * result row (`status` done, or an AFK v1 row without status) whose `input_hash` matches:
//!   successful -> replay its output; failed -> execute again, except a row a human settled as
//!   failed (`"settlement": "failed"`) -> a failed call with its error; a re-execution after a
//!   `did_not_run` settlement keeps that marker on its rows; a row whose output was too large
//!   for the store ([`OUTPUT_DROPPED`]) -> the same failed call, not executed;
//! * `input_hash` differs -> `Corrupt` ("Effect journal integrity conflict");
//! * intent row without result -> [`EffectPolicy::Idempotent`] tools execute again with the
//!   same idempotency key, [`EffectPolicy::AtMostOnce`] tools stop the run with
//!   `EffectUncertain` (message naming the call id and tool, key the effect row) until a human
//!   settles the call with `Runner::resume_settling`;
//! * no row -> execute.

use std::collections::HashMap;

use serde_json::Value;

use super::tool::EffectPolicy;
use crate::error::{Error, ErrorKind, Result};
use crate::hash::EffectHashes;
use crate::ids::ThreadId;
use crate::keys::{ParsedKey, parse_key};
use crate::normalize::normalize_record;
use crate::schema::{EffectRow, EffectStatus, Extra, Phase, ToolCall};

/// Effect-row field naming who settled the call (`"human"`).
pub(crate) const SETTLED: &str = "settled";
/// Effect-row field naming the settlement (`ran`, `did_not_run`, `failed`).
pub(crate) const SETTLEMENT: &str = "settlement";
/// Effect-row field holding a recorded failure's error (a `failed` settlement's, or a dropped
/// output's).
pub(crate) const SETTLED_ERROR: &str = "error";
/// Effect-row field of a call whose output was too large to keep: the output's size in bytes
/// (the error is in [`SETTLED_ERROR`], as for a settled failure).
pub(crate) const OUTPUT_DROPPED: &str = "output_dropped";

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
    /// The settlement's name in a row's [`SETTLEMENT`] field.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Settlement::Ran { .. } => "ran",
            Settlement::DidNotRun => "did_not_run",
            Settlement::Failed { .. } => "failed",
        }
    }

    /// Whether the stored, settled row `row` records exactly this settlement.
    pub(crate) fn matches(&self, row: &EffectRow) -> bool {
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

    /// The markers a row settled this way carries (a `failed` one's error aside).
    pub(crate) fn marks(&self) -> Extra {
        let mut m = Extra::new();
        m.insert(SETTLED.to_owned(), Value::String("human".to_owned()));
        m.insert(SETTLEMENT.to_owned(), Value::String(self.name().to_owned()));
        m
    }
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

/// Read the stored effect row at `key` of call `id`, whose arguments hash to `hash` (the
/// form the thread writes) or to what `other` gives (the form it may also hold:
/// [`EffectHashes`](crate::hash::EffectHashes)), asked only when `hash` does not match.
/// `Ok(None)`: the value is not a JSON object (AFK takes such a row for no row). An AFK v1
/// row (a result, never an intent) carries no `input_hash`: it is taken as matching.
///
/// Errors: `Corrupt` naming `key` when the value is not JSON, is not a valid row, or its
/// `input_hash` is neither ("Effect journal integrity conflict").
pub(crate) fn read_row(
    bytes: &[u8],
    key: &str,
    id: &str,
    (hash, other): (&str, impl FnOnce() -> Option<String>),
) -> Result<Option<EffectRow>> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt_record(key, format!("effect row is not JSON: {e}")))?;
    if let Some(stored) = value.get("input_hash").and_then(Value::as_str)
        && stored != hash
        && other().is_none_or(|o| stored != o)
    {
        return Err(Error::corrupt_record(
            key,
            format!("Effect journal integrity conflict for tool_call_id={id}"),
        ));
    }
    let Value::Object(mut map) = value else {
        return Ok(None);
    };
    if !map.contains_key("input_hash") {
        map.insert("input_hash".to_owned(), Value::String(hash.to_owned()));
    }
    serde_json::from_value(Value::Object(map))
        .map(Some)
        .map_err(|e| Error::corrupt_record(key, format!("effect row is invalid: {e}")))
}

/// What [`rehash_effect_rows`] did to the effect rows of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rehashed {
    /// Rows whose hashes were the source's form and are now the target's.
    pub rehashed: u64,
    /// Rows left as they are: their call is in no stored snapshot's pending batch (a finished
    /// step, whose rows no resume or settlement reads again), their `input_hash` is not the
    /// call's in the source's form (an integrity conflict stays one), or they already hold
    /// the target's form.
    pub kept: u64,
}

/// Re-hash the effect rows among `values` (the keys and opened values of runs of `thread`,
/// as an export holds them) from the hashes `from` computes to those `to` computes: a row
/// whose `input_hash` is its call's under `from` gets the call's `input_hash` under `to`,
/// and its `output_hash` likewise when it is its output's under `from`. A row's call is found
/// in the pending batch of the stored snapshots of its step (the runtime-state records and
/// the latest pointer): those are the rows a resume or a settlement checks. Anything
/// unreadable is left as it is.
///
/// Moving a run between threads or stores whose effect hashes differ (keyed by another
/// thread's hash key, keyed against plain) without it leaves rows that match no call there:
/// resuming or settling the run then fails with `Corrupt` ("Effect journal integrity
/// conflict").
pub fn rehash_effect_rows(
    thread: &ThreadId,
    values: &mut [(String, Vec<u8>)],
    from: &EffectHashes,
    to: &EffectHashes,
) -> Rehashed {
    let calls = pending_calls(thread, values);
    let mut out = Rehashed::default();
    for (key, bytes) in values.iter_mut() {
        if !matches!(parse_key(key), Ok(ParsedKey::Effect { .. })) {
            continue;
        }
        match calls
            .get(key.as_str())
            .and_then(|c| rehash_row(bytes, c, from, to))
        {
            Some(row) => {
                *bytes = row;
                out.rehashed += 1;
            }
            None => out.kept += 1,
        }
    }
    out
}

/// Effect key → the call of a stored snapshot's pending batch it is the row of.
fn pending_calls(thread: &ThreadId, values: &[(String, Vec<u8>)]) -> HashMap<String, ToolCall> {
    let mut calls = HashMap::new();
    for (key, bytes) in values {
        let run = match parse_key(key) {
            Ok(p @ ParsedKey::Latest { .. }) => p.run().clone(),
            Ok(ParsedKey::Checkpoint {
                run,
                phase: Phase::RuntimeState,
                ..
            }) => run,
            _ => continue,
        };
        let Ok(record) = normalize_record(bytes, thread, key) else {
            continue;
        };
        let Some(snap) = record.snapshot() else {
            continue;
        };
        let Some(resp) = &snap.pending_llm_response else {
            continue;
        };
        let ids = effect_ids(&call_ids(snap.step, &resp.tool_calls));
        for (id, call) in ids.iter().zip(&resp.tool_calls) {
            if let Ok(k) = crate::keys::effect_key(&run, snap.step, id) {
                calls.insert(k, call.clone());
            }
        }
    }
    calls
}

/// The row `bytes` of `call` with its hashes in `to`'s form, if they are in `from`'s (and not
/// already `to`'s).
fn rehash_row(
    bytes: &[u8],
    call: &ToolCall,
    from: &EffectHashes,
    to: &EffectHashes,
) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut row)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    let (name, args) = (&call.tool_name, &call.arguments);
    let stored = row.get("input_hash")?.as_str()?;
    let target = to.input_hash_of_args(name, args);
    let source_form = stored == from.input_hash_of_args(name, args)
        || from.other_input_hash_of_args(name, args).as_deref() == Some(stored);
    if stored == target || !source_form {
        return None;
    }
    row.insert("input_hash".to_owned(), Value::String(target));
    let output = row.get("output").cloned().unwrap_or(Value::Null);
    let output_from = matches!(row.get("output_hash"),
        Some(Value::String(h)) if from.output_matches(h, &output));
    if output_from {
        row.insert(
            "output_hash".to_owned(),
            Value::String(to.output_hash(&output)),
        );
    }
    serde_json::to_vec(&row).ok()
}

/// What to do with one call of a batch.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// Its result row holds this output: replay it.
    Replay(Value),
    /// Run it (again).
    Execute,
    /// A failure recorded for good (a human settled it as failed, or its output was too
    /// large to keep): a failed call with this error, not executed.
    SettledFailed(String),
    /// The gate or a human denied it, for this reason.
    Denied(String),
    /// The agent has no such tool (and nothing stored says what became of the call).
    Unknown,
}

/// What the tool behind a call is, as far as the effect rules care.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Its declared effect policy (at-most-once for a tool the agent does not have).
    pub(crate) effect: EffectPolicy,
    /// Whether the agent has the tool (or subagent).
    pub(crate) known: bool,
}

/// Apply the effect rules to the stored row of call `id` (at `key`): the plan, and the
/// settlement markers to keep on the rows of a `did_not_run` re-execution.
///
/// Errors: `EffectUncertain` (keyed by the row) for an intent without result of a call that
/// may not run twice.
pub(crate) fn plan_from_row(
    row: EffectRow,
    key: &str,
    (id, tool_name): (&str, &str),
    policy: Policy,
) -> Result<(Plan, Extra)> {
    let settlement = row.extra.get(SETTLEMENT).and_then(Value::as_str);
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
                .get(SETTLED_ERROR)
                .and_then(Value::as_str)
                .or(recorded_failure)
                .unwrap_or_default()
                .to_owned();
            (Plan::SettledFailed(error), Extra::new())
        }
        EffectStatus::Done if settlement == Some("did_not_run") => {
            (Plan::Execute, Settlement::DidNotRun.marks())
        }
        EffectStatus::Done => (Plan::Execute, Extra::new()),
        EffectStatus::Intent => match policy.effect {
            EffectPolicy::Idempotent => (Plan::Execute, Extra::new()),
            EffectPolicy::AtMostOnce => return Err(uncertain(key, id, tool_name, policy.known)),
        },
    })
}

/// `EffectUncertain` for call `id` whose intent row at `key` has no result.
fn uncertain(key: &str, id: &str, tool_name: &str, known: bool) -> Error {
    let why = if known {
        "its tool is at-most-once"
    } else {
        "this agent has no such tool, so nothing says it may run again"
    };
    Error::new(
        ErrorKind::EffectUncertain,
        format!(
            "tool call {id} (tool '{tool_name}') may or may not have run (intent recorded, no \
             result) and {why}; settle it with Runner::resume_settling(.., \"{id}\", \
             Settlement::..)"
        ),
    )
    .with_key(key)
}
