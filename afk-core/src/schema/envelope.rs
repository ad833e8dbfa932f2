//! The record envelope and the phase enum.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Extra;
use super::payloads::PhasePayload;
use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};

/// The boundary a checkpoint record was written at (AFK's 11 phase labels plus `paused`'s twin
/// `resumed`: 12 in all). Serialized in snake_case (`"runtime_state"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Start of `_execute` (fresh run and every resume); always step 0 in AFK.
    RunStarted,
    /// Top of a loop step.
    StepStarted,
    /// A full runtime snapshot ([`crate::schema::RuntimeSnapshot`]).
    RuntimeState,
    /// Before the model is called.
    PreLlm,
    /// After the model answered.
    PostLlm,
    /// Before a batch of tool calls runs.
    PreToolBatch,
    /// After a batch of tool calls finished.
    PostToolBatch,
    /// Before a batch of subagents runs.
    PreSubagentBatch,
    /// After a batch of subagents finished.
    PostSubagentBatch,
    /// The run waits for a human decision.
    Paused,
    /// A human decision arrived.
    Resumed,
    /// The run ended (completed, degraded, failed, cancelled, interrupted).
    RunTerminal,
}

impl Phase {
    /// All phases, in the order a step writes them (roughly).
    pub const ALL: [Phase; 12] = [
        Phase::RunStarted,
        Phase::StepStarted,
        Phase::RuntimeState,
        Phase::PreLlm,
        Phase::PostLlm,
        Phase::PreToolBatch,
        Phase::PostToolBatch,
        Phase::PreSubagentBatch,
        Phase::PostSubagentBatch,
        Phase::Paused,
        Phase::Resumed,
        Phase::RunTerminal,
    ];

    /// The snake_case label stored in records and keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::RunStarted => "run_started",
            Phase::StepStarted => "step_started",
            Phase::RuntimeState => "runtime_state",
            Phase::PreLlm => "pre_llm",
            Phase::PostLlm => "post_llm",
            Phase::PreToolBatch => "pre_tool_batch",
            Phase::PostToolBatch => "post_tool_batch",
            Phase::PreSubagentBatch => "pre_subagent_batch",
            Phase::PostSubagentBatch => "post_subagent_batch",
            Phase::Paused => "paused",
            Phase::Resumed => "resumed",
            Phase::RunTerminal => "run_terminal",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = Error;
    /// Parse a snake_case label; `InvalidInput` naming the accepted labels otherwise.
    fn from_str(s: &str) -> Result<Self> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
                Error::invalid_input(format!(
                    "unknown phase {s:?}; expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// One checkpoint record in the current (v2) shape.
///
/// Serializes to `{schema_version, run_id, thread_id, step, phase, timestamp_ms, payload, ...extra}`.
/// `Deserialize` accepts exactly that shape (strict v2: `thread_id` required, payload typed by
/// `phase`); stored bytes of any supported version are read with
/// [`crate::normalize::normalize_record`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRecord {
    /// `"v2"` for records this crate writes; a normalized v1 record keeps `"v1"` until migrated
    /// ([`crate::schema::migrate`]).
    pub schema_version: String,
    /// The run the record belongs to.
    pub run_id: RunId,
    /// The thread (namespace) the record lives in; taken from the namespace for AFK v1 records.
    pub thread_id: ThreadId,
    /// Loop step (`run_started` uses 0).
    pub step: u64,
    /// The boundary the record was written at; always equals `payload.phase()`.
    pub phase: Phase,
    /// Wall-clock milliseconds when the record was built.
    pub timestamp_ms: u64,
    /// The phase-specific payload.
    pub payload: PhasePayload,
    /// Unknown top-level fields, kept as read.
    pub extra: Extra,
}

#[derive(Serialize)]
struct RecordOut<'a, P> {
    schema_version: &'a str,
    run_id: &'a RunId,
    thread_id: &'a ThreadId,
    step: u64,
    phase: Phase,
    timestamp_ms: u64,
    payload: &'a P,
    #[serde(flatten)]
    extra: &'a Extra,
}

/// The bytes of a v2 record with no unknown fields, the payload borrowed (the runner's write
/// path: the same bytes as building the [`CheckpointRecord`] and calling
/// [`CheckpointRecord::to_bytes`], without copying the payload into it). `payload` must
/// serialize as `phase`'s payload type does. `capacity`: the bytes to reserve up front (the
/// size of the last such record, so the buffer is not grown step by step).
pub(crate) fn encode_record<P: Serialize>(
    run_id: &RunId,
    thread_id: &ThreadId,
    step: u64,
    phase: Phase,
    timestamp_ms: u64,
    payload: &P,
    capacity: usize,
) -> Result<Vec<u8>> {
    let out = RecordOut {
        schema_version: super::SCHEMA_VERSION,
        run_id,
        thread_id,
        step,
        phase,
        timestamp_ms,
        payload,
        extra: &Extra::new(),
    };
    let mut bytes = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut bytes, &out)
        .map_err(|e| Error::unexpected("cannot serialize checkpoint record").with_source(e))?;
    Ok(bytes)
}

