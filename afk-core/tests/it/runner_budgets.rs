//! Each budget stops the run with `BudgetExceeded`, writes a `failed` terminal record that
//! resume returns without executing anything, and stops where the budget says.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, ManualClock, Outcome, Runner};
use afk_core::schema::LlmResponse;
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{latest_terminal, resp};
use serde_json::json;

/// Three steps: two `add` calls, one more `add`, then the answer; each answer costs 0.4 USD.
fn script() -> Vec<LlmResponse> {
    vec![
        resp(json!({"text": "two adds", "cost_usd": 0.4, "tool_calls": [
            {"id": "a1", "tool_name": "add", "arguments": {"a": 1, "b": 1}},
            {"id": "a2", "tool_name": "add", "arguments": {"a": 2, "b": 2}}]})),
        resp(json!({"text": "one more", "cost_usd": 0.4, "tool_calls": [
            {"id": "a3", "tool_name": "add", "arguments": {"a": 3, "b": 3}}]})),
        resp(json!({"text": "done", "cost_usd": 0.4, "tool_calls": []})),
    ]
}

struct Case {
    store: Arc<MemoryStore>,
    llm: Arc<ScriptedLlm>,
    counter: InvocationCounter,
    clock: Arc<ManualClock>,
    agent: Agent,
}

fn case() -> Case {
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let clock = ManualClock::new(START_MS);
    let c = clock.clone();
    // `add` takes 700 ms of (manual) active time.
    let slow_add = ScriptedTool::new("add", EffectPolicy::Idempotent, counter.clone(), move |a| {
        c.advance_ms(700);
        let x = a["a"].as_i64().unwrap_or(0) + a["b"].as_i64().unwrap_or(0);
        Ok(json!({"result": x}))
    });
    let agent = Agent::new("budget", "", "m1", llm.clone()).with_tool(slow_add);
    Case {
        store: Arc::new(MemoryStore::new()),
        llm,
        counter,
        clock,
        agent,
    }
}

/// Run to the budget error; check the record, the message, and that resume returns the stored
/// failure without executing anything.
async fn exceeds(c: &Case, id: &str, message: &str) {
    let runner = Runner::new(
        c.store.clone(),
        deterministic_config().with_clock(c.clock.clone()),
    );
    let thread = ThreadId::new("t_budget").unwrap();
    let run = RunId::new(id).unwrap();
    let err = runner
        .run_with_id(&c.agent, &thread, run.clone(), "go")
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BudgetExceeded, "{err}");
    assert_eq!(err.message(), message);
    let t = latest_terminal(&c.store, &thread, id).expect("a terminal record");
    assert_eq!(t["payload"]["state"], "failed");
    let (asked, ran) = (c.llm.calls(), c.counter.total());
    let out = runner
        .resume(&c.agent, &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        (r.state.as_str(), r.final_text.as_str()),
        ("failed", message)
    );
    assert_eq!(
        (c.llm.calls(), c.counter.total()),
        (asked, ran),
        "resume ran nothing"
    );
}

#[tokio::test]
async fn max_steps() {
    let mut c = case();
    c.agent.limits.max_steps = 2;
    exceeds(&c, "run_steps", "Exceeded max_steps=2").await;
    assert_eq!(c.llm.calls(), 2, "the third step never started");
}

#[tokio::test]
async fn max_llm_calls() {
    let mut c = case();
    c.agent.limits.max_llm_calls = 1;
    exceeds(&c, "run_llm", "Exceeded max_llm_calls=1").await;
    assert_eq!(c.llm.calls(), 1);
    assert_eq!(c.counter.total(), 2, "the first batch ran");
}

#[tokio::test]
async fn max_tool_calls() {
    let mut c = case();
    c.agent.limits.max_tool_calls = 1;
    exceeds(&c, "run_tools", "Exceeded max_tool_calls=1").await;
    // Checked at step start: the first batch (two calls) ran, the second step did not start.
    assert_eq!(c.counter.total(), 2);
    assert_eq!(c.llm.calls(), 1);
}

#[tokio::test]
async fn max_cost_is_checked_right_after_the_model_call() {
    let mut c = case();
    c.agent.limits.max_cost_usd = Some(0.5);
    exceeds(&c, "run_cost", "Exceeded max_total_cost_usd=0.5").await;
    assert_eq!(c.llm.calls(), 2);
    assert_eq!(
        c.counter.get("a3"),
        0,
        "the over-budget answer's tool never ran"
    );
}

#[tokio::test]
async fn max_wall_time_counts_active_time() {
    let mut c = case();
    // Two adds of 700 ms each in step 1: 1.4 s active > 1 s.
    c.agent.limits.max_wall_time_ms = Some(1_000);
    exceeds(&c, "run_wall", "Exceeded max_wall_time_s=1").await;
    assert_eq!(c.llm.calls(), 1);
}

/// Only a finite, positive `cost_usd` counts: a negative, a non-numeric or a missing cost
/// adds nothing, so a bad value from a client cannot lower or poison the total.
#[tokio::test]
async fn only_a_positive_finite_answer_cost_counts_toward_the_budget() {
    let answers = [
        json!({"text": "a", "cost_usd": -5.0}),
        json!({"text": "b", "cost_usd": "0.3"}),
        json!({"text": "c"}),
        json!({"text": "d", "cost_usd": 0.25}),
    ];
    let costs: Vec<f64> = answers
        .iter()
        .map(|a| resp(a.clone()).billed_cost_usd())
        .collect();
    assert_eq!(costs, [0.0, 0.0, 0.0, 0.25]);
    let r = resp(json!({"text": "d", "cost_usd": 0.25}));
    let back = serde_json::to_value(&r).unwrap();
    assert_eq!(
        back["cost_usd"],
        json!(0.25),
        "the cost is kept in the record"
    );
    let none = serde_json::to_value(resp(json!({"text": "c"}))).unwrap();
    assert!(
        none.get("cost_usd").is_none(),
        "no key when there is no cost: {none}"
    );
}
