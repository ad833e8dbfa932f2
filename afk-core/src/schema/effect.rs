//! Effect-journal rows, `effect:<run>:<step>:<tool_call_id>`: AFK Python's row, written as an
//! intent before the tool runs and as a result after it.

use serde::{Deserialize, Serialize, Serializer};
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EffectRow {
    /// SHA-256 of the canonical `{"tool_name", "args"}` (`crate::hash`, byte-identical to AFK
    /// Python's).
    pub input_hash: String,
    /// SHA-256 of the canonical `{"output"}`; `None` for intent rows.
    pub output_hash: Option<String>,
    /// The tool output (null for intent rows).
    pub output: Value,
    /// Whether the call succeeded (false for intent rows).
    pub success: bool,
    /// v2: intent or done; absent means done.
    pub status: Option<EffectStatus>,
    /// v2: the idempotency key handed to the tool.
    pub idempotency_key: Option<String>,
    /// v2: the tool's name.
    pub tool_name: Option<String>,
    /// v2: when the call started, epoch ms.
    pub started_at_ms: Option<u64>,
    /// Unknown fields, kept as read.
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

    /// The row as its borrowed view, which is what is written.
    pub(crate) fn view(&self) -> EffectRowRef<'_> {
        EffectRowRef {
            input_hash: &self.input_hash,
            output_hash: self.output_hash.as_deref(),
            output: &self.output,
            success: self.success,
            status: self.status,
            idempotency_key: self.idempotency_key.as_deref(),
            tool_name: self.tool_name.as_deref(),
            started_at_ms: self.started_at_ms,
            extra: &self.extra,
        }
    }
}

/// An effect row is written through its view: one definition of the row's encoding, for the
/// rows the runner writes from borrowed parts (without copying a tool's output) and for
/// owned ones.
impl Serialize for EffectRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(serializer)
    }
}

/// An [`EffectRow`] made of borrowed parts, encoded exactly as the row it views.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct EffectRowRef<'a> {
    pub(crate) input_hash: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_hash: Option<&'a str>,
    pub(crate) output: &'a Value,
    pub(crate) success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<EffectStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idempotency_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) started_at_ms: Option<u64>,
    #[serde(flatten)]
    pub(crate) extra: &'a Extra,
}
