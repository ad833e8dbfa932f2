//! The step loop: one process's execution of one run, step after step, each phase committed
//! in AFK's order (`step_started`, a snapshot, the model turn, `pre_tool_batch`, the batch,
//! `post_tool_batch`, a snapshot), until the run ends, pauses or stops on an error.
//!
//! A [`RunTask`] owns the run's state and writer; each phase gets the narrow context it needs
//! ([`ModelTurn`], [`Batch`]) rather than the whole task.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use super::agent::Agent;
use super::batch::{self, Batch, BatchOutcome};
use super::config::MAX_SUSPENSION_BACKOFF;
use super::events::{Decision, Events, Outcome, RunEvent, Signal};
use super::fork::{self, Origin};
use super::model_turn::{Answer, ModelTurn, Turn};
use super::output_limit;
use super::persist::Checkpointer;
use super::prompt::{system_message, text_message};
use super::state::{RunState, Stopwatch};
use super::subagent::Delegator;
use super::telemetry;
use super::toolbox::Toolbox;
use crate::error::{Error, ErrorKind, Result};
use crate::schema::{
    AGENT_KEY, AgentResult, MarkState, PhasePayload, PostToolBatchPayload, PreToolBatchPayload,
    Role, RunStartedPayload, RunStatus, RunTerminalPayload, StepStartedPayload, Suspension,
};

/// What a run task starts from.
#[derive(Debug)]
pub(crate) struct TaskParts {
    pub(crate) agent: Agent,
    pub(crate) ckpt: Checkpointer,
    pub(crate) st: RunState,
    /// Human decisions by tool call id, for the step the run resumes at.
    pub(crate) decisions: BTreeMap<String, Decision>,
    pub(crate) delegator: Delegator,
    pub(crate) control: watch::Receiver<Signal>,
    pub(crate) events: Events,
    pub(crate) clock: Stopwatch,
    /// The first suspension's backoff ([`RunnerConfig::suspension_backoff`]).
    ///
    /// [`RunnerConfig::suspension_backoff`]: super::RunnerConfig::suspension_backoff
    pub(crate) backoff: Duration,
    /// The tools offered to the model (their specs asked for once per run).
    pub(crate) toolbox: Toolbox,
    /// A fork's origin: the run starts from `st`, restored from another run.
    pub(crate) forked: Option<Origin>,
}

/// One process's execution of one run.
#[derive(Debug)]
pub(crate) struct RunTask {
    agent: Agent,
    ckpt: Checkpointer,
    st: RunState,
    decisions: BTreeMap<String, Decision>,
    delegator: Delegator,
    /// The run stopped because a child run stopped without a final outcome.
    stopped_by_child: bool,
    control: watch::Receiver<Signal>,
    events: Events,
    clock: Stopwatch,
    backoff: Duration,
    toolbox: Toolbox,
    forked: Option<Origin>,
}

impl RunTask {
    pub(crate) fn new(p: TaskParts) -> Self {
        RunTask {
            agent: p.agent,
            ckpt: p.ckpt,
            st: p.st,
            decisions: p.decisions,
            delegator: p.delegator,
            stopped_by_child: false,
            control: p.control,
            events: p.events,
            clock: p.clock,
            backoff: p.backoff,
            toolbox: p.toolbox,
            forked: p.forked,
        }
    }

    /// Drive the run to a terminal state or a pause; `input` for a fresh run, `None` for a
    /// resume. After an error, record what it means for the run (see [`RunTask::on_error`]).
    pub(crate) async fn run(mut self, input: Option<String>) -> Result<Outcome> {
        let res = self.run_loop(input).await;
        if let Err(e) = &res {
            self.on_error(e).await;
        }
        res
    }

    fn active_ms(&self) -> u64 {
        self.clock.active_ms(&self.st)
    }

    async fn snapshot(&mut self) -> Result<()> {
        let active_ms = self.active_ms();
        self.ckpt.snapshot(&mut self.st, active_ms).await
    }

