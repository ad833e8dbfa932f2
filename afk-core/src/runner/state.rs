//! The in-memory state of one run, and its conversion to and from the runtime snapshot.

use std::sync::Arc;

use serde_json::Value;

use super::agent::Limits;
use super::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::schema::{
    AGENT_HISTORY_KEY, AGENT_KEY, AgentChange, AgentIdentity, AgentResult, Extra, Message,
    RunStatus, RuntimeSnapshot, SUSPENSION_KEY, StateSnapshot, StepRecords, SubagentExecution,
    Suspension, ToolExecution, TranscriptRef,
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
///
/// Built around the [`RuntimeSnapshot`] it writes: `snap` holds every field a snapshot
/// carries, and a snapshot is written straight from it ([`RunState::snapshot`]), not copied.
/// What a v2 snapshot leaves to the transcript log (the messages and the execution records)
/// and what only this process tracks live beside it. In `snap`, `messages` stays `None` and the
/// record lists stay empty; `extra` holds the fields of the restored snapshot this version
/// does not know (written back unchanged) and, once a snapshot is taken, this version's own
/// extra fields (active time, model requests, the open-step mark).
#[derive(Debug, Clone, Default)]
pub(crate) struct RunState {
    /// The snapshot fields.
    pub snap: RuntimeSnapshot,
    /// The whole transcript, shared with the model requests made from it (pushed to through
    /// [`RunState::push_message`]).
    pub messages: Arc<Vec<Message>>,
    /// Every tool execution record of the run.
    pub tool_executions: Vec<ToolExecution>,
    /// Every subagent execution record of the run.
    pub subagent_executions: Vec<SubagentExecution>,
    /// Model calls started, including calls whose answer a crash lost (real spend; what
    /// `max_llm_calls` counts). Equal to `snap.llm_calls` for a run that never crashed
    /// mid-turn.
    pub llm_requests: u64,
    /// The step's model turn has not finished (its answer is not in a snapshot yet).
    pub step_open: bool,
    /// Active milliseconds accumulated by earlier processes (resumes) of this run.
    pub active_ms_before: u64,
    /// The run's suspension, while it is being suspended (written into the snapshot).
    pub suspension: Option<Suspension>,
    /// Consecutive suspensions before this process's (from the snapshot it resumed from;
    /// reset by a model answer).
    pub suspensions_before: u64,
}

/// The run's active time: what earlier processes spent ([`RunState::active_ms_before`]) plus
/// this process's time since it began (or resumed) the run. Time spent paused or crashed is
/// not active.
#[derive(Debug, Clone)]
pub(crate) struct Stopwatch {
    clock: Arc<dyn Clock>,
    segment_start_ms: u64,
}

impl Stopwatch {
    /// Start this process's segment now.
    pub(crate) fn start(clock: Arc<dyn Clock>) -> Self {
        let segment_start_ms = clock.now_ms();
        Stopwatch {
            clock,
            segment_start_ms,
        }
    }

    /// Active milliseconds of the run so far (earlier processes plus this one).
    pub(crate) fn active_ms(&self, st: &RunState) -> u64 {
        st.active_ms_before + self.clock.now_ms().saturating_sub(self.segment_start_ms)
    }

    /// The time source.
    pub(crate) fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }
}

impl RunState {
    /// The snapshot to write now, referencing the transcript log `transcript` (which holds the
    /// messages and records, so the snapshot does not grow with the run).
    pub(super) fn snapshot(
        &mut self,
        thread_id: &str,
        active_ms: u64,
        transcript: TranscriptRef,
    ) -> &RuntimeSnapshot {
        let snap = &mut self.snap;
        if snap.thread_id != thread_id {
            thread_id.clone_into(&mut snap.thread_id);
        }
        snap.transcript = Some(transcript);
        set_extra(&mut snap.extra, ACTIVE_MS_KEY, Value::from(active_ms));
        let requests = self.llm_requests.max(snap.llm_calls);
        set_extra(&mut snap.extra, LLM_REQUESTS_KEY, Value::from(requests));
        if self.step_open {
            set_extra(&mut snap.extra, STEP_OPEN_KEY, Value::Bool(true));
        } else {
            snap.extra.remove(STEP_OPEN_KEY);
        }
        match self
            .suspension
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
        {
            Some(v) => set_extra(&mut snap.extra, SUSPENSION_KEY, v),
            None => {
                snap.extra.remove(SUSPENSION_KEY);
            }
        }
        snap
    }

