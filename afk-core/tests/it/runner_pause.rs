//! Human in the loop: a run paused for approval is continued by a new Runner on the same store,
//! days later, without the pause counting against the wall-time budget.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{
    Agent, Decision, EffectPolicy, GateDecision, ManualClock, Outcome, Runner, ToolGate,
};
use afk_core::schema::{LlmResponse, ToolCall};
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{MemoryStore, RunId, ThreadId, store::Store};
use serde_json::{Value, json};

#[derive(Debug)]
struct ApproveCharges;

impl ToolGate for ApproveCharges {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == "charge" {
            GateDecision::RequestApproval("charging a card needs a human".into())
        } else {
            GateDecision::Allow
        }
    }
}

fn agent(counter: &InvocationCounter) -> (Agent, Arc<ScriptedLlm>) {
    let r = |v: Value| serde_json::from_value::<LlmResponse>(v).expect("response");
    let llm = ScriptedLlm::new(vec![
        r(json!({"text": "charging", "tool_calls": [
            {"id": "c1", "tool_name": "charge", "arguments": {"amount": 5}}]})),
        r(json!({"text": "charged", "tool_calls": []})),
    ]);
    let charge = ScriptedTool::new("charge", EffectPolicy::AtMostOnce, counter.clone(), |a| {
        Ok(json!({"charged": a["amount"].clone()}))
    });
    let mut a = Agent::new("payer", "Pay.", "m", llm.clone())
        .with_tool(charge)
        .with_gate(Arc::new(ApproveCharges));
    a.limits.max_wall_time_ms = Some(300_000);
    (a, llm)
}

fn runner(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Runner {
    Runner::new(store, deterministic_config().with_clock(clock))
}

async fn paused_run(decision: Decision) -> (Outcome, InvocationCounter, u64) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let thread = ThreadId::new("t_pause").unwrap();
    let run = RunId::new("run_pause").unwrap();
    let counter = InvocationCounter::new();

    let (a1, llm1) = agent(&counter);
    let first = runner(store.clone(), clock.clone())
        .run_with_id(&a1, &thread, run.clone(), "pay 5")
        .result()
        .await
        .unwrap();
    let Outcome::Paused { request } = first else {
        panic!("expected a pause, got {first:?}")
    };
    assert_eq!(request.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(request.payload["tool_name"], json!("charge"));
    assert_eq!(counter.get("c1"), 0, "nothing runs before the decision");
    assert_eq!(llm1.calls(), 1);

    // Three days later, another process: a plain resume only reports the pause again.
    clock.advance_ms(3 * 24 * 3600 * 1000);
    let (a2, llm2) = agent(&counter);
    let again = runner(store.clone(), clock.clone())
        .resume(&a2, &thread, &run)
        .result()
        .await
        .unwrap();
    assert!(matches!(again, Outcome::Paused { .. }), "{again:?}");
    assert_eq!(llm2.calls(), 0);

    let (a3, llm3) = agent(&counter);
    let out = runner(store.clone(), clock.clone())
        .resume_with_decision(&a3, &thread, &run, decision)
        .result()
        .await
        .unwrap();
    (out, counter, llm3.calls())
}

#[tokio::test]
async fn approved_pause_continues_in_a_new_runner_and_the_pause_is_not_billed() {
    let (out, counter, llm_calls) = paused_run(Decision::Approve).await;
    let Outcome::Completed(r) = out else {
        panic!("expected completion, got {out:?}")
    };
    assert_eq!(r.state, "completed");
    assert_eq!(r.final_text, "charged");
    assert_eq!(counter.get("c1"), 1, "the approved call ran exactly once");
    assert_eq!(
        llm_calls, 1,
        "the saved first answer is reused; only the final one is asked"
    );
    assert!(
        r.state_snapshot.elapsed_s < 300.0,
        "active time only: {}",
        r.state_snapshot.elapsed_s
    );
    assert_eq!(r.tool_executions.len(), 1);
    assert!(r.tool_executions[0].success);
}

#[tokio::test]
async fn denied_pause_records_a_failed_call_and_the_run_goes_on() {
    let (out, counter, _) = paused_run(Decision::Deny("not today".into())).await;
    let Outcome::Completed(r) = out else {
        panic!("expected completion, got {out:?}")
    };
    assert_eq!(counter.get("c1"), 0, "a denied call never runs");
    assert_eq!(r.final_text, "charged");
    assert!(!r.tool_executions[0].success);
    assert!(
        r.tool_executions[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("not today")
    );
}
