//! LLM responses, tool calls and token usage, with AFK Python's keys and lenient defaults.

use serde::Serialize;
use serde_json::{Map, Value};

use super::Extra;
use super::de::record_de;

/// Token counts of one response or of a whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Total as reported by the provider (not recomputed).
    pub total_tokens: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(Usage {
    input_tokens: def,
    output_tokens: def,
    total_tokens: def
});

impl Usage {
    /// Add another usage to this one (saturating), keeping this one's extra fields.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// One tool call requested by the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolCall {
    /// Provider-assigned call id (AFK: null when the provider gave none).
    pub id: Option<String>,
    /// Name of the tool to run.
    pub tool_name: String,
    /// Arguments, a JSON object.
    pub arguments: Map<String, Value>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(ToolCall {
    id: def,
    tool_name: def,
    arguments: def
});

/// A model response, as stored in `pending_llm_response`, `final_response` and
/// `terminal_result.llm_response`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LlmResponse {
    /// Text of the answer (`""` when none).
    pub text: String,
    /// AFK's request id (`<run_id>:step:<n>`).
    pub request_id: Option<String>,
    /// The provider's own request id.
    pub provider_request_id: Option<String>,
    /// Provider session continuity token.
    pub session_token: Option<String>,
    /// Provider checkpoint continuity token.
    pub checkpoint_token: Option<String>,
    /// Structured output, when the provider returned one.
    pub structured_response: Option<Map<String, Value>>,
    /// Tool calls, in the order the model gave them.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`"stop"`, `"tool_calls"`, …).
    pub finish_reason: Option<String>,
    /// Tokens used by this response.
    pub usage: Usage,
    /// Provider raw payload (JSON-converted).
    pub raw: Map<String, Value>,
    /// Model that answered.
    pub model: Option<String>,
    /// What this answer cost in USD, as the model client computed it (the provider clients
    /// of `afk-providers` price the usage with the application's `PriceTable`). The run's
    /// `total_cost_usd` and the cost budget ([`Limits::max_cost_usd`]) add it up; `None`, a
    /// negative or a non-finite value adds nothing. A v2 field: AFK Python does not write it
    /// (its cost only appears in `total_cost_usd`); left out of the record when unset, read
    /// leniently (a value that is not a number reads as `None`).
    ///
    /// [`Limits::max_cost_usd`]: crate::runner::Limits::max_cost_usd
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(LlmResponse {
    text: def,
    request_id: def,
    provider_request_id: def,
    session_token: def,
    checkpoint_token: def,
    structured_response: def,
    tool_calls: def,
    finish_reason: def,
    usage: def,
    raw: def,
    model: def,
    cost_usd: lenient(lenient_cost),
});

/// `cost_usd` as read: a number, or `None` for anything else.
fn lenient_cost(v: Value) -> Result<Option<f64>, std::convert::Infallible> {
    Ok(v.as_f64())
}

impl LlmResponse {
    /// The cost this answer adds to a run: [`LlmResponse::cost_usd`] when it is a finite,
    /// positive number, else 0.
    pub fn billed_cost_usd(&self) -> f64 {
        self.cost_usd
            .filter(|c| c.is_finite() && *c > 0.0)
            .unwrap_or(0.0)
    }
}
