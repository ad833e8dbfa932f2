//! The tool contract: what the runner needs to know about a tool and how it calls it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

/// What re-running a tool after a crash means, declared by the tool.
///
/// Before a tool runs, the runner makes its intent durable; if a crash leaves an intent without
/// a result, the policy decides what resume does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectPolicy {
    /// Running the tool twice with the same [`ToolContext::idempotency_key`] has the effect of
    /// running it once: resume re-runs it with the same key.
    Idempotent,
    /// The effect must not happen twice: resume stops with
    /// [`ErrorKind::EffectUncertain`](crate::ErrorKind::EffectUncertain) and a human decides.
    AtMostOnce,
}

/// Everything a tool gets to know about the call it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// The run the call belongs to.
    pub run_id: String,
    /// The thread of the run.
    pub thread_id: String,
    /// The model-assigned id of this call.
    pub tool_call_id: String,
    /// The loop step the call belongs to.
    pub step: u64,
    /// Deterministic key `<run>:<step>:<call_id>`: the same on every re-execution of this call,
    /// so an idempotent tool can pass it to the system it acts on.
    pub idempotency_key: String,
}

impl ToolContext {
    /// The idempotency key of a call: `<run>:<step>:<call_id>`.
    pub fn idempotency_key_for(run_id: &str, step: u64, call_id: &str) -> String {
        format!("{run_id}:{step}:{call_id}")
    }
}

/// A failed tool call, as the tool reports it. The runner turns it into a failed tool record
/// (`Error executing tool '<name>': <message>`) and applies the agent's tool failure policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// Human-readable reason.
    pub message: String,
}

impl ToolError {
    /// A tool error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

/// The description of a tool the model sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Unique name within an agent.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// A tool an agent can call.
///
/// Contract: `call` may run concurrently with other calls of the same batch; it must not
/// block the executor. A panic inside `call` is caught by the runner and reported as a failed
/// call, never a hang.
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// Name, JSON schema and description. Asked for once per run (per process that runs or
    /// resumes it): the runner offers the same specs to every model call of the run.
    fn spec(&self) -> ToolSpec;

    /// What resume does when this tool's intent is durable but its result is not.
    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::Idempotent
    }

    /// Run the tool with the model's arguments.
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError>;
}

/// A shared tool handle.
pub type ToolRef = Arc<dyn Tool>;
