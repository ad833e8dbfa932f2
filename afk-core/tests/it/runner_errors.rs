//! Every error path resolves the handle: a panicking tool, a failing store, a subagent.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Outcome, Runner, RunnerConfig, child_run_id};
use afk_core::schema::LlmResponse;
use afk_core::store::{FaultStore, Op, RetryPolicy, Store};
use afk_core::{CheckpointConfig, ErrorKind, MemoryStore, RunId, ThreadId};
use serde_json::{Value, json};

fn r(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("response")
}

fn one_call(tool: &str) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(vec![
        r(
            json!({"text": "calling", "tool_calls": [{"id": "x1", "tool_name": tool, "arguments": {"input": "sub task"}}]}),
        ),
        r(json!({"text": "finished", "tool_calls": []})),
    ])
}

#[tokio::test]
async fn a_panicking_tool_is_a_failed_call_not_a_hang() {
    let counter = InvocationCounter::new();
    let boom = ScriptedTool::new("boom", EffectPolicy::Idempotent, counter.clone(), |_| {
        panic!("tool bug")
    });
    let agent = Agent::new("a", "", "m", one_call("boom")).with_tool(boom);
    let runner = Runner::new(Arc::new(MemoryStore::new()), RunnerConfig::default());
    let out = runner
        .run(&agent, &ThreadId::new("t_panic").unwrap(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert_eq!(res.final_text, "finished");
    assert!(!res.tool_executions[0].success);
    assert!(
        res.tool_executions[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("panicked")
    );
}

#[tokio::test]
async fn a_failing_store_resolves_the_handle_with_the_error() {
    let fault = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    // The second commit: the write-behind writer merges a run's queued commits, so a short run
    // makes only a few.
    fault.fail_nth(Some(Op::Commit), 2, ErrorKind::Unavailable);
    let checkpoint = CheckpointConfig::default().with_retry(RetryPolicy::none());
    let runner = Runner::new(fault, RunnerConfig::default().with_checkpoint(checkpoint));
    let counter = InvocationCounter::new();
    let agent = Agent::new("a", "", "m", one_call("add")).with_tool(ScriptedTool::add(counter));
    let res = tokio::time::timeout(
        std::time::Duration::from_secs(60), // catches a hang, measures nothing
        runner
            .run(&agent, &ThreadId::new("t_fail").unwrap(), "go")
            .result(),
    )
    .await
    .expect("no hang");
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Unavailable);
}

#[tokio::test]
async fn a_corrupt_pointer_is_corrupt_and_calls_nothing() {
    let store = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_corrupt").unwrap();
    let run = RunId::new("run_c").unwrap();
    let epoch = store.claim(&thread, &run).await.unwrap();
    store
        .commit(&afk_core::store::Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: vec![],
            latest: Some(b"[1, 2]".to_vec()),
            attention: None,
        })
        .await
        .unwrap();
    let llm = one_call("add");
    let agent = Agent::new("a", "", "m", llm.clone());
    let err = Runner::new(store, RunnerConfig::default())
        .resume(&agent, &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert_eq!(llm.calls(), 0);
}

#[tokio::test]
async fn a_subagent_runs_as_a_child_run_and_is_not_rerun_on_resume() {
    let store = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_sub").unwrap();
    let run = RunId::new("run_parent").unwrap();
    let child_llm = ScriptedLlm::new(vec![r(json!({"text": "child says hi", "tool_calls": []}))]);
    let child = Agent::new("helper", "", "m", child_llm.clone());
    let parent = Agent::new("boss", "", "m", one_call("helper")).with_subagent(child.clone());
    let runner = Runner::new(store.clone(), RunnerConfig::default());
    let out = runner
        .run_with_id(&parent, &thread, run.clone(), "delegate")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert_eq!(res.final_text, "finished");
    assert_eq!(res.subagent_executions.len(), 1);
    assert_eq!(
        res.subagent_executions[0].output_text.as_deref(),
        Some("child says hi")
    );
    let child_run = child_run_id(&run, 1, "x1");
    let keys = store.snapshot(&thread);
    assert!(
        keys.contains_key(&format!("checkpoint:{child_run}:latest")),
        "child has its own checkpoints"
    );
    assert!(keys.contains_key(&format!("checkpoint:{run}:1:pre_subagent_batch")));
    assert!(keys.contains_key(&format!("checkpoint:{run}:1:post_subagent_batch")));
    assert_eq!(child_llm.calls(), 1);
    // Resuming the child directly returns its stored result without a model call.
    let again = runner
        .resume(&child, &thread, &child_run)
        .result()
        .await
        .unwrap();
    assert_eq!(
        again.result().map(|r| r.final_text.clone()),
        Some("child says hi".into())
    );
    assert_eq!(child_llm.calls(), 1);
}

/// A child run that crashed right after its first commit is resumable from it (that commit
/// carries the child's input in its step-0 snapshot): the parent's resume resumes the child
/// under the same child run id, which asks its model once.
#[tokio::test]
async fn a_child_crashed_right_after_its_first_commit_is_resumed() {
    let thread = ThreadId::new("t_sub_crash").unwrap();
    let run = RunId::new("run_parent_crash").unwrap();
    let child_run = child_run_id(&run, 1, "x1");
    let child_rl = format!("checkpoint:{child_run}:0:run_started");
    let agents = || {
        let child_llm =
            ScriptedLlm::new(vec![r(json!({"text": "child says hi", "tool_calls": []}))]);
        let child = Agent::new("helper", "", "m", child_llm.clone());
        let parent = Agent::new("boss", "", "m", one_call("helper")).with_subagent(child);
        (parent, child_llm)
    };
    let sync = || {
        RunnerConfig::default().with_checkpoint(
            CheckpointConfig::default()
                .with_async_writes(false)
                .with_retry(RetryPolicy::none()),
        )
    };

    // Find the commit that saves the child's run_started, then crash right after it.
    let probe = Arc::new(FaultStore::new(MemoryStore::new()));
    let (parent, _) = agents();
    Runner::new(probe.clone(), sync())
        .run_with_id(&parent, &thread, run.clone(), "delegate")
        .result()
        .await
        .unwrap();
    let commits: Vec<_> = probe
        .log()
        .into_iter()
        .filter_map(|e| match e {
            afk_core::store::FaultEvent::Commit(c) => Some(c),
            _ => None,
        })
        .collect();
    let k = commits
        .iter()
        .position(|c| c.puts.iter().any(|(key, _)| *key == child_rl))
        .expect("the child saves run_started") as u64
        + 1;

    let inner = Arc::new(MemoryStore::new());
    let crashing = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    crashing.crash_after_commits(k, afk_core::store::CrashMode::Down);
    let (parent, _) = agents();
    let first = Runner::new(crashing, sync())
        .run_with_id(&parent, &thread, run.clone(), "delegate")
        .result()
        .await;
    assert!(first.is_err(), "the crashed run must fail: {first:?}");
    let keys = inner.snapshot(&thread);
    assert!(keys.contains_key(&child_rl), "child started");
    assert!(
        keys.contains_key(&format!("checkpoint:{child_run}:0:runtime_state"))
            && !keys.contains_key(&format!("checkpoint:{child_run}:1:step_started")),
        "the child's first commit holds its step-0 snapshot, and nothing more is saved: {:?}",
        keys.keys().collect::<Vec<_>>()
    );

    let (parent, child_llm) = agents();
    let out = Runner::new(inner.clone(), sync())
        .resume(&parent, &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert_eq!(res.state, "completed");
    assert_eq!(res.final_text, "finished");
    assert_eq!(
        res.subagent_executions
            .iter()
            .map(|s| s.success)
            .collect::<Vec<_>>(),
        vec![true],
        "{:?}",
        res.subagent_executions
    );
    assert_eq!(
        child_llm.calls(),
        1,
        "the resumed child asks its model once"
    );
}