    /// Name `agent` as the agent driving the run from here on (kept in the snapshot's extra
    /// fields, written once rather than with every snapshot).
    pub(super) fn set_agent(&mut self, agent: &AgentIdentity) {
        if let Ok(v) = serde_json::to_value(agent) {
            self.snap.extra.insert(AGENT_KEY.to_owned(), v);
        }
    }

    /// Record a change of agent in the run's agent history (the snapshot's extra fields).
    pub(super) fn push_agent_change(&mut self, change: &AgentChange) {
        let Ok(v) = serde_json::to_value(change) else {
            return;
        };
        match self.snap.extra.get_mut(AGENT_HISTORY_KEY) {
            Some(Value::Array(list)) => list.push(v),
            _ => {
                self.snap
                    .extra
                    .insert(AGENT_HISTORY_KEY.to_owned(), Value::Array(vec![v]));
            }
        }
    }

    /// Append `message` to the transcript (copying it first only if a model request still
    /// holds the current one).
    pub(super) fn push_message(&mut self, message: Message) {
        Arc::make_mut(&mut self.messages).push(message);
    }

    /// Restore from a snapshot whose transcript has already been reassembled into `messages`;
    /// `logged` are the records of the transcript log (empty for a v1 snapshot), which follow
    /// the snapshot's inline records (empty for a current v2 snapshot).
    /// `snapshot_ts_ms` is the record's timestamp: for AFK records without an active-time
    /// field, the active time so far is taken as `timestamp - started_at` (AFK had no pauses
    /// that outlive a process).
    pub(super) fn from_snapshot(
        restored: &RuntimeSnapshot,
        messages: Vec<Message>,
        logged: StepRecords,
        snapshot_ts_ms: u64,
    ) -> Self {
        let mut snap = restored.clone();
        let active = match snap.extra.remove(ACTIVE_MS_KEY).and_then(|v| v.as_u64()) {
            Some(ms) => ms,
            None => {
                let started_ms = (snap.started_at_s * 1000.0).max(0.0) as u64;
                snapshot_ts_ms.saturating_sub(started_ms)
            }
        };
        let llm_requests = snap
            .extra
            .remove(LLM_REQUESTS_KEY)
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            .max(snap.llm_calls);
        let step_open = snap
            .extra
            .remove(STEP_OPEN_KEY)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
            && snap.pending_llm_response.is_none();
        // AFK wrote `""` for a state and tokens it had not set yet. A suspension ends with
        // the resume that restores it (its count goes on, for the backoff).
        let suspensions_before = snap.suspension().map_or(0, |s| s.attempt);
        snap.extra.remove(SUSPENSION_KEY);

        if matches!(&snap.state, RunStatus::Other(s) if s.is_empty())
            || snap.state == RunStatus::Suspended
        {
            snap.state = RunStatus::Running;
        }
        snap.session_token = snap.session_token.filter(|s| !s.is_empty());
        snap.checkpoint_token = snap.checkpoint_token.filter(|s| !s.is_empty());
        // The inline transcript and records (v1, or v2 before records moved into the log)
        // move out; the next snapshot carries a log reference instead. Skill records and
        // background tickets are not run by this version and are not written back.
        snap.messages = None;
        snap.transcript = None;
        let tool_executions = [
            std::mem::take(&mut snap.tool_executions),
            logged.tool_executions,
        ]
        .concat();
        let subagent_executions = [
            std::mem::take(&mut snap.subagent_executions),
            logged.subagent_executions,
        ]
        .concat();
        snap.skill_reads.clear();
        snap.skill_command_executions.clear();
        snap.background_tools_pending.clear();
        RunState {
            snap,
            messages: Arc::new(messages),
            tool_executions,
            subagent_executions,
            llm_requests,
            step_open,
            active_ms_before: active,
            suspension: None,
            suspensions_before,
        }
    }

    /// `BudgetExceeded` when the run has spent one of its budgets (`active_ms`: its active
    /// time so far).
    pub(super) fn check_budgets(&self, l: &Limits, active_ms: u64) -> Result<()> {
        let over = |what: &str, limit: String| {
            Err(Error::new(
                ErrorKind::BudgetExceeded,
                format!("Exceeded {what}={limit}"),
            ))
        };
        if self.snap.step > l.max_steps {
            return over("max_steps", l.max_steps.to_string());
        }
        if self.llm_requests.max(self.snap.llm_calls) >= l.max_llm_calls {
            return over("max_llm_calls", l.max_llm_calls.to_string());
        }
        if self.snap.tool_calls > l.max_tool_calls {
            return over("max_tool_calls", l.max_tool_calls.to_string());
        }
        if let Some(ms) = l.max_wall_time_ms
            && active_ms > ms
        {
            return over("max_wall_time_s", format!("{}", ms as f64 / 1000.0));
        }
        self.check_cost(l)
    }

