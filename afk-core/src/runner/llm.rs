//! The model-client contract.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::tool::ToolSpec;
use crate::error::Result;
use crate::schema::{LlmResponse, Message};

/// One request to the model.
#[derive(Debug, Clone)]
pub struct LlmRequest {
    /// The model to use (the agent's model or a fallback).
    pub model: String,
    /// The transcript so far (system, user, assistant and tool messages). Shared with the
    /// run, not copied for each request: a client that keeps it beyond the call makes the run
    /// copy its transcript once when it next grows.
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call (the agent's tools and subagents, computed once per run
    /// and shared by its requests).
    pub tools: Arc<[ToolSpec]>,
    /// Provider continuity token from the previous response, if any.
    pub session_token: Option<String>,
    /// Provider checkpoint token from the previous response, if any.
    pub checkpoint_token: Option<String>,
    /// `<run_id>:step:<n>`: the same for every attempt of one step, so a provider that
    /// deduplicates requests can answer a retried request from its cache.
    pub idempotency_key: String,
    /// The loop step of the request.
    pub step: u64,
}

/// A model client. Implementations do their own transport retries; an `Err` means this model
/// failed for this step (the runner then tries the agent's fallback models, then applies the
/// LLM failure policy).
#[async_trait]
pub trait LlmClient: Send + Sync + fmt::Debug {
    /// Provider id stored in `pre_llm`/`post_llm` records and results (`"openai"`, `"scripted"`).
    fn provider(&self) -> String;

    /// Answer one request.
    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse>;
}
