//! Stand-in for `crate::normalize::normalize_record` until the schema branch lands it:
//! the AFK v1 shape and pre-v1 aliases to the typed record, or `Corrupt`.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::ids::ThreadId;
use crate::schema::CheckpointRecord;

pub(crate) fn normalize_record(
    bytes: &[u8],
    thread: &ThreadId,
    key: &str,
) -> Result<CheckpointRecord> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt_record(key, format!("record is not JSON: {e}")))?;
    let Value::Object(mut m) = v else {
        return Err(Error::corrupt_record(key, "record is not a JSON object"));
    };
    if !m.contains_key("schema_version") {
        let v = m
            .get("schemaVersion")
            .filter(|v| v.is_string())
            .or_else(|| m.get("version").filter(|v| v.is_string()))
            .cloned()
            .unwrap_or(Value::String("v1".into()));
        m.insert("schema_version".into(), v);
    }
    for (canon, alias) in [("run_id", "runId"), ("thread_id", "threadId")] {
        if !m.contains_key(canon)
            && let Some(v) = m.get(alias).filter(|v| v.is_string()).cloned()
        {
            m.insert(canon.into(), v);
        }
    }
    if !m.contains_key("payload")
        && let Some(v) = m.get("data").filter(|v| v.is_object()).cloned()
    {
        m.insert("payload".into(), v);
    }
    match m.get("schema_version").and_then(Value::as_str) {
        Some("v1") | Some("v2") => {}
        _ => {
            return Err(Error::corrupt_record(
                key,
                "Checkpoint migration failed: Checkpoint schema version mismatch",
            ));
        }
    }
    if !m.contains_key("thread_id") {
        m.insert("thread_id".into(), Value::String(thread.to_string()));
    }
    for alias in ["schemaVersion", "version", "runId", "threadId", "data"] {
        m.remove(alias);
    }
    let Some(payload) = m.get("payload") else {
        return Err(Error::corrupt_record(key, "Checkpoint payload is invalid"));
    };
    if !payload.is_object() {
        return Err(Error::corrupt_record(key, "Checkpoint payload is invalid"));
    }
    if let Some(p) = payload.get("pending_llm_response")
        && !(p.is_null() || p.is_object())
    {
        return Err(Error::corrupt_record(
            key,
            "pending_llm_response checkpoint was invalid",
        ));
    }
    serde_json::from_value(Value::Object(m))
        .map_err(|e| Error::corrupt_record(key, format!("record is invalid: {e}")))
}
