//! The in-memory state of one run, and its conversion to and from the runtime snapshot.

use serde_json::{Map, Value};

use crate::schema::{
    AgentResult, Extra, LlmResponse, Message, RunStatus, RuntimeSnapshot, StateSnapshot,
    StepRecords, SubagentExecution, ToolExecution, TranscriptRef, Usage,
};

/// Key in the snapshot's extra fields holding the run's active milliseconds (v2).
pub(crate) const ACTIVE_MS_KEY: &str = "active_ms";
/// Key in the snapshot's extra fields marking a snapshot taken at the top of a step, before
/// its model answer was saved (v2; absent means false). A resume from it redoes the step
/// under the same step number.
pub(crate) const STEP_OPEN_KEY: &str = "step_open";
/// Key in the snapshot's extra fields holding the model calls started so far, including
/// calls whose answer a crash lost (v2; absent means `llm_calls`).
pub(crate) const LLM_REQUESTS_KEY: &str = "llm_requests";
/// Key in the `pre_llm` payload's extra fields: the ordinal of the model call it announces.
pub(crate) const LLM_REQUEST_KEY: &str = "llm_request";

/// Everything a run carries from step to step. Restored from a snapshot on resume.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunState {
    pub step: u64,
    pub state: RunStatus,
    pub context: Map<String, Value>,
    pub messages: Vec<Message>,
    pub llm_calls: u64,
    /// Model calls started, including calls whose answer a crash lost (real spend; what
    /// `max_llm_calls` counts). Equal to `llm_calls` for a run that never crashed mid-turn.
    pub llm_requests: u64,
    /// The step's model turn has not finished (its answer is not in a snapshot yet).
    pub step_open: bool,
    pub tool_calls: u64,
    pub started_at_s: f64,
    /// Active milliseconds accumulated by earlier processes (resumes) of this run.
    pub active_ms_before: u64,
    pub usage: Usage,
    pub total_cost_usd: f64,
    pub session_token: Option<String>,
    pub checkpoint_token: Option<String>,
    pub requested_model: Option<String>,
    pub normalized_model: Option<String>,
    pub provider_adapter: Option<String>,
    pub tool_executions: Vec<ToolExecution>,
    pub subagent_executions: Vec<SubagentExecution>,
    pub final_text: String,
    pub final_structured: Option<Map<String, Value>>,
    pub pending_llm_response: Option<LlmResponse>,
    pub final_response: Option<LlmResponse>,
    pub replayed_effect_count: u64,
    /// Fields of the restored snapshot this version does not know; written back unchanged.
    pub extra: Extra,
}

impl RunState {
    /// Build the snapshot payload. `transcript` is the log reference when the transcript and
    /// the execution records are in the append-only log (then `messages` is left out and the
    /// record lists are empty, so the snapshot does not grow with the run).
    pub(super) fn to_snapshot(
        &self,
        thread_id: &str,
        active_ms: u64,
        transcript: Option<TranscriptRef>,
    ) -> RuntimeSnapshot {
        let mut extra = self.extra.clone();
        extra.insert(ACTIVE_MS_KEY.to_owned(), Value::from(active_ms));
        extra.insert(
            LLM_REQUESTS_KEY.to_owned(),
            Value::from(self.llm_requests.max(self.llm_calls)),
        );
        if self.step_open {
            extra.insert(STEP_OPEN_KEY.to_owned(), Value::Bool(true));
        }
        let (messages, tool_executions, subagent_executions) = if transcript.is_some() {
            (None, Vec::new(), Vec::new())
        } else {
            (
                Some(self.messages.clone()),
                self.tool_executions.clone(),
                self.subagent_executions.clone(),
            )
        };
        RuntimeSnapshot {
            thread_id: thread_id.to_owned(),
            step: self.step,
            state: self.state.clone(),
            context: self.context.clone(),
            messages,
            llm_calls: self.llm_calls,
            tool_calls: self.tool_calls,
            started_at_s: self.started_at_s,
            usage: self.usage.clone(),
            total_cost_usd: self.total_cost_usd,
            session_token: self.session_token.clone(),
            checkpoint_token: self.checkpoint_token.clone(),
            requested_model: self.requested_model.clone(),
            normalized_model: self.normalized_model.clone(),
            provider_adapter: self.provider_adapter.clone(),
            tool_executions,
            subagent_executions,
            skill_reads: Vec::new(),
            skill_command_executions: Vec::new(),
            final_text: self.final_text.clone(),
            final_structured: self.final_structured.clone(),
            pending_llm_response: self.pending_llm_response.clone(),
            final_response: self.final_response.clone(),
            replayed_effect_count: self.replayed_effect_count,
            background_tools_pending: Vec::new(),
            transcript,
            extra,
        }
    }

