//! The runtime snapshot, payload of `runtime_state` records: AFK Python's fields, and in v2 a
//! reference to the transcript log instead of the transcript and records inline.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Extra;
use super::de::record_de;
use super::llm::{LlmResponse, Usage};
use super::message::{Message, lenient_opt_messages};
use super::rows::{
    BackgroundTicket, CommandExecution, SkillRead, SubagentExecution, ToolExecution,
    background_rows, command_rows, skill_read_rows, subagent_rows, tool_rows,
};
use super::shared::shared_response;
use super::status::RunStatus;
use super::transcript::TranscriptRef;

/// Everything a resume needs to rebuild a run.
///
/// v1 (AFK) snapshots carry the transcript inline in `messages` and no `transcript`; v2
/// snapshots leave `messages` out and point at the transcript log with `transcript`.
/// Record lists and `messages` are read leniently like AFK (bad rows dropped); every other
/// field must have its documented type (missing fields take their default). A
/// `pending_llm_response` that is present must decode; only `null` or absent means none.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuntimeSnapshot {
    /// The thread id as the runner saw it.
    pub thread_id: String,
    /// Step of the snapshot.
    pub step: u64,
    /// Runner state (`running`, `degraded`).
    pub state: RunStatus,
    /// Run context.
    pub context: Map<String, Value>,
    /// v1: the whole transcript inline. v2: `None` (left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// LLM calls made so far.
    pub llm_calls: u64,
    /// Tool calls made so far.
    pub tool_calls: u64,
    /// Epoch seconds of the original run start.
    pub started_at_s: f64,
    /// Token usage so far.
    pub usage: Usage,
    /// Accumulated cost (0.0 possible).
    pub total_cost_usd: f64,
    /// Provider session token.
    pub session_token: Option<String>,
    /// Provider checkpoint token.
    pub checkpoint_token: Option<String>,
    /// Model the agent asked for.
    pub requested_model: Option<String>,
    /// Model after normalization.
    pub normalized_model: Option<String>,
    /// Provider adapter id.
    pub provider_adapter: Option<String>,
    /// Tool execution records.
    pub tool_executions: Vec<ToolExecution>,
    /// Subagent execution records.
    pub subagent_executions: Vec<SubagentExecution>,
    /// Skill reads.
    pub skill_reads: Vec<SkillRead>,
    /// Skill command executions.
    pub skill_command_executions: Vec<CommandExecution>,
    /// Final text so far.
    pub final_text: String,
    /// Final structured output, if any.
    pub final_structured: Option<Map<String, Value>>,
    /// A response received at this step whose tool calls are not done yet. Shared (an
    /// `Arc`): during a step it is the same answer as `final_response`, and the runner's
    /// snapshots hold it without copying it.
    #[serde(serialize_with = "shared_response")]
    pub pending_llm_response: Option<Arc<LlmResponse>>,
    /// Last successful response (shared, see `pending_llm_response`).
    #[serde(serialize_with = "shared_response")]
    pub final_response: Option<Arc<LlmResponse>>,
    /// Effects replayed from the journal so far (AFK writes it but never reads it back).
    pub replayed_effect_count: u64,
    /// Background tool tickets still pending.
    pub background_tools_pending: Vec<BackgroundTicket>,
    /// v2: the transcript log this snapshot covers; left out when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<TranscriptRef>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(RuntimeSnapshot {
    thread_id: def,
    step: def,
    state: def,
    context: def,
    messages: lenient(lenient_opt_messages),
    llm_calls: def,
    tool_calls: def,
    started_at_s: def,
    usage: def,
    total_cost_usd: def,
    session_token: def,
    checkpoint_token: def,
    requested_model: def,
    normalized_model: def,
    provider_adapter: def,
    tool_executions: lenient(tool_rows),
    subagent_executions: lenient(subagent_rows),
    skill_reads: lenient(skill_read_rows),
    skill_command_executions: lenient(command_rows),
    final_text: def,
    final_structured: def,
    pending_llm_response: def,
    final_response: def,
    replayed_effect_count: def,
    background_tools_pending: lenient(background_rows),
    transcript: def,
});

/// The snapshot's extra field holding a suspended run's [`Suspension`].
pub const SUSPENSION_KEY: &str = "suspension";

/// Why and until when a run is suspended: every model the run may use failed with a
/// retryable error (a rate limit, a 5xx, a timeout, a lost connection), so the run waits
/// rather than ending. Stored in the `runtime_state` record the latest pointer names, whose
/// `state` is `suspended` and whose step is still open, under the extra field
/// [`SUSPENSION_KEY`]: `{"reason": …, "error_kind": …, "not_before_ms": …, "attempt": …}`.
/// A resume (before or after `not_before_ms`) redoes the step's model turn as the same step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// The last model error, as its message says it.
    pub reason: String,
    /// That error's kind (`unavailable`, `timeout`, …).
    pub error_kind: String,
    /// Milliseconds since the epoch before which resuming is pointless (the backoff, or the
    /// provider's `Retry-After` if later).
    pub not_before_ms: u64,
    /// Consecutive suspensions of the run so far, this one included (the backoff doubles
    /// with each; a model answer resets it).
    pub attempt: u64,
}

impl RuntimeSnapshot {
    /// The run's suspension, if this snapshot records one (an unreadable mark reads as none).
    pub fn suspension(&self) -> Option<Suspension> {
        let v = self.extra.get(SUSPENSION_KEY)?;
        serde_json::from_value(v.clone()).ok()
    }
}

/// The snapshot's extra field naming the agent the run is driven by ([`AgentIdentity`]).
pub const AGENT_KEY: &str = "agent";
/// The snapshot's extra field listing the agent changes a run went through
/// ([`AgentChange`]), oldest first.
pub const AGENT_HISTORY_KEY: &str = "agent_history";

/// Which agent drives a run: its name, the version the application gave it, and a fingerprint
/// of what shapes the transcript (instructions, models, tool specs with their effect policies,
/// subagents). Recorded when the run starts; a resume by an agent with another fingerprint is
/// refused unless that agent declares the recorded version compatible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentIdentity {
    /// The agent's name.
    pub name: String,
    /// The version the application gave the agent (empty if none).
    pub version: String,
    /// SHA-256 hex of the agent's canonical description.
    pub fingerprint: String,
}

/// A change of agent a run went through: from the agent that drove it to one that declared
/// that agent's version compatible, at the step the run resumed at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentChange {
    /// The agent before.
    pub from: AgentIdentity,
    /// The agent after.
    pub to: AgentIdentity,
    /// The step the run resumed at under the new agent.
    pub step: u64,
}

impl RuntimeSnapshot {
    /// The agent that drives the run, if the snapshot records one (runs written by AFK Python
    /// and by earlier versions do not).
    pub fn agent(&self) -> Option<AgentIdentity> {
        let v = self.extra.get(AGENT_KEY)?;
        serde_json::from_value(v.clone()).ok()
    }
}
