//! Effect-journal rows, `effect:<run>:<step>:<tool_call_id>`: AFK Python's row, written as an
//! intent before the tool runs and as a result after it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Extra;
use super::de::record_de;

/// Whether an effect row records an intent (the call may be running) or a finished call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    /// Written before the side effect runs; no output yet.
    Intent,
    /// The call finished; `output`, `output_hash` and `success` are set. AFK rows (no
    /// `status`) are `Done`.
    #[default]
    Done,
}

/// One effect-journal row. AFK's rows are `{input_hash, output_hash, output, success}`; v2 adds
/// `status`, `idempotency_key`, `tool_name` and `started_at_ms`, left out when unset.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EffectRow {
    /// SHA-256 of the canonical `{"tool_name", "args"}` (`crate::hash`, byte-identical to AFK
    /// Python's).
    pub input_hash: String,
    /// SHA-256 of the canonical `{"output"}`; `None` for intent rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    /// The tool output (null for intent rows).
    pub output: Value,
    /// Whether the call succeeded (false for intent rows).
    pub success: bool,
    /// v2: intent or done; absent means done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<EffectStatus>,
    /// v2: the idempotency key handed to the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// v2: the tool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// v2: when the call started, epoch ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(EffectRow {
    input_hash: req,
    output_hash: def,
    output: def,
    success: def,
    status: def,
    idempotency_key: def,
    tool_name: def,
    started_at_ms: def,
});

impl EffectRow {
    /// The row's status, `Done` when absent (AFK rows).
    pub fn status(&self) -> EffectStatus {
        self.status.unwrap_or_default()
    }
}
