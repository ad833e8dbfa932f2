//! The write-behind writer merges a run's queued commits and holds them until the run's barrier:
//! a scripted run of `n` tool steps on a store with network-like latency makes one commit per
//! step in async mode, against about eleven in sync mode, and the result is the same; a step
//! this process began reads no effect journal. Counted at the store, per tool step.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, LlmClient, LlmRequest, Outcome, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::{FaultStore, Op, Store};
use afk_core::{CheckpointConfig, MemoryStore, RunId, ThreadId};

const STEPS: u64 = 10;

fn agent() -> Agent {
    let llm = Arc::new(Slow(ScriptedLlm::new(common::add_script(STEPS))));
    let mut agent = Agent::new("merge", "Add.", "scripted-1", llm)
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    agent.limits = common::limits_for(STEPS);
    agent
}

/// A model that takes 50 ms to answer: the writer's task runs meanwhile, so what the step
/// queued before the call is written then unless the writer holds it.
#[derive(Debug)]
struct Slow(Arc<ScriptedLlm>);

#[async_trait]
impl LlmClient for Slow {
    fn provider(&self) -> String {
        self.0.provider()
    }
    async fn complete(&self, request: LlmRequest) -> afk_core::Result<LlmResponse> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.0.complete(request).await
    }
}

/// What one run cost at the store.
struct Counts {
    text: String,
    /// Commits the store applied.
    commits: u64,
    /// Store calls that carried them (`commit` or `commit_batch`).
    commit_calls: u64,
    /// Every store call (round trips).
    trips: u64,
    /// `get_many` calls (the effect journal).
    journal_reads: u64,
}

/// Runs the agent on a store with 1 ms latency per call and counts the store calls.
async fn run(async_writes: bool) -> Counts {
    let fault = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    fault.set_latency(Duration::from_millis(1));
    let runner = Runner::new(
        fault.clone(),
        RunnerConfig::default().with_checkpoint(
            CheckpointConfig::default()
                .with_async_writes(async_writes)
                // Longer than the model's answer: only barriers and the terminal flush write.
                .with_hold(Duration::from_secs(60)),
        ),
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
    // Async: a barrier writes its run's commit itself (`Commit`); the background task writes
    // in batches (`CommitBatch`), whose commits are counted once more each as `Commit`: not
    // round trips. One run, so a batch holds one commit.
    let (commit_calls, inner_commits) = if async_writes {
        (fault.calls(Op::Commit), fault.calls(Op::CommitBatch))
    } else {
        (fault.calls(Op::Commit), 0)
    };
    Counts {
        text: r.final_text,
        commits: fault.persisted_commits(),
        commit_calls,
        trips: fault.total_calls() - inner_commits,
        journal_reads: fault.calls(Op::GetMany),
    }
}

#[tokio::test(start_paused = true)]
async fn async_writes_merge_a_steps_commits() {
    let sync = run(false).await;
    let asy = run(true).await;
    assert_eq!(sync.text, asy.text);
    let per_step = |n: u64| n as f64 / STEPS as f64;
    eprintln!(
        "per tool step: sync {:.1} commits, {:.1} round trips; async {:.1} commits, {:.1} round trips",
        per_step(sync.commits),
        per_step(sync.trips),
        per_step(asy.commits),
        per_step(asy.trips)
    );
    assert!(
        per_step(sync.commits) >= 8.0,
        "sync writes every commit: {}",
        sync.commits
    );
    // The design's floor is one wait per tool step (the barrier before the side effect): the
    // writer holds everything a step queues until then, so one commit per tool step, plus the
    // closing answer's terminal flush.
    assert_eq!(
        asy.commit_calls,
        STEPS + 1,
        "async made {} store calls for {STEPS} steps",
        asy.commit_calls
    );
    assert_eq!(
        asy.commits, asy.commit_calls,
        "one commit per call: one run"
    );
    // Every step of a fresh run is begun by this process: no effect-journal read.
    assert_eq!((sync.journal_reads, asy.journal_reads), (0, 0));
    // The claim and the existence check, then one round trip per step.
    assert!(
        asy.trips <= STEPS + 3,
        "async made {} round trips for {STEPS} steps",
        asy.trips
    );
}
