//! One payload type per phase (AFK Python's payload keys) and [`PhasePayload`], keyed by phase.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Extra;
use super::de::record_de;
use super::envelope::Phase;
use super::result::AgentResult;
use super::rows::{BackgroundTicket, background_rows};
use super::snapshot::RuntimeSnapshot;
use super::status::RunStatus;

/// `run_started`: written at the start of every execution (fresh run and each resume).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunStartedPayload {
    /// The agent's name.
    pub agent_name: String,
    /// Whether this execution is a resume.
    pub resumed: bool,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(RunStartedPayload {
    agent_name: def,
    resumed: def
});

/// `step_started`: top of a step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepStartedPayload {
    /// Runner state, normally `running`.
    pub state: RunStatus,
    /// Transcript length at that moment.
    pub message_count: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(StepStartedPayload {
    state: def,
    message_count: def
});

/// `pre_llm`: before the model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreLlmPayload {
    /// Normalized model.
    pub model: String,
    /// LLM provider id.
    pub provider: String,
    /// Transcript length sent.
    pub message_count: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PreLlmPayload {
    model: def,
    provider: def,
    message_count: def
});

/// `post_llm`: after the model answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PostLlmPayload {
    /// Normalized model.
    pub model: String,
    /// LLM provider id.
    pub provider: String,
    /// Finish reason (`""` when absent).
    pub finish_reason: String,
    /// Number of tool calls in the response.
    pub tool_call_count: u64,
    /// Session token (`""` when absent).
    pub session_token: String,
    /// Checkpoint token (`""` when absent).
    pub checkpoint_token: String,
    /// Accumulated cost.
    pub total_cost_usd: f64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PostLlmPayload {
    model: def,
    provider: def,
    finish_reason: def,
    tool_call_count: def,
    session_token: def,
    checkpoint_token: def,
    total_cost_usd: def,
});

/// `pre_tool_batch`: before the calls of a response run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreToolBatchPayload {
    /// Number of calls in the response.
    pub tool_call_count: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PreToolBatchPayload {
    tool_call_count: def
});

/// `post_tool_batch`: after the batch finished.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PostToolBatchPayload {
    /// Calls dispatched or replayed.
    pub tool_calls_total: u64,
    /// Calls that failed.
    pub tool_failures: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PostToolBatchPayload {
    tool_calls_total: def,
    tool_failures: def
});

/// `pre_subagent_batch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreSubagentBatchPayload {
    /// Subagents the router chose.
    pub targets: Vec<String>,
    /// Whether they run in parallel.
    pub router_parallel: bool,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PreSubagentBatchPayload {
    targets: def,
    router_parallel: def
});

/// `post_subagent_batch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PostSubagentBatchPayload {
    /// Subagents that succeeded.
    pub success_count: u64,
    /// Subagents that failed.
    pub failure_count: u64,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PostSubagentBatchPayload {
    success_count: def,
    failure_count: def
});

/// What a pause waits for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseKind {
    /// A yes/no approval.
    #[default]
    Approval,
    /// Free-form user input.
    UserInput,
}

/// v2: the full human request of a pause, so a resume in another process can answer it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PauseRequest {
    /// Approval or user input.
    pub kind: PauseKind,
    /// Why approval is needed (approval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to ask (user input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The tool call the gate is about, if any (none for the LLM gate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Request payload (arguments, `target_arg`, …).
    pub payload: Map<String, Value>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PauseRequest {
    kind: req,
    reason: def,
    prompt: def,
    tool_call_id: def,
    payload: def
});

/// `paused`: the run waits for a human.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PausedPayload {
    /// Approval or user input.
    pub kind: PauseKind,
    /// Approval reason (AFK).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Input prompt (AFK).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// v2: the full request; left out when unset (AFK records).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<PauseRequest>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(PausedPayload {
    kind: req,
    reason: def,
    prompt: def,
    request: def
});

/// `resumed`: the human decision arrived.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResumedPayload {
    /// Approval or user input.
    pub kind: PauseKind,
    /// v2: the decision that was applied; left out when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Value>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(ResumedPayload {
    kind: req,
    decision: def
});

/// `run_terminal`: the run ended. AFK Python writes two variants: completion/degrade
/// (`final_text` and the model fields) and error paths (`message`, `background_tools_pending`);
/// the fields of the other variant are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunTerminalPayload {
    /// Final state.
    pub state: RunStatus,
    /// Final text (completion variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_text: Option<String>,
    /// Requested model (completion variant, `""` if absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
    /// Normalized model (completion variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalized_model: Option<String>,
    /// Provider adapter (completion variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_adapter: Option<String>,
    /// Error text (error variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The result to hand back on resume; `None` only if the record has no usable result.
    pub terminal_result: Option<AgentResult>,
    /// Background tickets still pending (error variant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_tools_pending: Option<Vec<BackgroundTicket>>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}

