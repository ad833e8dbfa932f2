//! Shared pieces of the benchmarks and the bench report: the scripted workload (AFK's peer
//! workload: one tool call per step, instant model and tool), a byte-counting store wrapper,
//! captured commits of a real run, and the state of a run crashed mid-step.
//!
//! Included with `#[path]` by each bench and by `examples/bench_report.rs`; each uses a part.
#![allow(dead_code)] // every includer uses a different subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench setup: a failure should stop the bench

pub mod counting;
pub mod forgetful;
pub mod servers;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk::runner::{Agent, Limits, Outcome, Runner};
use afk::schema::LlmResponse;
use afk::store::{CrashMode, FaultStore, RetryPolicy};
use afk::{
    CheckpointConfig, MemoryStore, RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use afk_core::testkit::deterministic_runner;
use serde_json::{Value, json};

/// The thread every benchmark run lives in (stores are fresh or use unique prefixes).
pub const THREAD: &str = "bench";

/// The thread id [`THREAD`].
pub fn thread() -> ThreadId {
    ThreadId::new(THREAD).expect("valid thread id")
}

/// A scripted agent that makes `steps` model turns each asking for one `add` call, then a
/// closing answer. A "step" in every figure below is one of those tool-calling turns.
pub fn agent(steps: u64) -> Agent {
    let llm = ScriptedLlm::new(script(steps));
    let mut agent = Agent::new("bench", "Add numbers.", "scripted-1", llm)
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    agent.limits = limits(steps);
    agent
}

/// The limits of a bench agent of `steps` steps: room for every step, no wall-time limit.
pub fn limits(steps: u64) -> Limits {
    Limits::default()
        .with_max_steps(steps + 5)
        .with_max_llm_calls(steps + 5)
        .with_max_tool_calls(steps + 5)
        .with_max_wall_time_ms(None)
}

/// The model answers of [`agent`]: `steps` turns asking for one `add` call, then a closing
/// answer.
pub fn script(steps: u64) -> Vec<LlmResponse> {
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
    script
}

/// A runner on `store`, with async (write-behind) or sync (inline) checkpoint writes, a fixed
/// clock and sequential ids (so bytes written are reproducible).
pub fn runner(store: Arc<dyn Store>, async_writes: bool) -> Runner {
    runner_with(
        store,
        CheckpointConfig::default().with_async_writes(async_writes),
    )
}

/// A runner on `store` with these checkpoint settings (see [`runner`]).
pub fn runner_with(store: Arc<dyn Store>, checkpoint: CheckpointConfig) -> Runner {
    deterministic_runner(store, checkpoint)
}

/// Run `agent` to completion under `run`; panics if it does not complete.
pub async fn run_to_end(runner: &Runner, agent: &Agent, run: RunId) {
    let out = runner
        .run_with_id(agent, &thread(), run, "go")
        .result()
        .await
        .expect("benchmark run failed");
    assert!(matches!(out, Outcome::Completed(_)), "benchmark run paused");
}

/// Every commit a fresh `steps`-step run makes (sync writes, so none is coalesced away), in
/// order, for run `run`. The commit benchmarks replay these bytes.
pub async fn captured_commits(steps: u64, run: &str) -> Vec<Commit> {
    let store = Arc::new(counting::CountingStore::new(
        Arc::new(MemoryStore::new()),
        counting::Counter::default(),
    ));
    store.hooks().keep_commits(true);
    let r = runner(store.clone(), false);
    run_to_end(&r, &agent(steps), RunId::new(run).expect("run id")).await;
    store.hooks().commits()
}

/// The same commits re-aimed at `epoch` (a store's own claim).
pub fn with_epoch(commits: &[Commit], epoch: Epoch) -> Vec<Commit> {
    commits
        .iter()
        .cloned()
        .map(|mut c| {
            c.epoch = epoch;
            c
        })
        .collect()
}

/// The stored keys of a run crashed mid-step, ready to load into any store.
#[derive(Debug, Clone)]
pub struct CrashedRun {
    /// Records of the run (every key but the latest pointer and the fence).
    pub puts: Vec<(String, Vec<u8>)>,
    /// The latest pointer's value.
    pub latest: Vec<u8>,
    /// Which snapshot the latest pointer names (for the report).
    pub latest_names: String,
}

/// A `steps`-step run of [`agent`] under `run`, crashed right after the commit that points
/// latest at the mid-step snapshot of step `steps` (`runtime_state` #2, which holds the pending
/// model answer: the model has answered, the tool has not run). Sync writes.
pub async fn crashed_run(steps: u64, run: &str) -> CrashedRun {
    let run_id = RunId::new(run).expect("run id");
    // One clean run to find the commit to crash after.
    let commits = captured_commits(steps, run).await;
    let names = |c: &Commit| -> Option<(u64, String)> {
        let v: Value = serde_json::from_slice(c.latest.as_ref()?).ok()?;
        Some((
            v.get("step")?.as_u64()?,
            v.get("phase")?.as_str()?.to_owned(),
        ))
    };
    let post_llm = commits
        .iter()
        .position(|c| names(c) == Some((steps, "post_llm".into())))
        .expect("the last tool step has a post_llm record");
    let snapshot = post_llm
        + 1
        + commits[post_llm + 1..]
            .iter()
            .position(|c| names(c).is_some_and(|(_, p)| p == "runtime_state"))
            .expect("a snapshot follows post_llm");
    let crash_after = snapshot as u64 + 1;

    let mem = Arc::new(MemoryStore::new());
    let fault = Arc::new(FaultStore::from_arc(mem.clone() as Arc<dyn Store>));
    fault.crash_after_commits(crash_after, CrashMode::Down);
    let mut cfg = CheckpointConfig::default()
        .with_async_writes(false)
        .with_retry(RetryPolicy::none());
    cfg.flush_timeout = std::time::Duration::from_secs(5);
    let r = deterministic_runner(fault, cfg);
    let res = r
        .run_with_id(&agent(steps), &thread(), run_id.clone(), "go")
        .result()
        .await;
    assert!(res.is_err(), "the run survived its crash");
    let latest_key = afk::store::latest_key(&run_id);
    let fence = format!("run:{run}");
    let mut snapshot: BTreeMap<String, Vec<u8>> = mem.snapshot(&thread());
    let latest = snapshot
        .remove(&latest_key)
        .expect("crashed run has a latest pointer");
    snapshot.remove(&fence);
    let latest_names = String::from_utf8_lossy(&latest)
        .chars()
        .take(120)
        .collect::<String>();
    CrashedRun {
        puts: snapshot.into_iter().collect(),
        latest,
        latest_names,
    }
}

/// Load a crashed run's records into `store` (claim, then one commit), ready for a resume.
pub async fn load_crashed(store: &dyn Store, run: &str, state: &CrashedRun) {
    let run_id = RunId::new(run).expect("run id");
    let epoch = store.claim(&thread(), &run_id).await.expect("claim");
    store
        .commit(&Commit {
            thread: thread(),
            run: run_id,
            epoch,
            puts: state.puts.clone(),
            latest: Some(state.latest.clone()),
            attention: None,
        })
        .await
        .expect("load crashed run");
}

/// A multi-threaded Tokio runtime for one benchmark group.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Criterion settings for this suite: small samples so the whole run takes minutes.
pub fn criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
        .configure_from_args()
}