    /// `BudgetExceeded` when the run's recorded cost is over its limit.
    pub(super) fn check_cost(&self, l: &Limits) -> Result<()> {
        if let Some(max) = l.max_cost_usd
            && self.snap.total_cost_usd > max
        {
            return Err(Error::new(
                ErrorKind::BudgetExceeded,
                format!("Exceeded max_total_cost_usd={max}"),
            ));
        }
        Ok(())
    }

    /// [`RunState::to_result`] with the run's tool and subagent execution records moved into
    /// the result instead of copied: for the terminal record of a run that ends. Give them
    /// back with [`RunState::restore_records`] if that record is not written.
    pub(super) fn take_result(
        &mut self,
        run_id: &str,
        thread_id: &str,
        elapsed_s: f64,
    ) -> AgentResult {
        let tools = std::mem::take(&mut self.tool_executions);
        let subagents = std::mem::take(&mut self.subagent_executions);
        let mut result = self.to_result(run_id, thread_id, elapsed_s);
        result.tool_executions = tools;
        result.subagent_executions = subagents;
        result
    }

    /// Put back the records [`RunState::take_result`] moved into `result`.
    pub(super) fn restore_records(&mut self, result: AgentResult) {
        self.tool_executions = result.tool_executions;
        self.subagent_executions = result.subagent_executions;
    }

    /// The `AgentResult` of this state, as stored in `run_terminal.terminal_result`.
    pub(super) fn to_result(&self, run_id: &str, thread_id: &str, elapsed_s: f64) -> AgentResult {
        let s = &self.snap;
        let cost = (s.total_cost_usd > 0.0).then_some(s.total_cost_usd);
        AgentResult {
            run_id: run_id.to_owned(),
            thread_id: thread_id.to_owned(),
            state: s.state.clone(),
            final_text: s.final_text.clone(),
            requested_model: s.requested_model.clone(),
            normalized_model: s.normalized_model.clone(),
            provider_adapter: s.provider_adapter.clone(),
            final_structured: s.final_structured.clone(),
            llm_response: s.final_response.as_deref().cloned(),
            tool_executions: self.tool_executions.clone(),
            subagent_executions: self.subagent_executions.clone(),
            skills_used: Vec::new(),
            skill_reads: Vec::new(),
            skill_command_executions: Vec::new(),
            usage_aggregate: s.usage.clone(),
            total_cost_usd: cost,
            session_token: s.session_token.clone(),
            checkpoint_token: s.checkpoint_token.clone(),
            state_snapshot: StateSnapshot {
                state: s.state.clone(),
                step: s.step,
                llm_calls: s.llm_calls,
                tool_calls: s.tool_calls,
                started_at_s: s.started_at_s,
                elapsed_s,
                requested_model: s.requested_model.clone(),
                normalized_model: s.normalized_model.clone(),
                provider_adapter: s.provider_adapter.clone(),
                total_cost_usd: cost,
                replayed_effect_count: s.replayed_effect_count,
                extra: Extra::new(),
            },
            extra: Extra::new(),
        }
    }
}

/// `extra[key] = value`, allocating the key only the first time (snapshots rewrite these keys
/// three times a step).
fn set_extra(extra: &mut Extra, key: &str, value: Value) {
    match extra.get_mut(key) {
        Some(slot) => *slot = value,
        None => {
            extra.insert(key.to_owned(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The terminal result takes the run's records (no copy) and is otherwise the one
    /// `to_result` builds; given back, the run state holds them as before.
    #[test]
    fn a_taken_result_holds_the_records_and_gives_them_back() {
        let mut st = RunState::default();
        st.snap.final_text = "done".into();
        st.tool_executions = vec![ToolExecution {
            tool_name: "add".into(),
            tool_call_id: Some("c1".into()),
            success: true,
            output: json!({"result": 3}),
            ..Default::default()
        }];
        st.subagent_executions = vec![SubagentExecution {
            subagent_name: "helper".into(),
            ..Default::default()
        }];
        let copied = st.to_result("r", "t", 1.5);
        let taken = st.take_result("r", "t", 1.5);
        assert_eq!(taken, copied);
        assert!(st.tool_executions.is_empty() && st.subagent_executions.is_empty());
        st.restore_records(taken);
        assert_eq!(st.to_result("r", "t", 1.5), copied);
    }
}