    /// `resumed` runs skip the fresh-run setup and never move the latest pointer backwards.
    async fn run_loop(&mut self, input: Option<String>) -> Result<Outcome> {
        if let Some(origin) = self.forked.clone() {
            self.begin_fork(&origin).await?;
            self.ckpt.steps_fresh_after(self.st.snap.step);
            return self.steps(false).await;
        }
        let resumed = input.is_none();
        self.begin(input).await?;
        if !resumed {
            self.ckpt.steps_fresh_after(0);
        } else if self.ckpt.logged() {
            self.ckpt.steps_fresh_after(self.st.snap.step);
        }
        let reuse_pending = self.st.snap.pending_llm_response.is_some();
        self.steps(reuse_pending).await
    }

    /// The step loop, from the restored state (`reuse_pending`: its saved model answer).
    async fn steps(&mut self, mut reuse_pending: bool) -> Result<Outcome> {
        // A snapshot taken at the top of a step whose model turn had not finished: redo that
        // step under the same number (a redone step is the same logical step).
        let mut same_step = reuse_pending || self.st.step_open;
        loop {
            Signal::check(&self.control)?;
            self.events.release_unheard();
            if !same_step {
                self.st.snap.step += 1;
            }
            same_step = false;
            let active_ms = self.active_ms();
            self.st.check_budgets(&self.agent.limits, active_ms)?;
            let step = self.st.snap.step;
            let span = telemetry::step(self.ckpt.run.as_str(), step);
            let done = self.one_step(&mut reuse_pending).instrument(span).await?;
            if let Some(outcome) = done {
                return Ok(outcome);
            }
        }
    }

    /// The `run_started` record: with a fresh run's first messages and step-0 snapshot in one
    /// commit (resumable from here on), or for a resume without moving the pointer.
    async fn begin(&mut self, input: Option<String>) -> Result<()> {
        let resumed = input.is_none();
        if let Some(input) = input {
            self.st.snap.state = RunStatus::Running;
            self.st.snap.started_at_s = self.clock.clock().now_s();
            self.st
                .push_message(system_message(&self.agent.instructions));
            self.st.push_message(text_message(Role::User, input, None));
        }
        self.st.snap.state = RunStatus::Running;
        self.st.snap.requested_model = Some(self.agent.model.clone());
        let mut started = RunStartedPayload {
            agent_name: self.agent.name.clone(),
            resumed,
            extra: Default::default(),
        };
        if let Some(v) = self.st.snap.extra.get(AGENT_KEY) {
            started.extra.insert(AGENT_KEY.to_owned(), v.clone());
        }
        if resumed {
            // The pointer stays where the run really is (AFK moves it back to step 0 here).
            self.ckpt
                .checkpoint_with(0, &PhasePayload::RunStarted(started), false)
                .await?;
        } else {
            let (entry, tref) = self.ckpt.log_entry(0, &self.st.messages, &[], &[])?;
            let active_ms = self.active_ms();
            let bytes = self.ckpt.snapshot_record(&mut self.st, tref, active_ms)?;
            self.ckpt
                .first_commit(PhasePayload::RunStarted(started), entry, bytes)
                .await?;
        }
        let run = &self.ckpt.run;
        self.events.emit(|| RunEvent::RunStarted {
            run_id: run.as_str().to_owned(),
            resumed,
        });
        Ok(())
    }

    /// A fork's first commit (see [`fork::write_start`]).
    async fn begin_fork(&mut self, origin: &Origin) -> Result<()> {
        let now_s = self.clock.clock().now_s();
        self.st.snap.requested_model = Some(self.agent.model.clone());
        fork::write_start(
            &mut self.ckpt,
            &mut self.st,
            origin,
            &self.agent.name,
            now_s,
        )
        .await?;
        let run = &self.ckpt.run;
        self.events.emit(|| RunEvent::RunStarted {
            run_id: run.as_str().to_owned(),
            resumed: false,
        });
        Ok(())
    }