    /// Restore from a snapshot whose transcript has already been reassembled into `messages`;
    /// `logged` are the records of the transcript log (empty for a v1 snapshot), which follow
    /// the snapshot's inline records (empty for a current v2 snapshot).
    /// `snapshot_ts_ms` is the record's timestamp: for AFK records without an active-time
    /// field, the active time so far is taken as `timestamp - started_at` (AFK had no pauses
    /// that outlive a process).
    pub(super) fn from_snapshot(
        snap: &RuntimeSnapshot,
        messages: Vec<Message>,
        logged: StepRecords,
        snapshot_ts_ms: u64,
    ) -> Self {
        let mut extra = snap.extra.clone();
        let active = match extra.remove(ACTIVE_MS_KEY).and_then(|v| v.as_u64()) {
            Some(ms) => ms,
            None => {
                let started_ms = (snap.started_at_s * 1000.0).max(0.0) as u64;
                snapshot_ts_ms.saturating_sub(started_ms)
            }
        };
        let llm_requests = extra
            .remove(LLM_REQUESTS_KEY)
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            .max(snap.llm_calls);
        let step_open = extra
            .remove(STEP_OPEN_KEY)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
            && snap.pending_llm_response.is_none();
        RunState {
            step: snap.step,
            llm_requests,
            step_open,
            // AFK wrote `""` for a state it had not set yet.
            state: match &snap.state {
                RunStatus::Other(s) if s.is_empty() => RunStatus::Running,
                s => s.clone(),
            },
            context: snap.context.clone(),
            messages,
            llm_calls: snap.llm_calls,
            tool_calls: snap.tool_calls,
            started_at_s: snap.started_at_s,
            active_ms_before: active,
            usage: snap.usage.clone(),
            total_cost_usd: snap.total_cost_usd,
            session_token: snap.session_token.clone().filter(|s| !s.is_empty()),
            checkpoint_token: snap.checkpoint_token.clone().filter(|s| !s.is_empty()),
            requested_model: snap.requested_model.clone(),
            normalized_model: snap.normalized_model.clone(),
            provider_adapter: snap.provider_adapter.clone(),
            tool_executions: [snap.tool_executions.clone(), logged.tool_executions].concat(),
            subagent_executions: [snap.subagent_executions.clone(), logged.subagent_executions]
                .concat(),
            final_text: snap.final_text.clone(),
            final_structured: snap.final_structured.clone(),
            pending_llm_response: snap.pending_llm_response.clone(),
            final_response: snap.final_response.clone(),
            replayed_effect_count: snap.replayed_effect_count,
            extra,
        }
    }

    /// The `AgentResult` of this state, as stored in `run_terminal.terminal_result`.
    pub(super) fn to_result(&self, run_id: &str, thread_id: &str, elapsed_s: f64) -> AgentResult {
        let cost = (self.total_cost_usd > 0.0).then_some(self.total_cost_usd);
        AgentResult {
            run_id: run_id.to_owned(),
            thread_id: thread_id.to_owned(),
            state: self.state.clone(),
            final_text: self.final_text.clone(),
            requested_model: self.requested_model.clone(),
            normalized_model: self.normalized_model.clone(),
            provider_adapter: self.provider_adapter.clone(),
            final_structured: self.final_structured.clone(),
            llm_response: self.final_response.clone(),
            tool_executions: self.tool_executions.clone(),
            subagent_executions: self.subagent_executions.clone(),
            skills_used: Vec::new(),
            skill_reads: Vec::new(),
            skill_command_executions: Vec::new(),
            usage_aggregate: self.usage.clone(),
            total_cost_usd: cost,
            session_token: self.session_token.clone(),
            checkpoint_token: self.checkpoint_token.clone(),
            state_snapshot: StateSnapshot {
                state: self.state.clone(),
                step: self.step,
                llm_calls: self.llm_calls,
                tool_calls: self.tool_calls,
                started_at_s: self.started_at_s,
                elapsed_s,
                requested_model: self.requested_model.clone(),
                normalized_model: self.normalized_model.clone(),
                provider_adapter: self.provider_adapter.clone(),
                total_cost_usd: cost,
                replayed_effect_count: self.replayed_effect_count,
                extra: Extra::new(),
            },
            extra: Extra::new(),
        }
    }
}
