//! Retention through the runner on the reference store: a child run (a subagent's) is never
//! deleted on its own, since a parent that has not finished may still need it, and goes with
//! its parent once that one is swept; a worker with a retention sweeps finished runs and
//! keeps paused ones.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{
    Agent, Decision, GateDecision, Outcome, Runner, ToolGate, Worker, WorkerConfig, child_run_id,
    sweep_finished,
};
use afk_core::schema::ToolCall;
use afk_core::store::{Call, HookStore, Hooks, Store, StoreExt, latest_key, store_now_ms};
use afk_core::{MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{resp, runner};
use serde_json::json;

/// Catches a hang; measures nothing.
const NO_HANG: Duration = Duration::from_secs(20);

/// Asks a human before every `add`.
#[derive(Debug)]
struct AddGate;

impl ToolGate for AddGate {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == "add" {
            GateDecision::RequestApproval("adding needs approval".into())
        } else {
            GateDecision::Allow
        }
    }
}

/// Delegates to a child that pays (call `d1`, the child finishes), then asks to `add` (gated:
/// the parent pauses with its child finished), then answers.
fn parent(counter: &InvocationCounter) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "delegating", "tool_calls": [
            {"id": "d1", "tool_name": "payer", "arguments": {"input": "pay 5"}}]})),
        resp(json!({"text": "adding", "tool_calls": [
            {"id": "c2", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    Agent::new("boss", "Delegate, then add.", "m1", llm)
        .with_subagent(common::payer(common::charge(counter)))
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_gate(Arc::new(AddGate))
}

async fn keys_of(store: &dyn Store, thread: &ThreadId, run: &RunId) -> usize {
    store
        .list_all(thread, "")
        .await
        .unwrap()
        .iter()
        .filter(|k| {
            afk_core::keys::run_prefixes(run)
                .iter()
                .any(|p| k.starts_with(p.as_str()))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_run_is_kept_while_its_parent_waits_and_goes_with_its_parent() {
    let store = Arc::new(MemoryStore::new());
    let (thread, run) = (
        ThreadId::new("t_ret").unwrap(),
        RunId::new("run_boss").unwrap(),
    );
    let child = child_run_id(&run, 1, "d1");
    let counter = InvocationCounter::new();
    let r = runner(store.clone(), false);
    let out = r
        .run_with_id(&parent(&counter), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    assert_eq!(counter.get("c1"), 1, "the child paid once");
    let listed = store.list_finished(u64::MAX, None, 100).await.unwrap();
    assert!(
        listed.runs.iter().any(|e| e.run == child),
        "the finished child is in the index: {listed:?}"
    );

    // The parent waits for a human with its child finished: the child stays.
    let swept = sweep_finished(store.as_ref(), u64::MAX).await.unwrap();
    assert_eq!(swept.deleted, 0, "{swept:?}");
    assert!(keys_of(store.as_ref(), &thread, &child).await > 0);

    let out = r
        .resume_with_decision(&parent(&counter), &thread, &run, Decision::Approve)
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(counter.get("c1"), 1, "the child's payment was not repeated");

    // The parent finished: it goes, and its child with it (although the child's own entry
    // was dropped by the first sweep).
    let swept = sweep_finished(store.as_ref(), u64::MAX).await.unwrap();
    assert_eq!(swept.deleted, 2, "{swept:?}");
    assert_eq!(keys_of(store.as_ref(), &thread, &run).await, 0);
    assert_eq!(keys_of(store.as_ref(), &thread, &child).await, 0);
    assert!(store.is_empty(), "left: {:?}", store.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_a_retention_sweeps_finished_runs_and_keeps_paused_ones() {
    let store = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_worker_ret").unwrap();
    let (done, paused) = (
        RunId::new("r_done").unwrap(),
        RunId::new("r_paused").unwrap(),
    );
    let counter = InvocationCounter::new();
    let r: Runner = runner(store.clone(), false);
    let adder = |counter: &InvocationCounter| {
        let llm = ScriptedLlm::new(vec![
            resp(json!({"text": "adding", "tool_calls": [
                {"id": "c2", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]})),
            resp(json!({"text": "done", "tool_calls": []})),
        ]);
        Agent::new("adder", "Add.", "m1", llm).with_tool(ScriptedTool::add(counter.clone()))
    };
    let out = r
        .run_with_id(&adder(&counter), &thread, done.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let gated = adder(&counter).with_gate(Arc::new(AddGate));
    let out = r
        .run_with_id(&gated, &thread, paused.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    let stamp = store_now_ms();
    while store_now_ms() <= stamp {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let worker = Worker::new(r.clone())
        .register(gated)
        .with_config(
            WorkerConfig::default()
                .with_poll_interval(Duration::from_millis(5))
                .with_retention(Duration::ZERO, Duration::from_millis(5)),
        )
        .start();
    tokio::time::timeout(NO_HANG, async {
        while worker.stats().swept == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the worker swept nothing");
    let stats = worker.shutdown().await;
    assert_eq!((stats.swept, stats.sweep_errors), (1, 0), "{stats:?}");
    assert_eq!(keys_of(store.as_ref(), &thread, &done).await, 0);
    assert!(
        store
            .get(&thread, &latest_key(&paused))
            .await
            .unwrap()
            .is_some(),
        "the paused run was swept"
    );
}

/// A run closed twice (its terminal commit, then a `finish_run`, in another millisecond)
/// is listed twice: the sweep deletes it once and drops both entries, counting nothing as kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_closed_twice_is_deleted_once() {
    let store = Arc::new(MemoryStore::new());
    let (thread, run) = (ThreadId::new("t_twice").unwrap(), RunId::new("r").unwrap());
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(vec![resp(json!({"text": "done", "tool_calls": []}))]);
    let agent = Agent::new("a", "Answer.", "m1", llm).with_tool(ScriptedTool::add(counter));
    let out = runner(store.clone(), false)
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let stamp = store_now_ms();
    while store_now_ms() <= stamp + 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let epoch = store.claim(&thread, &run).await.unwrap();
    store.finish_run(&thread, &run, epoch).await.unwrap();
    // At least one entry per close: the terminal commit and the `finish_run` each enter the
    // run, once each when they land in different milliseconds.
    let listed = store.list_finished(u64::MAX, None, 10).await.unwrap();
    let entries = listed.runs.len() as u64;
    assert!(entries >= 2, "{listed:?}");
    let swept = sweep_finished(store.as_ref(), u64::MAX).await.unwrap();
    assert_eq!(
        (swept.deleted, swept.kept, swept.forgotten),
        (1, 0, entries),
        "{swept:?}"
    );
    assert!(store.is_empty());
}

/// Counts the `finish_run` calls made to the store.
#[derive(Debug, Default, Clone)]
struct Finishes(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl Hooks for Finishes {
    type Note = ();
    async fn before(&self, call: Call<'_>) -> Result<()> {
        if matches!(call, Call::FinishRun { .. }) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A run the runner ends, completed or failed for good (its model-call budget spent), is
/// closed by its terminal record's commit alone: it leaves the index of runs that need
/// attention and enters the index of finished runs once, with no `finish_run` call (a store
/// round trip per run, and a second finished-run entry, it used to cost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_is_closed_by_its_terminal_commit_alone() {
    for (name, budget, completed) in [("done", 10, true), ("spent", 1, false)] {
        let inner = Arc::new(MemoryStore::new());
        let finishes = Finishes::default();
        let store: Arc<dyn Store> = Arc::new(HookStore::new(inner.clone(), finishes.clone()));
        let (thread, run) = (ThreadId::new("t_close").unwrap(), RunId::new(name).unwrap());
        let counter = InvocationCounter::new();
        let llm = ScriptedLlm::new(vec![
            resp(json!({"text": "adding", "tool_calls": [
                {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]})),
            resp(json!({"text": "done", "tool_calls": []})),
        ]);
        let mut agent = Agent::new("a", "Add.", "m1", llm).with_tool(ScriptedTool::add(counter));
        agent.limits.max_llm_calls = budget;
        let out = tokio::time::timeout(
            NO_HANG,
            runner(store.clone(), true)
                .run_with_id(&agent, &thread, run.clone(), "go")
                .result(),
        )
        .await
        .unwrap();
        assert_eq!(
            matches!(out, Ok(Outcome::Completed(_))),
            completed,
            "{name}: {out:?}"
        );
        assert_eq!(
            finishes.0.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{name}: the runner called finish_run after the terminal commit"
        );
        assert_eq!(
            inner.attention(&thread, &run).await.unwrap(),
            None,
            "{name}: the ended run is still in the attention index"
        );
        let listed = inner.list_finished(u64::MAX, None, 10).await.unwrap();
        assert_eq!(listed.runs.len(), 1, "{name}: {listed:?}");
        assert_eq!(listed.runs[0].run, run, "{name}: {listed:?}");
    }
}
