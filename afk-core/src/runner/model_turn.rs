//! One model turn: the `pre_llm` record, the call (the agent's model, then its fallbacks),
//! and the answer made durable (`post_llm` and a snapshot holding it as the step's pending
//! response, which a resume reuses rather than asking again).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use super::agent::{Agent, FailurePolicy};
use super::events::Signal;
use super::llm::LlmRequest;
use super::output_limit;
use super::persist::Checkpointer;
use super::state::{LLM_REQUEST_KEY, RunState, Stopwatch};
use super::telemetry;
use super::tool::ToolSpec;
use crate::error::{Error, ErrorKind, Result};
use crate::schema::{LlmResponse, PhasePayload, PostLlmPayload, PreLlmPayload, RunStatus};

/// What a model turn works with: the agent, the tools it offers, the run's state and writer,
/// and the caller's signal (a cancel or interrupt ends the wait on the model).
pub(crate) struct ModelTurn<'a> {
    pub(crate) agent: &'a Agent,
    pub(crate) specs: Arc<[ToolSpec]>,
    pub(crate) ckpt: &'a mut Checkpointer,
    pub(crate) st: &'a mut RunState,
    pub(crate) control: &'a watch::Receiver<Signal>,
    pub(crate) clock: &'a Stopwatch,
}

/// The model's answer, as recorded.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) resp: Arc<LlmResponse>,
    /// Its recorded size, measured on a store with a value limit.
    pub(crate) size: Option<usize>,
}

/// What asking the candidates gave: the model that answered, its answer and the answer's
/// recorded size; or, every candidate having failed, why.
type Asked = std::result::Result<(String, LlmResponse, Option<usize>), Failed>;

/// Why every candidate failed.
struct Failed {
    /// The last permanent failure (what the LLM policy sees when none was retryable).
    last: Error,
    /// The last retryable one (a rate limit, a 5xx, a timeout, a lost connection), if any
    /// candidate failed that way: then the provider may come back, and the run waits.
    retryable: Option<Error>,
}

/// How a model turn ended.
#[derive(Debug)]
pub(crate) enum Turn {
    /// A model answered; the answer is durable.
    Answer(Answer),
    /// Every candidate failed for good and the LLM policy degraded the run (its state says
    /// so).
    Degraded,
    /// Every candidate failed and at least one with a retryable error: the run suspends
    /// (nothing terminal) rather than following the LLM policy.
    Suspend(Error),
}

