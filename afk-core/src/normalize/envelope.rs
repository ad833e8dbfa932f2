//! Envelope checks and alias rules; payload decoding is delegated to the schema types.

use serde_json::{Map, Value};

use crate::ids::{RunId, ThreadId};
use crate::schema::{CheckpointRecord, Phase, PhasePayload, SCHEMA_VERSION, SCHEMA_VERSION_V1};

/// The schema versions [`super::normalize_record`] accepts.
pub const SUPPORTED_VERSIONS: [&str; 2] = [SCHEMA_VERSION_V1, SCHEMA_VERSION];

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Apply the pre-v1 alias rules (AFK Python's `migrate_checkpoint_record`: `schemaVersion` or
/// `version` for a missing `schema_version`), stricter than AFK in one way: an alias that is
/// present with the wrong type is an error, not silently skipped.
fn apply_aliases(map: &mut Map<String, Value>) -> Result<(), String> {
    if !map.contains_key("schema_version") {
        let version = if let Some(v) = map.remove("schemaVersion") {
            Some(("schemaVersion", v))
        } else {
            map.remove("version").map(|v| ("version", v))
        };
        let version = match version {
            Some((_, Value::String(s))) => s,
            Some((name, other)) => {
                return Err(format!(
                    "{name} (alias of schema_version) must be a string, found {}",
                    type_name(&other)
                ));
            }
            None => SCHEMA_VERSION_V1.to_owned(),
        };
        map.insert("schema_version".to_owned(), Value::String(version));
    }
    for (alias, canonical) in [("runId", "run_id"), ("threadId", "thread_id")] {
        if !map.contains_key(canonical)
            && let Some(v) = map.remove(alias)
        {
            if !v.is_string() {
                return Err(format!(
                    "{alias} (alias of {canonical}) must be a string, found {}",
                    type_name(&v)
                ));
            }
            map.insert(canonical.to_owned(), v);
        }
    }
    if !map.contains_key("payload")
        && let Some(v) = map.remove("data")
    {
        if !v.is_object() {
            return Err(format!(
                "data (alias of payload) must be an object, found {}",
                type_name(&v)
            ));
        }
        map.insert("payload".to_owned(), v);
    }
    Ok(())
}

fn take_string(map: &mut Map<String, Value>, field: &str) -> Result<String, String> {
    match map.remove(field) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "{field} must be a string, found {}",
            type_name(&other)
        )),
        None => Err(format!("{field} is missing")),
    }
}

fn take_u64(map: &mut Map<String, Value>, field: &str) -> Result<u64, String> {
    match map.remove(field) {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("{field} must be a non-negative integer, found {n}")),
        Some(other) => Err(format!(
            "{field} must be a non-negative integer, found {}",
            type_name(&other)
        )),
        None => Err(format!("{field} is missing")),
    }
}

pub(super) fn normalize(value: Value, thread: &ThreadId) -> Result<CheckpointRecord, String> {
    let Value::Object(mut map) = value else {
        return Err(format!(
            "record is not a JSON object (found {})",
            type_name(&value)
        ));
    };
    apply_aliases(&mut map)?;

    let schema_version = take_string(&mut map, "schema_version")?;
    if !SUPPORTED_VERSIONS.contains(&schema_version.as_str()) {
        return Err(format!(
            "schema_version {schema_version:?} is not supported (supported: {})",
            SUPPORTED_VERSIONS.join(", ")
        ));
    }
    let run_id = take_string(&mut map, "run_id")?;
    let run_id = RunId::new(run_id).map_err(|e| format!("run_id: {}", e.message()))?;

    let thread_id = match map.remove("thread_id") {
        None if schema_version == SCHEMA_VERSION_V1 => thread.clone(),
        None => return Err("thread_id is missing (required in v2 records)".to_owned()),
        Some(Value::String(s)) => {
            let t = ThreadId::new(s).map_err(|e| format!("thread_id: {}", e.message()))?;
            if &t != thread {
                return Err(format!(
                    "thread_id {:?} differs from the namespace {:?} it was read from",
                    t.as_str(),
                    thread.as_str()
                ));
            }
            t
        }
        Some(other) => {
            return Err(format!(
                "thread_id must be a string, found {}",
                type_name(&other)
            ));
        }
    };

    let step = take_u64(&mut map, "step")?;
    let phase_label = take_string(&mut map, "phase")?;
    let phase: Phase = phase_label
        .parse()
        .map_err(|e: crate::Error| format!("phase: {}", e.message()))?;
    let timestamp_ms = take_u64(&mut map, "timestamp_ms")?;

    let payload = match map.remove("payload") {
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            return Err(format!(
                "payload is not an object (found {})",
                type_name(&other)
            ));
        }
        None => return Err("payload is missing".to_owned()),
    };
    let payload = PhasePayload::from_value(phase, payload).map_err(|(path, e)| {
        if path == "pending_llm_response" || path.starts_with("pending_llm_response.") {
            format!("payload.{path}: present but not a decodable LLM response ({e}); only null means none")
        } else {
            format!("payload.{path}: {e}")
        }
    })?;

    Ok(CheckpointRecord {
        schema_version,
        run_id,
        thread_id,
        step,
        phase,
        timestamp_ms,
        payload,
        extra: map,
    })
}
