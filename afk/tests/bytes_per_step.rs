//! DESIGN §3.4: the bytes a step writes depend on what the step added, not on the history.
//!
//! Bytes are deterministic (a manual clock, sequential ids, sync writes), so this is a test, not
//! a benchmark: one scripted run of 1000 tool steps behind the benches' byte-counting store
//! wrapper, and step 1000 must write about what step 10 wrote.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/support/counting.rs"]
#[allow(dead_code)]
mod counting;

use std::sync::Arc;

use afk::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk::runner::{Agent, Limits, ManualClock, Outcome, Runner, RunnerConfig, SequentialIds};
use afk::schema::LlmResponse;
use afk::{CheckpointConfig, MemoryStore, RunId, Store, ThreadId};
use counting::CountingStore;
use serde_json::{Value, json};

/// `steps` model turns each asking for one `add` call, then a closing answer.
fn agent(steps: u64) -> Agent {
    let r = |v: Value| serde_json::from_value::<LlmResponse>(v).expect("scripted response");
    let mut script: Vec<LlmResponse> = (0..steps)
        .map(|i| {
            r(
                json!({"text": format!("step {i}: adding"), "finish_reason": "tool_calls",
                "tool_calls": [{"id": format!("c{i}"), "tool_name": "add",
                    "arguments": {"a": i, "b": 1}}],
                "usage": {"input_tokens": 20, "output_tokens": 8, "total_tokens": 28}}),
            )
        })
        .collect();
    script.push(r(
        json!({"text": "done", "finish_reason": "stop", "tool_calls": [],
        "usage": {"input_tokens": 20, "output_tokens": 2, "total_tokens": 22}}),
    ));
    let mut agent = Agent::new(
        "bytes",
        "Add numbers.",
        "scripted-1",
        ScriptedLlm::new(script),
    )
    .with_tool(ScriptedTool::add(InvocationCounter::new()));
    agent.limits = Limits {
        max_steps: steps + 5,
        max_llm_calls: steps + 5,
        max_tool_calls: steps + 5,
        max_wall_time_ms: None,
        ..Limits::default()
    };
    agent
}

/// Bytes step `step` wrote, leaving out the terminal record (it carries the run's result once).
fn step_bytes(store: &CountingStore, step: u64) -> (u64, Vec<(String, u64)>) {
    let kinds: Vec<(String, u64)> = store
        .step_kinds(step)
        .into_iter()
        .filter(|(k, _)| k != "checkpoint:run_terminal")
        .collect();
    let terminal: u64 = store
        .step_kinds(step)
        .iter()
        .filter(|(k, _)| k == "checkpoint:run_terminal")
        .map(|(_, b)| *b)
        .sum();
    (store.step_bytes(step) - terminal, kinds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_1000_writes_about_what_step_10_wrote() {
    const STEPS: u64 = 1000;
    let store = Arc::new(CountingStore::new(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let runner = Runner::new(
        store.clone(),
        RunnerConfig {
            clock: ManualClock::new(1_700_000_000_000),
            ids: Arc::new(SequentialIds::default()),
            checkpoint: CheckpointConfig {
                async_writes: false,
                ..CheckpointConfig::default()
            },
            ..RunnerConfig::default()
        },
    );
    let thread = ThreadId::new("bytes").unwrap();
    let out = runner
        .run_with_id(
            &agent(STEPS),
            &thread,
            RunId::new("run_bytes").unwrap(),
            "go",
        )
        .result()
        .await
        .expect("run completes");
    assert!(matches!(out, Outcome::Completed(_)), "run paused");

    let (early, early_kinds) = step_bytes(&store, 10);
    let (late, late_kinds) = step_bytes(&store, STEPS);
    println!("step 10: {early} B {early_kinds:?}");
    println!("step {STEPS}: {late} B {late_kinds:?}");
    assert!(early > 0, "step 10 wrote nothing");
    assert!(
        late * 2 <= early * 3,
        "step {STEPS} wrote {late} B, more than 1.5 x step 10's {early} B: \
         step 10 {early_kinds:?}, step {STEPS} {late_kinds:?}"
    );
}
