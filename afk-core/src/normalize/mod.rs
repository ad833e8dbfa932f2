//! Legacy normalization: the one way stored bytes become typed records.
//!
//! [`normalize_record`] accepts AFK Python `"v1"` records exactly as AFK writes them (no
//! top-level `thread_id`: the namespace the record was read from supplies it), pre-v1 aliases
//! (`schemaVersion` / `version` → `schema_version`, `runId`, `threadId`, `data` → `payload`;
//! each applied only when the canonical key is absent; no version at all means `"v1"`), and our
//! own `"v2"`. Anything else is `Corrupt` ([`Error::corrupt_record`]) with the key and a reason
//! that names the field: an unknown version, a wrong-typed or missing envelope field, a payload
//! that is not an object, a payload field of the wrong type (by path, e.g.
//! `payload.usage.input_tokens`), or a `pending_llm_response` that is present but not a
//! decodable LLM response (only `null` or absent means "none").
//!
//! A normalized v1 record keeps `schema_version: "v1"` (its snapshot still carries the
//! transcript inline); [`crate::schema::migrate`] converts it to v2.
//!
//! No function here panics, whatever the input (see the property tests).

mod envelope;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::ids::ThreadId;
use crate::schema::{CheckpointRecord, EffectRow, TranscriptEntry};

pub use envelope::SUPPORTED_VERSIONS;

/// Normalize the stored bytes of a checkpoint record read from `key` in `thread`.
///
/// Errors: `Corrupt` with `key` for invalid JSON or any reason listed in the module docs.
pub fn normalize_record(bytes: &[u8], thread: &ThreadId, key: &str) -> Result<CheckpointRecord> {
    let value = parse_json(bytes, key)?;
    normalize_record_value(value, thread, key)
}

/// [`normalize_record`] for an already parsed JSON value.
pub fn normalize_record_value(
    value: Value,
    thread: &ThreadId,
    key: &str,
) -> Result<CheckpointRecord> {
    envelope::normalize(value, thread).map_err(|reason| Error::corrupt_record(key, reason))
}

/// Normalize the stored bytes of an effect row (`effect:<run>:<step>:<call>`).
///
/// Errors: `Corrupt` with `key` when the bytes are not a JSON object with a string
/// `input_hash` and well-typed fields (the reason names the field).
pub fn normalize_effect_row(bytes: &[u8], key: &str) -> Result<EffectRow> {
    let value = parse_json(bytes, key)?;
    normalize_effect_row_value(value, key)
}

/// [`normalize_effect_row`] for an already parsed JSON value.
pub fn normalize_effect_row_value(value: Value, key: &str) -> Result<EffectRow> {
    decode_object(value, "effect row").map_err(|reason| Error::corrupt_record(key, reason))
}

/// Normalize the stored bytes of a transcript-log entry (`messages:<run>:<index>`). The digest
/// is not verified here (that needs the chain: [`crate::schema::reassemble`]).
pub fn normalize_transcript_entry(bytes: &[u8], key: &str) -> Result<TranscriptEntry> {
    let value = parse_json(bytes, key)?;
    decode_object(value, "transcript entry").map_err(|reason| Error::corrupt_record(key, reason))
}

fn parse_json(bytes: &[u8], key: &str) -> Result<Value> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt_record(key, format!("not valid JSON: {e}")))
}

fn decode_object<T: serde::de::DeserializeOwned>(value: Value, what: &str) -> Result<T, String> {
    if !value.is_object() {
        return Err(format!(
            "{what} is not a JSON object (found {})",
            envelope::type_name(&value)
        ));
    }
    serde_path_to_error::deserialize(value)
        .map_err(|e| format!("{what} field {}: {}", e.path(), e.inner()))
}

#[cfg(test)]
mod tests;