    /// One step: its model turn (or the saved answer), then its tool batch.
    async fn one_step(&mut self, reuse_pending: &mut bool) -> Result<Option<Outcome>> {
        let step = self.st.snap.step;
        self.events.emit(|| RunEvent::StepStarted { step });
        let started = StepStartedPayload {
            state: self.st.snap.state.clone(),
            message_count: self.st.messages.len() as u64,
            extra: Default::default(),
        };
        self.ckpt
            .checkpoint(step, PhasePayload::StepStarted(started))
            .await?;
        // Open until the model's answer is in a snapshot: a resume from this snapshot redoes
        // the step's model turn as the same step.
        self.st.step_open = !(*reuse_pending && self.st.snap.pending_llm_response.is_some());
        self.snapshot().await?;

        let pending = if *reuse_pending {
            self.st.snap.pending_llm_response.clone()
        } else {
            None
        };
        *reuse_pending = false;
        let answer = match pending {
            Some(resp) => {
                // No model call: a span that says the answer is replayed, without usage.
                let provider = self.agent.llm.provider();
                let asked = self.st.snap.normalized_model.as_ref();
                let model = asked.unwrap_or(&self.agent.model);
                let span = telemetry::chat(&provider, model, step, true);
                telemetry::record_answer(&span, &resp, true);
                Answer { resp, size: None }
            }
            None => match self.model_turn().await? {
                Turn::Answer(a) => a,
                Turn::Degraded => return self.finish().await.map(Some),
                Turn::Suspend(e) => return self.suspend(e).await.map(Some),
            },
        };
        let resp = &answer.resp;
        // The model's turn in the transcript: its text and, in the v2 field, the calls it
        // made, which the tool messages after it answer (a provider refuses a tool result
        // whose call is not in the transcript).
        if !resp.text.is_empty() || !resp.tool_calls.is_empty() {
            let mut message = text_message(Role::Assistant, resp.text.clone(), None);
            if !resp.tool_calls.is_empty() {
                message.tool_calls = Some(resp.tool_calls.clone());
            }
            self.st.push_message(message);
        }
        self.st.snap.final_response = Some(Arc::clone(resp));
        let tool_calls = resp.tool_calls.len();
        self.events
            .emit(|| RunEvent::LlmCompleted { step, tool_calls });
        if tool_calls == 0 {
            self.st.snap.final_text = resp.text.clone();
            self.st.snap.final_structured = resp.structured_response.clone();
            self.st.snap.state = RunStatus::Completed;
            return self.finish().await.map(Some);
        }
        self.tool_step(answer).await
    }

    /// The model turn, with the narrow context it needs.
    async fn model_turn(&mut self) -> Result<Turn> {
        ModelTurn {
            agent: &self.agent,
            specs: self.toolbox.specs(&self.agent),
            ckpt: &mut self.ckpt,
            st: &mut self.st,
            control: &self.control,
            clock: &self.clock,
        }
        .run()
        .await
    }

    /// The step's tool batch, between its `pre_tool_batch` and `post_tool_batch` records.
    async fn tool_step(&mut self, answer: Answer) -> Result<Option<Outcome>> {
        let step = self.st.snap.step;
        let pre = PreToolBatchPayload {
            tool_call_count: answer.resp.tool_calls.len() as u64,
            extra: Default::default(),
        };
        self.ckpt
            .checkpoint(step, PhasePayload::PreToolBatch(pre))
            .await?;
        Signal::check(&self.control)?;
        let mut b = Batch {
            agent: &self.agent,
            toolbox: &mut self.toolbox,
            ckpt: &mut self.ckpt,
            st: &mut self.st,
            decisions: &self.decisions,
            delegator: &self.delegator,
            events: &self.events,
            clock: self.clock.clock(),
        };
        let (total, failures, degrade) =
            match batch::run_batch(&mut b, &answer.resp, answer.size).await? {
                BatchOutcome::Paused(request) => {
                    self.ckpt.mark(MarkState::Paused, 0).await?;
                    self.ckpt.flush().await?;
                    self.events.emit(|| RunEvent::Paused { step });
                    return Ok(Some(Outcome::Paused { request }));
                }
                BatchOutcome::ChildStopped(e) => {
                    self.stopped_by_child = true;
                    return Err(e);
                }
                BatchOutcome::Done {
                    total,
                    failures,
                    degrade,
                } => (total, failures, degrade),
            };
        let post = PostToolBatchPayload {
            tool_calls_total: total,
            tool_failures: failures,
            extra: Default::default(),
        };
        self.ckpt
            .checkpoint(step, PhasePayload::PostToolBatch(post))
            .await?;
        self.st.snap.pending_llm_response = None;
        self.st.step_open = false;
        if let Some(msg) = degrade {
            self.st.snap.state = RunStatus::Degraded;
            self.st.snap.final_text = msg;
        }
        self.snapshot().await?;
        if self.st.snap.state == RunStatus::Degraded {
            return self.finish().await.map(Some);
        }
        Ok(None)
    }

