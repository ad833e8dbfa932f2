//! `AgentResult`, the `terminal_result` of `run_terminal` records (AFK Python's fields).

use serde::Serialize;
use serde_json::{Map, Value};

use super::Extra;
use super::de::record_de;
use super::llm::{LlmResponse, Usage};
use super::rows::{
    CommandExecution, SkillRead, SubagentExecution, ToolExecution, command_rows, skill_read_rows,
    subagent_rows, tool_rows,
};
use super::status::RunStatus;

/// Counters of the run when the result was built.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StateSnapshot {
    /// Final runner state.
    pub state: RunStatus,
    /// Last step.
    pub step: u64,
    /// LLM calls.
    pub llm_calls: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Epoch seconds of the original start.
    pub started_at_s: f64,
    /// Seconds from start to when the result was built.
    pub elapsed_s: f64,
    /// Model the agent asked for.
    pub requested_model: Option<String>,
    /// Model after normalization.
    pub normalized_model: Option<String>,
    /// Provider adapter id.
    pub provider_adapter: Option<String>,
    /// Cost; `None` when ≤ 0.
    pub total_cost_usd: Option<f64>,
    /// Effects replayed from the journal.
    pub replayed_effect_count: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(StateSnapshot {
    state: def,
    step: def,
    llm_calls: def,
    tool_calls: def,
    started_at_s: def,
    elapsed_s: def,
    requested_model: def,
    normalized_model: def,
    provider_adapter: def,
    total_cost_usd: def,
    replayed_effect_count: def,
});

/// The outcome of a run, as AFK serializes it (19 keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentResult {
    /// Run id.
    pub run_id: String,
    /// Thread id.
    pub thread_id: String,
    /// Final state (`completed`, `degraded`, `failed`, `cancelled`, …).
    pub state: RunStatus,
    /// Final text (the error message on error paths).
    pub final_text: String,
    /// Model the agent asked for.
    pub requested_model: Option<String>,
    /// Model after normalization.
    pub normalized_model: Option<String>,
    /// Provider adapter id.
    pub provider_adapter: Option<String>,
    /// Structured output.
    pub final_structured: Option<Map<String, Value>>,
    /// Last LLM response.
    pub llm_response: Option<LlmResponse>,
    /// Tool execution records.
    pub tool_executions: Vec<ToolExecution>,
    /// Subagent execution records.
    pub subagent_executions: Vec<SubagentExecution>,
    /// Names of skills used.
    pub skills_used: Vec<String>,
    /// Skill reads.
    pub skill_reads: Vec<SkillRead>,
    /// Skill command executions.
    pub skill_command_executions: Vec<CommandExecution>,
    /// Token usage over the run.
    pub usage_aggregate: Usage,
    /// Cost; `None` when ≤ 0.
    pub total_cost_usd: Option<f64>,
    /// Provider session token.
    pub session_token: Option<String>,
    /// Provider checkpoint token.
    pub checkpoint_token: Option<String>,
    /// Counters at the end.
    pub state_snapshot: StateSnapshot,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(AgentResult {
    run_id: def,
    thread_id: def,
    state: def,
    final_text: def,
    requested_model: def,
    normalized_model: def,
    provider_adapter: def,
    final_structured: def,
    llm_response: def,
    tool_executions: lenient(tool_rows),
    subagent_executions: lenient(subagent_rows),
    skills_used: def,
    skill_reads: lenient(skill_read_rows),
    skill_command_executions: lenient(command_rows),
    usage_aggregate: def,
    total_cost_usd: def,
    session_token: def,
    checkpoint_token: def,
    state_snapshot: def,
});
