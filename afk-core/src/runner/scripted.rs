//! A scripted model and deterministic tools, for tests, the demo and the fixture conformance.
//!
//! [`ScriptedLlm`] follows the fixtures' `assistant_count` rule
//! (`fixtures/afk-python/README.md` §2): it answers `responses[k]`, where `k` is the number of
//! `assistant` messages in the request transcript, so a script stays valid whatever the crash
//! point and whichever snapshot a run resumes from.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::llm::{LlmClient, LlmRequest};
use super::tool::{EffectPolicy, Tool, ToolContext, ToolError, ToolSpec};
use crate::error::{Error, Result};
use crate::schema::{LlmResponse, Role};

/// A model that answers from a script by the `assistant_count` rule.
#[derive(Debug)]
pub struct ScriptedLlm {
    responses: Vec<LlmResponse>,
    calls: AtomicU64,
    fail_models: Vec<String>,
    asked: Mutex<Vec<usize>>,
}

impl ScriptedLlm {
    /// A scripted model answering `responses[k]`.
    pub fn new(responses: Vec<LlmResponse>) -> Arc<Self> {
        Arc::new(ScriptedLlm {
            responses,
            calls: AtomicU64::new(0),
            fail_models: Vec::new(),
            asked: Mutex::new(Vec::new()),
        })
    }

    /// A scripted model that fails every request for one of `fail_models` (to exercise
    /// fallback models).
    pub fn failing_for(responses: Vec<LlmResponse>, fail_models: Vec<String>) -> Arc<Self> {
        Arc::new(ScriptedLlm {
            responses,
            calls: AtomicU64::new(0),
            fail_models,
            asked: Mutex::new(Vec::new()),
        })
    }

    /// Parse a fixture's `script.responses` array (each `{text, tool_calls, usage,
    /// finish_reason, session_token}`).
    pub fn from_fixture_responses(responses: &Value) -> Result<Arc<Self>> {
        let list = responses
            .as_array()
            .ok_or_else(|| Error::invalid_input("script.responses is not an array"))?;
        let mut out = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            let resp: LlmResponse = serde_json::from_value(r.clone()).map_err(|e| {
                Error::invalid_input(format!("script.responses[{i}] is not a response: {e}"))
            })?;
            out.push(resp);
        }
        Ok(ScriptedLlm::new(out))
    }

    /// The script index `k` of every request received, in order.
    pub fn asked(&self) -> Vec<usize> {
        self.asked.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// How many requests this model received (failed ones included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    fn provider(&self) -> String {
        "scripted".to_owned()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_models.contains(&request.model) {
            return Err(Error::new(
                crate::ErrorKind::Llm,
                format!("scripted failure for model {}", request.model),
            ));
        }
        let k = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        if let Ok(mut a) = self.asked.lock() {
            a.push(k);
        }
        let mut resp = self.responses.get(k).cloned().ok_or_else(|| {
            Error::new(
                crate::ErrorKind::Llm,
                format!(
                    "script has no response #{k} ({} scripted)",
                    self.responses.len()
                ),
            )
        })?;
        resp.model = Some(request.model.clone());
        Ok(resp)
    }
}

/// Real executions per tool call id, shared by the scripted tools of one test.
#[derive(Debug, Clone, Default)]
pub struct InvocationCounter {
    inner: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl InvocationCounter {
    /// A fresh counter.
    pub fn new() -> Self {
        Self::default()
    }

    fn bump(&self, call_id: &str) {
        if let Ok(mut m) = self.inner.lock() {
            *m.entry(call_id.to_owned()).or_insert(0) += 1;
        }
    }

    /// Executions per call id so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.inner.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Executions of one call id so far.
    pub fn get(&self, call_id: &str) -> u64 {
        self.snapshot().get(call_id).copied().unwrap_or(0)
    }

    /// Total executions.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

type ToolFn = dyn Fn(&Value) -> std::result::Result<Value, ToolError> + Send + Sync;

/// A deterministic tool built from a function, counting its executions.
pub struct ScriptedTool {
    spec: ToolSpec,
    policy: EffectPolicy,
    func: Box<ToolFn>,
    counter: InvocationCounter,
}

impl std::fmt::Debug for ScriptedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedTool")
            .field("name", &self.spec.name)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl ScriptedTool {
    /// A tool `name` computing `func(args)`, with the given effect policy.
    pub fn new(
        name: &str,
        policy: EffectPolicy,
        counter: InvocationCounter,
        func: impl Fn(&Value) -> std::result::Result<Value, ToolError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(ScriptedTool {
            spec: ToolSpec {
                name: name.to_owned(),
                description: format!("scripted tool {name}"),
                parameters: json!({"type": "object"}),
            },
            policy,
            func: Box::new(func),
            counter,
        })
    }

    /// `add`: arguments `{"a": int, "b": int}`, returns `{"result": a + b}`.
    pub fn add(counter: InvocationCounter) -> Arc<Self> {
        ScriptedTool::new("add", EffectPolicy::Idempotent, counter, |args| {
            let a = args.get("a").and_then(Value::as_i64);
            let b = args.get("b").and_then(Value::as_i64);
            match (a, b) {
                (Some(a), Some(b)) => Ok(json!({"result": a + b})),
                _ => Err(ToolError::new("arguments a and b must be integers")),
            }
        })
    }

    /// `echo`: arguments `{"text": str}`, returns `{"echo": text}`.
    pub fn echo(counter: InvocationCounter) -> Arc<Self> {
        ScriptedTool::new("echo", EffectPolicy::Idempotent, counter, |args| match args
            .get("text")
            .and_then(Value::as_str)
        {
            Some(t) => Ok(json!({"echo": t})),
            None => Err(ToolError::new("argument text must be a string")),
        })
    }
}

#[async_trait]
impl Tool for ScriptedTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn effect_policy(&self) -> EffectPolicy {
        self.policy
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> std::result::Result<Value, ToolError> {
        self.counter.bump(&ctx.tool_call_id);
        (self.func)(&args)
    }
}
