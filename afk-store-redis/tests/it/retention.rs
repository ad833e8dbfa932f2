//! Retention that respects a run's state, through the runner: with a per-run TTL, a run paused
//! for a human longer than the TTL is still there and resumes; once it has finished, it
//! expires. Skipped like the others when `AFK_TEST_REDIS_URL` is unset.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Decision, GateDecision, Outcome, Runner, RunnerConfig, ToolGate};
use afk_core::schema::{LlmResponse, ToolCall};
use afk_core::store::{Store, latest_key};
use afk_core::{RunId, ThreadId};
use common::*;
use serde_json::json;

/// Every call needs a human's approval.
#[derive(Debug)]
struct AskFirst;

impl ToolGate for AskFirst {
    fn decide(&self, _step: u64, _call: &ToolCall) -> GateDecision {
        GateDecision::RequestApproval("a human signs off".to_owned())
    }
}

fn agent(counter: &InvocationCounter) -> Agent {
    let answers: Vec<LlmResponse> = [
        json!({"text": "adding", "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]}),
        json!({"text": "done", "tool_calls": []}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("answer"))
    .collect();
    Agent::new("keeper", "Add.", "m", ScriptedLlm::new(answers))
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_gate(Arc::new(AskFirst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_outlives_the_ttl_and_resumes_and_a_finished_one_expires() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(connect(config(&url).with_ttl_s(1)).await);
    let runner = Runner::new(store.clone(), RunnerConfig::default());
    let counter = InvocationCounter::new();
    let (thread, run): (ThreadId, RunId) = (common::thread("keep"), common::run("r_keep"));
    let out = runner
        .run_with_id(&agent(&counter), &thread, run.clone(), "go")
        .result()
        .await
        .expect("run");
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");

    // Paused for twice the TTL: still all there.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(
        store
            .get(&thread, &latest_key(&run))
            .await
            .expect("get")
            .is_some()
    );
    let out = runner
        .resume_with_decision(&agent(&counter), &thread, &run, Decision::Approve)
        .result()
        .await
        .expect("resume");
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(counter.get("c1"), 1);

    // Finished: gone after the TTL, every key of it.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(
        store
            .get(&thread, &latest_key(&run))
            .await
            .expect("get")
            .is_none()
    );
    let page = store.list(&thread, "", None, 100).await.expect("list");
    assert!(page.keys.is_empty(), "left after expiry: {:?}", page.keys);
}

/// Redis expires finished runs itself: the sweep, which needs an index of finished runs, is
/// `Unsupported` there, with nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_sweep_is_unsupported_where_the_ttl_does_the_job() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(connect(config(&url).with_ttl_s(60)).await);
    afk_conformance::retention::sweep_deletes_finished_runs_and_nothing_else(store)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
