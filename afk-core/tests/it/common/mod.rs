//! Shared pieces of the runner tests: the three-step crash scenario (a parallel batch with an
//! idempotent and an at-most-once tool, then an echo, then the answer) and result comparison.

#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a subset

pub mod gate;
pub mod limited;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Limits, RunHandle, Runner, ToolRef};
use afk_core::schema::LlmResponse;
use afk_core::store::{RetryPolicy, Store};
use afk_core::testkit::deterministic_runner;
use afk_core::{CheckpointConfig, MemoryStore, RunId, ThreadId};
use serde_json::{Value, json};

/// Parse a scripted response.
pub fn resp(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("response")
}

/// The three-step script: `add` (idempotent) and `charge` (at-most-once, call `c2`) in
/// parallel, then `echo`, then the answer "all done".
pub fn script() -> Vec<LlmResponse> {
    vec![
        resp(
            json!({"text": "add and charge in parallel", "finish_reason": "tool_calls",
            "session_token": "s1",
            "tool_calls": [
                {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "tool_name": "charge", "arguments": {"amount": 5}}],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        ),
        resp(json!({"text": "now echo", "finish_reason": "tool_calls",
            "tool_calls": [{"id": "c3", "tool_name": "echo", "arguments": {"text": "hi"}}],
            "usage": {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}})),
        resp(
            json!({"text": "all done", "finish_reason": "stop", "tool_calls": [],
            "usage": {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}}),
        ),
    ]
}

/// `steps` answers that each call `add` once (call ids `c0`, `c1`, …, text `step <i>`), then
/// the closing answer "done".
pub fn add_script(steps: u64) -> Vec<LlmResponse> {
    let mut script: Vec<LlmResponse> = (0..steps)
        .map(|i| {
            resp(
                json!({"text": format!("step {i}"), "tool_calls": [{"id": format!("c{i}"),
                "tool_name": "add", "arguments": {"a": i, "b": 1}}]}),
            )
        })
        .collect();
    script.push(resp(json!({"text": "done", "tool_calls": []})));
    script
}

/// Limits under which a run of `steps` tool steps finishes (and no wall-time limit).
pub fn limits_for(steps: u64) -> Limits {
    Limits::default()
        .with_max_steps(steps + 5)
        .with_max_llm_calls(steps + 5)
        .with_max_tool_calls(steps + 5)
        .with_max_wall_time_ms(None)
}

/// The agent of the scenario with its model (answering from `llm`).
pub fn agent_with(llm: Arc<ScriptedLlm>, counter: &InvocationCounter) -> Agent {
    let charge = ScriptedTool::new("charge", EffectPolicy::AtMostOnce, counter.clone(), |a| {
        Ok(json!({"charged": a.get("amount").cloned().unwrap_or(Value::Null)}))
    });
    Agent::new("crashy", "Be careful.", "m1", llm)
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_tool(ScriptedTool::echo(counter.clone()))
        .with_tool(charge)
}

/// The at-most-once `charge` tool: returns `{"charged": <amount>}`.
pub fn charge(counter: &InvocationCounter) -> ToolRef {
    ScriptedTool::new("charge", EffectPolicy::AtMostOnce, counter.clone(), |a| {
        Ok(json!({"charged": a["amount"].clone()}))
    })
}

/// An agent that pays with `charge` (call `c1`, amount 5), then answers "paid".
pub fn payer(charge: ToolRef) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "charging", "tool_calls": [
            {"id": "c1", "tool_name": "charge", "arguments": {"amount": 5}}]})),
        resp(json!({"text": "paid", "tool_calls": []})),
    ]);
    Agent::new("payer", "Pay.", "m1", llm).with_tool(charge)
}

/// A runner with a manual clock, sequential ids, no retries; `async_writes` as given.
pub fn runner(store: Arc<dyn Store>, async_writes: bool) -> Runner {
    let checkpoint = CheckpointConfig::default()
        .with_async_writes(async_writes)
        .with_retry(RetryPolicy::none());
    deterministic_runner(store, checkpoint)
}

/// What must be equal between a crashed-and-resumed run and the uncrashed one.
#[allow(unused_imports)] // each test binary uses a subset
pub use afk_core::runner::fixture_check::result_essence as essence;

/// Call ids whose effect row holds a durable successful result in `store`.
pub fn durable_results(store: &MemoryStore, thread: &ThreadId) -> Vec<String> {
    store
        .snapshot(thread)
        .into_iter()
        .filter(|(k, _)| k.starts_with("effect:"))
        .filter_map(|(k, v)| {
            let row: Value = serde_json::from_slice(&v).ok()?;
            let done = row
                .get("status")
                .and_then(Value::as_str)
                .is_none_or(|s| s == "done");
            (done && row.get("success") == Some(&Value::Bool(true)))
                .then(|| k.rsplit(':').next().unwrap_or("").to_owned())
        })
        .collect()
}

/// Every effect row of the thread in `store`, by key (in key order), as JSON.
pub fn effect_rows(store: &MemoryStore, thread: &ThreadId) -> Vec<(String, Value)> {
    store
        .snapshot(thread)
        .into_iter()
        .filter(|(k, _)| k.starts_with("effect:"))
        .map(|(k, v)| {
            (
                k,
                serde_json::from_slice(&v).expect("an effect row is JSON"),
            )
        })
        .collect()
}

/// Whether the effect row of call `id` in `store` is an intent without a result.
pub fn lone_intent(store: &MemoryStore, thread: &ThreadId, id: &str) -> bool {
    store.snapshot(thread).iter().any(|(key, v)| {
        key.ends_with(&format!(":{id}"))
            && serde_json::from_slice::<Value>(v)
                .is_ok_and(|row| row.get("status") == Some(&json!("intent")))
    })
}

/// Continue `run` after a crash: resume it, or, when the crash came before its first commit
/// (no latest pointer: nothing of the run exists), start it under the SAME run id.
pub fn resume_or_start(
    runner: &Runner,
    agent: &Agent,
    store: &MemoryStore,
    thread: &ThreadId,
    run: &RunId,
) -> RunHandle {
    let latest = format!("checkpoint:{run}:latest");
    if store.snapshot(thread).contains_key(&latest) {
        runner.resume(agent, thread, run)
    } else {
        runner.run_with_id(agent, thread, run.clone(), "go")
    }
}

/// Whether any runtime snapshot of the thread is durable.
pub fn has_snapshot(store: &MemoryStore, thread: &ThreadId) -> bool {
    store
        .snapshot(thread)
        .keys()
        .any(|key| key.ends_with(":runtime_state"))
}

/// The `run_terminal` record the latest pointer of `run` names, as JSON, if it is one.
pub fn latest_terminal(store: &MemoryStore, thread: &ThreadId, run: &str) -> Option<Value> {
    let snap = store.snapshot(thread);
    let bytes = snap.get(&format!("checkpoint:{run}:latest"))?;
    let v: Value = serde_json::from_slice(bytes).ok()?;
    (v.get("phase") == Some(&json!("run_terminal"))).then_some(v)
}
