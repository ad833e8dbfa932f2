//! Fallback models and the failure policies for model and tool failures (AFK Python's policy
//! names mapped onto ours): what each does to the run, what it records, and what resume returns.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, FailurePolicy, Outcome, ToolError};
use afk_core::schema::AgentResult;
use afk_core::{ErrorKind, MemoryStore, Result, RunId, ThreadId};
use common::{latest_terminal, resp, runner};
use serde_json::json;

fn one_answer() -> Vec<afk_core::schema::LlmResponse> {
    vec![resp(json!({"text": "hello", "tool_calls": []}))]
}

async fn run(agent: &Agent, store: &Arc<MemoryStore>, id: &str) -> Result<Outcome> {
    runner(store.clone(), true)
        .run_with_id(
            agent,
            &ThreadId::new("t_pol").unwrap(),
            RunId::new(id).unwrap(),
            "go",
        )
        .result()
        .await
}

/// Resume a terminal run with a model that must not be asked; returns the stored result.
async fn resume_terminal(store: &Arc<MemoryStore>, id: &str) -> AgentResult {
    let llm = ScriptedLlm::new(Vec::new());
    let agent = Agent::new("a", "", "m1", llm.clone());
    let out = runner(store.clone(), true)
        .resume(
            &agent,
            &ThreadId::new("t_pol").unwrap(),
            &RunId::new(id).unwrap(),
        )
        .result()
        .await
        .unwrap();
    assert_eq!(llm.calls(), 0, "a terminal run asks no model");
    match out {
        Outcome::Completed(r) => *r,
        other => panic!("{other:?}"),
    }
}

fn completed(out: Result<Outcome>) -> AgentResult {
    match out {
        Ok(Outcome::Completed(r)) => *r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_fallback_model_answers_when_the_primary_fails() {
    let llm = ScriptedLlm::failing_for(one_answer(), vec!["m1".into()]);
    let mut agent = Agent::new("a", "", "m1", llm.clone());
    agent.fallback_models = vec!["m1".into(), "m2".into(), "m3".into()];
    let store = Arc::new(MemoryStore::new());
    let r = completed(run(&agent, &store, "run_fb").await);
    assert_eq!(r.state, "completed");
    assert_eq!(r.final_text, "hello");
    assert_eq!(r.normalized_model.as_deref(), Some("m2"));
    assert_eq!(r.requested_model.as_deref(), Some("m1"));
    // m1 once (the duplicate in the chain is skipped), m2 once, m3 never.
    assert_eq!(llm.calls(), 2);
    assert_eq!(
        r.state_snapshot.llm_calls, 1,
        "failed candidates are not model calls"
    );
}

#[tokio::test]
async fn every_candidate_failing_fails_the_run_by_default_and_resume_returns_the_failure() {
    let llm = ScriptedLlm::failing_for(one_answer(), vec!["m1".into(), "m2".into()]);
    let mut agent = Agent::new("a", "", "m1", llm.clone());
    agent.fallback_models = vec!["m2".into()];
    let store = Arc::new(MemoryStore::new());
    let err = run(&agent, &store, "run_llm_fail").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Llm);
    assert!(err.message().contains("LLM call failed"), "{err}");
    assert!(
        err.message().contains("model m2"),
        "the last error is reported: {err}"
    );
    assert_eq!(llm.calls(), 2);
    let t = latest_terminal(&store, &ThreadId::new("t_pol").unwrap(), "run_llm_fail")
        .expect("a failed terminal record");
    assert_eq!(t["payload"]["state"], "failed");
    let r = resume_terminal(&store, "run_llm_fail").await;
    assert_eq!(r.state, "failed");
    assert!(r.final_text.contains("LLM call failed"));
}

#[tokio::test]
async fn llm_degrade_and_continue_policies_degrade_the_run() {
    for (i, policy) in [FailurePolicy::Degrade, FailurePolicy::Continue]
        .into_iter()
        .enumerate()
    {
        let llm = ScriptedLlm::failing_for(one_answer(), vec!["m1".into()]);
        let mut agent = Agent::new("a", "", "m1", llm);
        agent.policies.llm = policy;
        let store = Arc::new(MemoryStore::new());
        let id = format!("run_llm_deg{i}");
        let r = completed(run(&agent, &store, &id).await);
        assert_eq!(r.state, "degraded", "{policy:?}");
        assert!(
            r.final_text.starts_with("LLM call failed: "),
            "{}",
            r.final_text
        );
        assert_eq!(resume_terminal(&store, &id).await.state, "degraded");
    }
}

/// A model calling the failing tool `bad` and the good tool `add`, then answering.
fn tool_agent(policy: FailurePolicy, counter: &InvocationCounter) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "calling", "tool_calls": [
            {"id": "b1", "tool_name": "bad", "arguments": {}},
            {"id": "a1", "tool_name": "add", "arguments": {"a": 2, "b": 3}}]})),
        resp(json!({"text": "done anyway", "tool_calls": []})),
    ]);
    let bad = ScriptedTool::new("bad", EffectPolicy::Idempotent, counter.clone(), |_| {
        Err(ToolError::new("no luck"))
    });
    let mut agent = Agent::new("a", "", "m1", llm)
        .with_tool(bad)
        .with_tool(ScriptedTool::add(counter.clone()));
    agent.policies.tool = policy;
    agent
}

#[tokio::test]
async fn tool_continue_policy_records_the_failure_and_goes_on() {
    let counter = InvocationCounter::new();
    let store = Arc::new(MemoryStore::new());
    let r = completed(
        run(
            &tool_agent(FailurePolicy::Continue, &counter),
            &store,
            "run_tc",
        )
        .await,
    );
    assert_eq!(r.state, "completed");
    assert_eq!(r.final_text, "done anyway");
    let bad = &r.tool_executions[0];
    assert!(!bad.success);
    assert_eq!(
        bad.error.as_deref(),
        Some("Error executing tool 'bad': no luck")
    );
    assert!(r.tool_executions[1].success);
}

#[tokio::test]
async fn tool_degrade_policy_ends_the_run_degraded_after_the_batch() {
    let counter = InvocationCounter::new();
    let store = Arc::new(MemoryStore::new());
    let r = completed(
        run(
            &tool_agent(FailurePolicy::Degrade, &counter),
            &store,
            "run_td",
        )
        .await,
    );
    assert_eq!(r.state, "degraded");
    assert_eq!(r.final_text, "Error executing tool 'bad': no luck");
    assert_eq!(counter.get("a1"), 1, "the rest of the batch still ran");
    assert_eq!(
        r.state_snapshot.llm_calls, 1,
        "no model call after the degraded batch"
    );
    assert_eq!(resume_terminal(&store, "run_td").await.state, "degraded");
    assert_eq!(counter.total(), 2, "resume executed nothing");
}

#[tokio::test]
async fn tool_fail_policy_fails_the_run_and_resume_returns_the_failure() {
    let counter = InvocationCounter::new();
    let store = Arc::new(MemoryStore::new());
    let err = run(&tool_agent(FailurePolicy::Fail, &counter), &store, "run_tf")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tool);
    assert_eq!(err.message(), "Error executing tool 'bad': no luck");
    let t = latest_terminal(&store, &ThreadId::new("t_pol").unwrap(), "run_tf").unwrap();
    assert_eq!(t["payload"]["state"], "failed");
    let r = resume_terminal(&store, "run_tf").await;
    assert_eq!(r.state, "failed");
    assert_eq!(counter.total(), 2, "resume executed nothing");
}