impl Serialize for CheckpointRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        RecordOut {
            schema_version: &self.schema_version,
            run_id: &self.run_id,
            thread_id: &self.thread_id,
            step: self.step,
            phase: self.phase,
            timestamp_ms: self.timestamp_ms,
            payload: &self.payload,
            extra: &self.extra,
        }
        .serialize(s)
    }
}

#[derive(Deserialize)]
struct RecordIn {
    schema_version: String,
    run_id: RunId,
    thread_id: ThreadId,
    step: u64,
    phase: Phase,
    timestamp_ms: u64,
    payload: Value,
    #[serde(flatten)]
    extra: Extra,
}

impl<'de> Deserialize<'de> for CheckpointRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = RecordIn::deserialize(d)?;
        let payload = PhasePayload::from_value(raw.phase, raw.payload)
            .map_err(|(path, e)| serde::de::Error::custom(format!("payload.{path}: {e}")))?;
        Ok(CheckpointRecord {
            schema_version: raw.schema_version,
            run_id: raw.run_id,
            thread_id: raw.thread_id,
            step: raw.step,
            phase: raw.phase,
            timestamp_ms: raw.timestamp_ms,
            payload,
            extra: raw.extra,
        })
    }
}

impl CheckpointRecord {
    /// Serialize to JSON bytes (the form stores keep). Fails with `Unexpected` only if a
    /// serializer error occurs, which our types do not produce (string keys only).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self)
            .map_err(|e| Error::unexpected("cannot serialize checkpoint record").with_source(e))
    }

    /// The runtime snapshot, if this is a `runtime_state` record.
    pub fn snapshot(&self) -> Option<&super::RuntimeSnapshot> {
        match &self.payload {
            PhasePayload::RuntimeState(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::RuntimeSnapshot;

    /// The runner's borrowed encoding writes what building the record and calling `to_bytes`
    /// writes.
    #[test]
    fn encode_record_gives_the_built_record() {
        let snap: RuntimeSnapshot = serde_json::from_value(serde_json::json!({
            "thread_id": "t", "step": 3, "state": "running", "context": {"k": [1, "é"]},
            "llm_calls": 2, "usage": {"input_tokens": 1}, "total_cost_usd": 0.25,
            "pending_llm_response": {"text": "x", "tool_calls": []}, "unknown": {"kept": true}
        }))
        .unwrap();
        let (run, thread) = (RunId::new("r1").unwrap(), ThreadId::new("t").unwrap());
        let built = CheckpointRecord {
            schema_version: super::super::SCHEMA_VERSION.to_owned(),
            run_id: run.clone(),
            thread_id: thread.clone(),
            step: 3,
            phase: Phase::RuntimeState,
            timestamp_ms: 17,
            payload: PhasePayload::RuntimeState(Box::new(snap.clone())),
            extra: Extra::new(),
        };
        let encoded = encode_record(&run, &thread, 3, Phase::RuntimeState, 17, &snap, 0).unwrap();
        assert_eq!(
            String::from_utf8(encoded).unwrap(),
            String::from_utf8(built.to_bytes().unwrap()).unwrap()
        );
    }
}
