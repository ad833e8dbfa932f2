//! The fleet workload: the bench agent's script behind a model that answers after a set
//! latency, and an instant idempotent `add` tool that times how long its step waited between
//! the model's answer and the tool call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use afk::runner::scripted::ScriptedLlm;
use afk::runner::{
    Agent, EffectPolicy, LlmClient, LlmRequest, Tool, ToolContext, ToolError, ToolSpec,
};
use afk::schema::LlmResponse;
use async_trait::async_trait;
use serde_json::{Value, json};

/// What the model and the tool share: when each run's model last answered, and the waits.
#[derive(Debug, Default)]
pub struct Clocks {
    answered: Mutex<HashMap<String, Instant>>,
    /// Microseconds from a model answer to the tool call of the same step, one per tool call.
    waits_us: Mutex<Vec<u64>>,
    /// Tool calls made.
    pub tool_calls: AtomicU64,
    /// Model calls answered.
    pub model_calls: AtomicU64,
}

impl Clocks {
    fn answered(&self, run: &str) {
        if let Ok(mut m) = self.answered.lock() {
            m.insert(run.to_owned(), Instant::now());
        }
    }

    fn called(&self, run: &str) {
        let now = Instant::now();
        self.tool_calls.fetch_add(1, Ordering::Relaxed);
        let since = self.answered.lock().ok().and_then(|mut m| m.remove(run));
        if let (Some(t), Ok(mut w)) = (since, self.waits_us.lock()) {
            w.push(now.duration_since(t).as_micros() as u64);
        }
    }

    /// The waits recorded so far, sorted.
    pub fn waits(&self) -> Vec<u64> {
        let mut w = self.waits_us.lock().map(|w| w.clone()).unwrap_or_default();
        w.sort_unstable();
        w
    }
}

/// The scripted model, answering after `latency`.
#[derive(Debug)]
struct SlowModel {
    inner: Arc<ScriptedLlm>,
    latency: Duration,
    clocks: Arc<Clocks>,
}

#[async_trait]
impl LlmClient for SlowModel {
    fn provider(&self) -> String {
        "scripted".to_owned()
    }

    async fn complete(&self, request: LlmRequest) -> afk::Result<LlmResponse> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        // The run id is the idempotency key's head (`<run_id>:step:<n>`).
        let run = request
            .idempotency_key
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        let answer = self.inner.complete(request).await;
        self.clocks.model_calls.fetch_add(1, Ordering::Relaxed);
        self.clocks.answered(&run);
        answer
    }
}

/// `add`, instant and idempotent, noting when it is called.
#[derive(Debug)]
struct TimedAdd {
    clocks: Arc<Clocks>,
}

#[async_trait]
impl Tool for TimedAdd {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "add".into(),
            description: "add two integers".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::Idempotent
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.clocks.called(&ctx.run_id);
        let a = args.get("a").and_then(Value::as_i64).unwrap_or(0);
        let b = args.get("b").and_then(Value::as_i64).unwrap_or(0);
        Ok(json!({"result": a + b}))
    }
}

/// The bench agent of `steps` tool steps (`benches/support`'s script), its model answering
/// after `latency`, its tool timing the store wait into `clocks`.
pub fn agent(steps: u64, latency: Duration, clocks: &Arc<Clocks>) -> Agent {
    let model = SlowModel {
        inner: ScriptedLlm::new(crate::support::script(steps)),
        latency,
        clocks: clocks.clone(),
    };
    let tool = TimedAdd {
        clocks: clocks.clone(),
    };
    let mut agent = Agent::new("fleet", "Add numbers.", "scripted-1", Arc::new(model))
        .with_tool(Arc::new(tool));
    agent.limits = crate::support::limits(steps);
    agent
}
