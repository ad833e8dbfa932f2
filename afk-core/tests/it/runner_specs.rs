//! What a model request carries: the run's transcript as it is at the call, and the agent's
//! tool specs, asked from each tool once per run (not once per step and per tool call).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{
    Agent, LlmClient, LlmRequest, Outcome, Runner, RunnerConfig, Tool, ToolContext, ToolError,
    ToolSpec,
};
use afk_core::schema::LlmResponse;
use afk_core::{MemoryStore, RunId, ThreadId};

const STEPS: u64 = 4;

/// A tool that counts how often it is asked for its spec.
#[derive(Debug)]
struct CountingSpec {
    inner: Arc<ScriptedTool>,
    asked: AtomicU64,
}

#[async_trait]
impl Tool for CountingSpec {
    fn spec(&self) -> ToolSpec {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.inner.spec()
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.inner.call(ctx, args).await
    }
}

/// A model that records what each request offered: the tool names and the message count.
#[derive(Debug)]
struct Recording {
    inner: Arc<ScriptedLlm>,
    seen: Mutex<Vec<(Vec<String>, usize)>>,
}

#[async_trait]
impl LlmClient for Recording {
    fn provider(&self) -> String {
        self.inner.provider()
    }
    async fn complete(&self, request: LlmRequest) -> afk_core::Result<LlmResponse> {
        let names = request.tools.iter().map(|s| s.name.clone()).collect();
        self.seen
            .lock()
            .unwrap()
            .push((names, request.messages.len()));
        self.inner.complete(request).await
    }
}

#[tokio::test]
async fn specs_are_asked_once_per_run_and_offered_to_every_model_call() {
    let script = common::add_script(STEPS);
    let llm = Arc::new(Recording {
        inner: ScriptedLlm::new(script),
        seen: Mutex::new(Vec::new()),
    });
    let tool = Arc::new(CountingSpec {
        inner: ScriptedTool::add(InvocationCounter::new()),
        asked: AtomicU64::new(0),
    });
    let mut agent = Agent::new("specs", "Add.", "scripted-1", llm.clone()).with_tool(tool.clone());
    agent.limits = common::limits_for(STEPS);
    let asked_before = tool.asked.load(Ordering::SeqCst);

    let runner = Runner::new(Arc::new(MemoryStore::new()), RunnerConfig::default());
    let out = runner
        .run_with_id(
            &agent,
            &ThreadId::new("t").unwrap(),
            RunId::new("r").unwrap(),
            "go",
        )
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");

    assert_eq!(
        tool.asked.load(Ordering::SeqCst) - asked_before,
        1,
        "a run of {STEPS} tool steps asks its tool for its spec once"
    );
    let seen = llm.seen.lock().unwrap().clone();
    assert_eq!(seen.len() as u64, STEPS + 1, "{seen:?}");
    for (i, (names, messages)) in seen.iter().enumerate() {
        assert_eq!(names, &["add".to_owned()], "request {i}");
        // System and user, then an assistant and a tool message per step before it.
        assert_eq!(
            *messages,
            2 + 2 * i,
            "request {i} sees the transcript as it was"
        );
    }
}
