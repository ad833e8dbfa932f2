//! `Runner::stats`: the checkpoint counters move as runs write, the durable watermark reaches
//! the last submitted commit at every barrier (before each side effect) and after the terminal
//! flush, it lags while a write is in flight, and retries are counted.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Runner, RunnerStats};
use afk_core::store::{FaultStore, Op, RetryPolicy, Store};
use afk_core::testkit::deterministic_runner;
use afk_core::{CheckpointConfig, ErrorKind, MemoryStore, ThreadId};
use common::{agent_with, runner, script};
use serde_json::{Value, json};

fn thread() -> ThreadId {
    ThreadId::new("t-stats").unwrap()
}

/// The three-step scenario whose `echo` tool records `Runner::stats()` when it runs.
fn recording_agent(
    llm: Arc<ScriptedLlm>,
    counter: &InvocationCounter,
    runner: Arc<OnceLock<Runner>>,
    seen: Arc<Mutex<Vec<RunnerStats>>>,
) -> Agent {
    let echo = ScriptedTool::new(
        "echo",
        EffectPolicy::Idempotent,
        counter.clone(),
        move |a| {
            if let Some(r) = runner.get() {
                seen.lock().unwrap().push(r.stats());
            }
            Ok(json!({"text": a.get("text").cloned().unwrap_or(Value::Null)}))
        },
    );
    let charge = ScriptedTool::new("charge", EffectPolicy::AtMostOnce, counter.clone(), |_| {
        Ok(json!({"charged": true}))
    });
    Agent::new("stats", "Count.", "m1", llm)
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_tool(echo)
        .with_tool(charge)
}

#[tokio::test]
async fn stats_move_as_runs_write_and_the_watermark_reaches_every_barrier_and_the_end() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = runner(store, true);
    assert_eq!(r.stats(), RunnerStats::default(), "no run yet");

    let cell = Arc::new(OnceLock::new());
    cell.set(r.clone()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let counter = InvocationCounter::new();
    let agent = recording_agent(
        ScriptedLlm::new(script()),
        &counter,
        cell.clone(),
        seen.clone(),
    );
    r.run(&agent, &thread(), "go").result().await.unwrap();

    // Inside the tool: the barrier before the side effect made everything submitted durable.
    let inside = seen.lock().unwrap().clone();
    assert_eq!(inside.len(), 1, "echo ran once");
    let at_tool = inside[0];
    assert!(at_tool.submitted > 0);
    assert_eq!(at_tool.durable, at_tool.submitted, "barrier: {at_tool:?}");
    assert_eq!(at_tool.queued, 0, "{at_tool:?}");

    // After the terminal flush: more commits, every one durable, nothing queued.
    let first = r.stats();
    assert!(
        first.submitted > at_tool.submitted,
        "{first:?} vs {at_tool:?}"
    );
    assert_eq!(first.durable, first.submitted, "{first:?}");
    assert_eq!(first.queued, 0, "{first:?}");
    assert_eq!(first.failed, 0, "{first:?}");
    assert!(first.written >= 1 && first.batches >= 1 && first.max_batch_len >= 1);
    assert!(
        first.written + first.coalesced == first.submitted,
        "{first:?}"
    );
    assert_eq!(first.retries, 0);

    // A second run adds to the same counters (a runner-wide view).
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    r.run(&agent, &thread(), "again").result().await.unwrap();
    let second = r.stats();
    assert!(
        second.submitted > first.submitted,
        "{second:?} vs {first:?}"
    );
    assert_eq!(second.durable, second.submitted, "{second:?}");
}

#[tokio::test]
async fn sync_writes_count_each_commit_as_written_and_durable() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = runner(store, false);
    let counter = InvocationCounter::new();
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    r.run(&agent, &thread(), "go").result().await.unwrap();
    let s = r.stats();
    assert!(s.submitted > 0);
    assert_eq!(s.written, s.submitted, "{s:?}");
    assert_eq!(s.durable, s.submitted, "{s:?}");
    assert_eq!(s.batches, s.submitted, "{s:?}");
    assert_eq!(s.coalesced, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_lags_while_a_write_is_in_flight() {
    let fault = Arc::new(FaultStore::new(MemoryStore::new()));
    fault.set_latency(Duration::from_millis(20));
    let r = runner(fault.clone(), true);
    let counter = InvocationCounter::new();
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    let handle = r.run(&agent, &thread(), "go");
    let poll = {
        let r = r.clone();
        tokio::spawn(async move {
            let mut lagging = 0u64;
            for _ in 0..10_000 {
                let s = r.stats();
                assert!(s.durable <= s.submitted, "{s:?}");
                if s.durable < s.submitted {
                    lagging += 1;
                    assert!(s.queued > 0, "commits not durable are queued: {s:?}");
                }
                if s.submitted > 0 && s.durable == s.submitted && lagging > 0 {
                    return lagging;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            lagging
        })
    };
    handle.result().await.unwrap();
    assert!(poll.await.unwrap() > 0, "never saw a write in flight");
    let s = r.stats();
    assert_eq!(s.durable, s.submitted, "{s:?}");
}

#[tokio::test]
async fn retried_store_calls_are_counted() {
    let fault = Arc::new(FaultStore::new(MemoryStore::new()));
    // The first write a barrier makes itself (`Store::commit`).
    fault.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    let checkpoint = CheckpointConfig::default()
        .with_retry(RetryPolicy::default().with_initial_backoff(Duration::from_millis(1)));
    let r = deterministic_runner(fault.clone(), checkpoint);
    let counter = InvocationCounter::new();
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    r.run(&agent, &thread(), "go").result().await.unwrap();
    assert_eq!(fault.injected_failures(), 1);
    let s = r.stats();
    assert_eq!(s.retries, 1, "{s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
    assert_eq!(s.durable, s.submitted, "{s:?}");
}