impl ModelTurn<'_> {
    /// Call the model (primary, then fallbacks). Permanent failures of every candidate
    /// follow the LLM policy (`Err` for `Fail`); a retryable one suspends the run.
    pub(crate) async fn run(mut self) -> Result<Turn> {
        let step = self.st.snap.step;
        let provider = self.agent.llm.provider();
        self.announce(&provider).await?;
        let key = request_key(self.ckpt.run.as_str(), step);
        match self.ask(&provider, &key).await? {
            Ok((model, resp, size)) => {
                let resp = self.accept(model, provider, resp).await?;
                Ok(Turn::Answer(Answer { resp, size }))
            }
            Err(Failed {
                retryable: Some(e), ..
            }) => Ok(Turn::Suspend(e)),
            Err(Failed { last: e, .. }) => {
                let msg = format!("LLM call failed: {}", e.message());
                match self.agent.policies.llm {
                    FailurePolicy::Fail => Err(Error::new(ErrorKind::Llm, msg).with_source(e)),
                    _ => {
                        self.st.snap.state = RunStatus::Degraded;
                        self.st.snap.final_text = msg;
                        Ok(Turn::Degraded)
                    }
                }
            }
        }
    }

    /// The `pre_llm` record. The call is counted before it is made and the count recorded, so
    /// a call whose answer a crash lost still counts against `max_llm_calls` (see `Limits`).
    async fn announce(&mut self, provider: &str) -> Result<()> {
        self.st.llm_requests = self.st.llm_requests.max(self.st.snap.llm_calls) + 1;
        let mut pre = PreLlmPayload {
            model: self.agent.model.clone(),
            provider: provider.to_owned(),
            message_count: self.st.messages.len() as u64,
            extra: Default::default(),
        };
        pre.extra.insert(
            LLM_REQUEST_KEY.to_owned(),
            Value::from(self.st.llm_requests),
        );
        let step = self.st.snap.step;
        self.ckpt.checkpoint(step, PhasePayload::PreLlm(pre)).await
    }

    /// Ask each candidate model in turn until one gives an answer the store can record.
    async fn ask(&mut self, provider: &str, key: &str) -> Result<Asked> {
        let step = self.st.snap.step;
        let max_value = self.ckpt.store().capabilities().max_value_size;
        let mut last_err = None;
        let mut retryable = None;
        for model in self.agent.candidates() {
            let req = LlmRequest {
                model: model.clone(),
                messages: Arc::clone(&self.st.messages),
                tools: Arc::clone(&self.specs),
                session_token: self.st.snap.session_token.clone(),
                checkpoint_token: self.st.snap.checkpoint_token.clone(),
                idempotency_key: key.to_owned(),
                step,
            };
            let span = telemetry::chat(provider, model, step, false);
            let mut control = self.control.clone();
            let call = self.agent.llm.complete(req).instrument(span.clone());
            let res = tokio::select! {
                r = call => r,
                () = signalled(&mut control) => {
                    Signal::check(self.control)?;
                    continue;
                }
            };
            match res {
                Ok(r) => {
                    telemetry::record_answer(&span, &r, false);
                    let r = self.stamp(r, key);
                    // An answer the store cannot record fails like a failed call: the next
                    // candidate is asked, then the LLM policy applies.
                    match recordable(&r, max_value) {
                        Ok(size) => return Ok(Ok((model.clone(), r, size))),
                        Err(msg) => {
                            tracing::warn!(model = %model, "{msg}");
                            last_err = Some(Error::new(ErrorKind::Llm, msg));
                        }
                    }
                }
                Err(e) => {
                    telemetry::record_error(&span, e.kind().as_str());
                    tracing::warn!(model = %model, error = %e, "model call failed");
                    if e.is_retryable() {
                        retryable = Some(e);
                    } else {
                        last_err = Some(e);
                    }
                }
            }
        }
        let last = last_err.unwrap_or_else(|| Error::new(ErrorKind::Llm, "no model candidate"));
        Ok(Err(Failed { last, retryable }))
    }

    /// The answer as recorded: with AFK's request id, and the run's continuity tokens where
    /// the provider gave none.
    fn stamp(&self, mut r: LlmResponse, key: &str) -> LlmResponse {
        r.request_id = Some(key.to_owned());
        if r.session_token.as_deref().is_none_or(str::is_empty) {
            r.session_token = self.st.snap.session_token.clone();
        }
        if r.checkpoint_token.as_deref().is_none_or(str::is_empty) {
            r.checkpoint_token = self.st.snap.checkpoint_token.clone();
        }
        r
    }

    /// Count the answer, record it (`post_llm`, then a snapshot holding it as the step's
    /// pending response) and check the cost budget.
    async fn accept(
        &mut self,
        model: String,
        provider: String,
        resp: LlmResponse,
    ) -> Result<Arc<LlmResponse>> {
        self.st.suspensions_before = 0;
        let snap = &mut self.st.snap;
        snap.llm_calls += 1;
        snap.usage.add(&resp.usage);
        snap.total_cost_usd += resp.billed_cost_usd();
        snap.session_token = resp.session_token.clone();
        snap.checkpoint_token = resp.checkpoint_token.clone();
        // Set once: the same model and provider answer step after step.
        if snap.normalized_model.as_ref() != Some(&model) {
            snap.normalized_model = Some(model.clone());
        }
        if snap.provider_adapter.as_ref() != Some(&provider) {
            snap.provider_adapter = Some(provider.clone());
        }
        let post = PostLlmPayload {
            model,
            provider,
            finish_reason: resp.finish_reason.clone().unwrap_or_default(),
            tool_call_count: resp.tool_calls.len() as u64,
            session_token: resp.session_token.clone().unwrap_or_default(),
            checkpoint_token: resp.checkpoint_token.clone().unwrap_or_default(),
            total_cost_usd: snap.total_cost_usd,
            extra: Default::default(),
        };
        let step = snap.step;
        self.ckpt
            .checkpoint(step, PhasePayload::PostLlm(post))
            .await?;
        let resp = Arc::new(resp);
        self.st.snap.pending_llm_response = Some(Arc::clone(&resp));
        self.st.step_open = false;
        let active_ms = self.clock.active_ms(self.st);
        self.ckpt.snapshot(self.st, active_ms).await?;
        self.st.check_cost(&self.agent.limits)?;
        Ok(resp)
    }
}

/// The model request's idempotency key (AFK's request id): `<run>:step:<step>`, built in place
/// (one per model turn), as the record keys are.
fn request_key(run: &str, step: u64) -> String {
    use std::fmt::Write as _;
    let mut key = String::with_capacity(run.len() + 26);
    key.push_str(run);
    key.push_str(":step:");
    let _ = write!(key, "{step}");
    key
}

/// On a store keeping values of at most `max` bytes: the answer's recorded size, or why it
/// cannot be recorded. Unlimited stores measure nothing.
fn recordable(r: &LlmResponse, max: Option<usize>) -> std::result::Result<Option<usize>, String> {
    let Some(max) = max else { return Ok(None) };
    let size = output_limit::answer_size(r);
    match output_limit::answer_error(size, max) {
        Some(msg) => Err(msg),
        None => Ok(Some(size)),
    }
}

/// Resolves once the run is told to stop. A run whose handle was dropped (nobody can signal
/// it any more) is never told: it runs to its end.
async fn signalled(control: &mut watch::Receiver<Signal>) {
    if control.wait_for(|s| *s != Signal::Run).await.is_err() {
        std::future::pending::<()>().await;
    }
}
