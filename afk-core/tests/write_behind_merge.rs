//! The write-behind writer merges a run's queued commits: a scripted run of `n` tool steps on a
//! store with network-like latency makes a few commits per step in async mode, against about
//! eleven in sync mode, and the result is the same. Counted at the store, per tool step.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Limits, Outcome, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::FaultStore;
use afk_core::store::Op;
use afk_core::{CheckpointConfig, MemoryStore, RunId, Store, ThreadId};
use serde_json::json;

const STEPS: u64 = 10;

fn agent() -> Agent {
    let r = |v| serde_json::from_value::<LlmResponse>(v).unwrap();
    let mut script: Vec<LlmResponse> = (0..STEPS)
        .map(|i| {
            r(
                json!({"text": format!("step {i}"), "tool_calls": [{"id": format!("c{i}"),
                "tool_name": "add", "arguments": {"a": i, "b": 1}}]}),
            )
        })
        .collect();
    script.push(r(json!({"text": "done", "tool_calls": []})));
    let mut agent = Agent::new("merge", "Add.", "scripted-1", ScriptedLlm::new(script))
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    agent.limits = Limits::default()
        .with_max_steps(STEPS + 5)
        .with_max_llm_calls(STEPS + 5)
        .with_max_tool_calls(STEPS + 5)
        .with_max_wall_time_ms(None);
    agent
}

/// Runs the agent on a store with `latency` per call; returns the final text, the commits the
/// store applied and the store calls that carried them (`commit` + `commit_batch`).
async fn run(async_writes: bool) -> (String, u64, u64) {
    let fault = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    fault.set_latency(Duration::from_millis(1));
    let runner = Runner::new(
        fault.clone(),
        RunnerConfig::default()
            .with_checkpoint(CheckpointConfig::default().with_async_writes(async_writes)),
    );
    let out = runner
        .run_with_id(
            &agent(),
            &ThreadId::new("t_merge").unwrap(),
            RunId::new("run_merge").unwrap(),
            "go",
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("not completed: {out:?}")
    };
    let calls = if async_writes {
        fault.calls(Op::CommitBatch)
    } else {
        fault.calls(Op::Commit)
    };
    (r.final_text, fault.persisted_commits(), calls)
}

#[tokio::test(start_paused = true)]
async fn async_writes_merge_a_steps_commits() {
    let (text_sync, commits_sync, calls_sync) = run(false).await;
    let (text_async, commits_async, calls_async) = run(true).await;
    assert_eq!(text_sync, text_async);
    let per_step = |n: u64| n as f64 / STEPS as f64;
    eprintln!(
        "commits per tool step: sync {:.1} ({:.1} calls), async {:.1} ({:.1} calls)",
        per_step(commits_sync),
        per_step(calls_sync),
        per_step(commits_async),
        per_step(calls_async)
    );
    assert!(
        per_step(commits_sync) >= 8.0,
        "sync writes every commit: {commits_sync}"
    );
    // The design's floor is one wait per tool step (the barrier before the side effect); one
    // commit may be in flight when a barrier comes, so two store calls per step, plus the
    // run's first and last.
    assert!(
        calls_async <= 2 * STEPS + 2,
        "async made {calls_async} store calls for {STEPS} steps"
    );
    assert_eq!(commits_async, calls_async, "one commit per call: one run");
}