fn opt_background_rows(v: Value) -> Result<Option<Vec<BackgroundTicket>>, String> {
    match v {
        Value::Null => Ok(None),
        v => background_rows(v).map(Some),
    }
}

record_de!(RunTerminalPayload {
    state: def,
    final_text: def,
    requested_model: def,
    normalized_model: def,
    provider_adapter: def,
    message: def,
    terminal_result: def,
    background_tools_pending: lenient(opt_background_rows),
});

/// The payload of a record, one typed variant per [`Phase`]. Serializes as the inner object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PhasePayload {
    /// See [`RunStartedPayload`].
    RunStarted(RunStartedPayload),
    /// See [`StepStartedPayload`].
    StepStarted(StepStartedPayload),
    /// See [`RuntimeSnapshot`].
    RuntimeState(Box<RuntimeSnapshot>),
    /// See [`PreLlmPayload`].
    PreLlm(PreLlmPayload),
    /// See [`PostLlmPayload`].
    PostLlm(PostLlmPayload),
    /// See [`PreToolBatchPayload`].
    PreToolBatch(PreToolBatchPayload),
    /// See [`PostToolBatchPayload`].
    PostToolBatch(PostToolBatchPayload),
    /// See [`PreSubagentBatchPayload`].
    PreSubagentBatch(PreSubagentBatchPayload),
    /// See [`PostSubagentBatchPayload`].
    PostSubagentBatch(PostSubagentBatchPayload),
    /// See [`PausedPayload`].
    Paused(PausedPayload),
    /// See [`ResumedPayload`].
    Resumed(ResumedPayload),
    /// See [`RunTerminalPayload`].
    RunTerminal(Box<RunTerminalPayload>),
}

impl PhasePayload {
    /// The phase this payload belongs to.
    pub fn phase(&self) -> Phase {
        match self {
            PhasePayload::RunStarted(_) => Phase::RunStarted,
            PhasePayload::StepStarted(_) => Phase::StepStarted,
            PhasePayload::RuntimeState(_) => Phase::RuntimeState,
            PhasePayload::PreLlm(_) => Phase::PreLlm,
            PhasePayload::PostLlm(_) => Phase::PostLlm,
            PhasePayload::PreToolBatch(_) => Phase::PreToolBatch,
            PhasePayload::PostToolBatch(_) => Phase::PostToolBatch,
            PhasePayload::PreSubagentBatch(_) => Phase::PreSubagentBatch,
            PhasePayload::PostSubagentBatch(_) => Phase::PostSubagentBatch,
            PhasePayload::Paused(_) => Phase::Paused,
            PhasePayload::Resumed(_) => Phase::Resumed,
            PhasePayload::RunTerminal(_) => Phase::RunTerminal,
        }
    }

    /// Decode a payload object for `phase`. On failure returns the path of the failing field
    /// inside the payload (`"usage.input_tokens"`, `"."` for the payload itself) and the error.
    pub fn from_value(
        phase: Phase,
        value: Value,
    ) -> Result<PhasePayload, (String, serde_json::Error)> {
        fn de<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, (String, serde_json::Error)> {
            serde_path_to_error::deserialize(v).map_err(|e| (e.path().to_string(), e.into_inner()))
        }
        Ok(match phase {
            Phase::RunStarted => PhasePayload::RunStarted(de(value)?),
            Phase::StepStarted => PhasePayload::StepStarted(de(value)?),
            Phase::RuntimeState => PhasePayload::RuntimeState(Box::new(de(value)?)),
            Phase::PreLlm => PhasePayload::PreLlm(de(value)?),
            Phase::PostLlm => PhasePayload::PostLlm(de(value)?),
            Phase::PreToolBatch => PhasePayload::PreToolBatch(de(value)?),
            Phase::PostToolBatch => PhasePayload::PostToolBatch(de(value)?),
            Phase::PreSubagentBatch => PhasePayload::PreSubagentBatch(de(value)?),
            Phase::PostSubagentBatch => PhasePayload::PostSubagentBatch(de(value)?),
            Phase::Paused => PhasePayload::Paused(de(value)?),
            Phase::Resumed => PhasePayload::Resumed(de(value)?),
            Phase::RunTerminal => PhasePayload::RunTerminal(Box::new(de(value)?)),
        })
    }
}
