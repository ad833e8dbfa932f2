//! Pure conversion of normalized v1 records to v2 (v2 keeps a run's history in the transcript
//! log, so a snapshot does not grow with the run).
//!
//! A v1 snapshot carries the whole transcript and every execution record (tool, subagent,
//! skill) inline. Its v2 form carries a [`TranscriptRef`] instead and the messages and records
//! move to the transcript log; for migrated history one entry holds all of them (entry 0, step =
//! the snapshot's step), and the snapshot's record lists are left empty. Every other v1 record only changes its
//! `schema_version` (its `thread_id` was already filled in by normalization). v2 records are
//! returned unchanged. Nothing here does I/O; the CLI's `migrate` writes the result.

use super::envelope::CheckpointRecord;
use super::payloads::PhasePayload;
use super::transcript::{StepRecords, TranscriptEntry, TranscriptRef};
use super::{SCHEMA_VERSION, SCHEMA_VERSION_V1};

/// The result of migrating one record.
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    /// The record in v2 form.
    pub record: CheckpointRecord,
    /// Transcript-log entries to write under `messages:<run>:<index>` (empty unless the record
    /// was a v1 snapshot with a non-empty inline transcript or records).
    pub transcript: Vec<TranscriptEntry>,
}

/// Convert a normalized record to v2. See the module docs.
pub fn v1_to_v2(mut record: CheckpointRecord) -> Migrated {
    if record.schema_version != SCHEMA_VERSION_V1 {
        return Migrated {
            record,
            transcript: Vec::new(),
        };
    }
    record.schema_version = SCHEMA_VERSION.to_owned();
    let mut transcript = Vec::new();
    if let PhasePayload::RuntimeState(snapshot) = &mut record.payload
        && snapshot.transcript.is_none()
    {
        let messages = snapshot.messages.take().unwrap_or_default();
        let records = StepRecords {
            tool_executions: std::mem::take(&mut snapshot.tool_executions),
            subagent_executions: std::mem::take(&mut snapshot.subagent_executions),
            skill_reads: std::mem::take(&mut snapshot.skill_reads),
            skill_command_executions: std::mem::take(&mut snapshot.skill_command_executions),
        };
        if !(messages.is_empty() && records.is_empty()) {
            transcript.push(TranscriptEntry::with_records(
                0,
                snapshot.step,
                messages,
                records,
                "",
            ));
        }
        snapshot.transcript = Some(TranscriptRef::of(&transcript));
    }
    Migrated { record, transcript }
}