    /// Suspend the run after a retryable model failure `e`: a snapshot of the open step in
    /// state `suspended`, naming the reason and the time before which a resume is pointless,
    /// made durable; nothing terminal. A resume redoes the step's model turn.
    async fn suspend(&mut self, e: Error) -> Result<Outcome> {
        let attempt = self.st.suspensions_before + 1;
        let now_ms = self.clock.clock().now_ms();
        let backoff = self
            .suspension_backoff(attempt)
            .max(e.retry_after().unwrap_or_default());
        let not_before_ms =
            now_ms.saturating_add(u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX));
        let reason = format!("LLM call failed: {}", e.message());
        tracing::warn!(run = %self.ckpt.run, attempt, not_before_ms, "model unavailable; run suspended: {reason}");
        self.ckpt.mark(MarkState::Suspended, not_before_ms).await?;
        self.st.snap.state = RunStatus::Suspended;
        self.st.step_open = true;
        self.st.suspension = Some(Suspension {
            reason: reason.clone(),
            error_kind: e.kind().as_str().to_owned(),
            not_before_ms,
            attempt,
        });
        self.snapshot().await?;
        self.ckpt.flush().await?;
        let step = self.st.snap.step;
        self.events.emit(|| RunEvent::Suspended {
            step,
            not_before_ms,
        });
        Ok(Outcome::Suspended {
            reason,
            not_before_ms,
        })
    }

    /// The backoff of the run's `attempt`th consecutive suspension: the runner's
    /// [`RunnerConfig::suspension_backoff`](super::RunnerConfig::suspension_backoff), doubled
    /// for each earlier one, at most [`MAX_SUSPENSION_BACKOFF`].
    fn suspension_backoff(&self, attempt: u64) -> Duration {
        let doublings = u32::try_from(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(20);
        self.backoff
            .saturating_mul(1 << doublings)
            .min(MAX_SUSPENSION_BACKOFF)
    }

    /// Leave out of `result` what its terminal record cannot hold on this store (see
    /// [`output_limit::fit_result`]); the record also carries the final text once more.
    fn fit_result(&self, result: &mut AgentResult) {
        let max = self.ckpt.store().capabilities().max_value_size;
        output_limit::fit_result(result, self.st.snap.final_text.len().saturating_mul(2), max);
    }

    /// The ids of the run, as a result names them.
    fn ids(&self) -> (String, String) {
        // `to_owned` of the `str`, not `to_string` through `Display`: exact size.
        let run = self.ckpt.run.as_str().to_owned();
        (run, self.ckpt.thread.as_str().to_owned())
    }

    /// Write the terminal record, make everything durable and return the result.
    async fn finish(&mut self) -> Result<Outcome> {
        let elapsed = self.active_ms() as f64 / 1000.0;
        // The run ends here: its records move into the result rather than being copied, and
        // go back to the run state if the terminal record is not written (for the failure
        // record `on_error` writes; outputs the fitting below left out stay left out there).
        let (run, thread) = self.ids();
        let mut result = self.st.take_result(&run, &thread, elapsed);
        self.fit_result(&mut result);
        let s = &self.st.snap;
        let payload = RunTerminalPayload {
            state: s.state.clone(),
            final_text: Some(s.final_text.clone()),
            requested_model: Some(s.requested_model.clone().unwrap_or_default()),
            normalized_model: Some(s.normalized_model.clone().unwrap_or_default()),
            provider_adapter: Some(s.provider_adapter.clone().unwrap_or_default()),
            message: None,
            terminal_result: Some(result),
            background_tools_pending: None,
            extra: Default::default(),
        };
        // Written from the payload, then the result taken back out of it (not copied).
        let record = PhasePayload::RunTerminal(Box::new(payload));
        let step = s.step;
        let written = async {
            self.ckpt.checkpoint_with(step, &record, true).await?;
            self.ckpt.flush().await
        }
        .await;
        let PhasePayload::RunTerminal(p) = record else {
            return Err(Error::unexpected("the terminal record lost its result"));
        };
        let Some(result) = p.terminal_result else {
            return Err(Error::unexpected("the terminal record lost its result"));
        };
        if let Err(e) = written {
            self.st.restore_records(result);
            return Err(e);
        }
        // The terminal record's commit closed the run's index entry and started its retention
        // (what `Store::finish_run` does): no further call.
        let st = &self.st;
        self.events.emit(|| RunEvent::Finished {
            state: st.snap.state.clone(),
        });
        Ok(Outcome::Completed(Box::new(result)))
    }

    /// After an error: record a terminal `failed`/`cancelled` record when the error ends the
    /// run for good (policy failures, budget, integrity conflicts, cancel). Errors that leave
    /// the run resumable (store outages, fencing, uncertain effects, interrupts, any error of a
    /// child run that stopped without a final outcome) write nothing.
    async fn on_error(&mut self, e: &Error) {
        // What the run queued before it stopped is made durable before the handle resolves (the
        // writer may be holding it, see `CheckpointConfig::hold`); a store that fails or hangs
        // bounds this by the flush timeout, and its error is already the run's.
        let terminal = self.terminal_state(e);
        if terminal.is_none()
            && let Some(state) = stopped_mark(e)
            && let Err(we) = self.ckpt.mark(state, 0).await
        {
            tracing::debug!(error = %we, "could not record where the stopped run stands");
        }
        if let Err(we) = self.ckpt.flush().await {
            tracing::debug!(error = %we, "could not flush the run's queued commits");
        }
        if let Some(state) = terminal {
            self.record_failure(state, e).await;
        }
        self.events.emit(|| RunEvent::Failed {
            kind: e.kind(),
            message: e.message().to_owned(),
        });
    }

    /// The terminal state error `e` ends the run in, if it ends it for good.
    fn terminal_state(&self, e: &Error) -> Option<RunStatus> {
        match e.kind() {
            // A child run stopped without a final outcome: resumable once its cause is dealt
            // with, even a `Corrupt` child (see `subagent.rs`).
            _ if self.stopped_by_child => None,
            ErrorKind::Cancelled if *self.control.borrow() == Signal::Cancel => {
                Some(RunStatus::Cancelled)
            }
            ErrorKind::Tool | ErrorKind::Llm | ErrorKind::BudgetExceeded | ErrorKind::Corrupt => {
                Some(RunStatus::Failed)
            }
            _ => None,
        }
    }

    /// Write the terminal record of a run that `e` ended in `state`, and flush it.
    async fn record_failure(&mut self, state: RunStatus, e: &Error) {
        self.st.snap.state = state.clone();
        self.st.snap.final_text = e.message().to_owned();
        let elapsed = self.active_ms() as f64 / 1000.0;
        let (run, thread) = self.ids();
        let mut result = self.st.to_result(&run, &thread, elapsed);
        self.fit_result(&mut result);
        let payload = RunTerminalPayload {
            state,
            message: Some(e.message().to_owned()),
            terminal_result: Some(result),
            background_tools_pending: Some(Vec::new()),
            ..Default::default()
        };
        let record = PhasePayload::RunTerminal(Box::new(payload));
        let w = self.ckpt.checkpoint(self.st.snap.step, record);
        if let Err(we) = w.await {
            tracing::warn!(error = %we, "could not record the terminal failure");
        } else if let Err(we) = self.ckpt.flush().await {
            tracing::warn!(error = %we, "could not flush the terminal failure");
        }
    }
}

/// The index entry's state of a run that error `e` stopped without ending it: `uncertain`
/// waits for a human to settle a call; `stopped` is for a worker to resume. `None` when this
/// runner lost the run (fenced: the newer owner writes its state).
fn stopped_mark(e: &Error) -> Option<MarkState> {
    match e.kind() {
        ErrorKind::Fenced => None,
        ErrorKind::EffectUncertain => Some(MarkState::Uncertain),
        _ => Some(MarkState::Stopped),
    }
}
