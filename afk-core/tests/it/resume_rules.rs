//! Resume rules of `runner/resume.rs` that the fixtures and crash tests do not pin directly:
//! the latest pointer never moves backwards (rule 8) and the v2 transcript log is verified
//! against the snapshot (rule 6).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::store::{CrashMode, Epoch, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, runner, script};
use serde_json::Value;

fn latest_phase(store: &MemoryStore, thread: &ThreadId, run: &str) -> (u64, String) {
    let snap = store.snapshot(thread);
    let v: Value = serde_json::from_slice(&snap[&format!("checkpoint:{run}:latest")]).unwrap();
    (
        v["step"].as_u64().unwrap(),
        v["phase"].as_str().unwrap().to_owned(),
    )
}

/// Crash a fresh run after `k` commits.
async fn crashed_run(k: u64) -> (Arc<MemoryStore>, ThreadId, RunId) {
    let inner = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_rules").unwrap();
    let run = RunId::new("run_rules").unwrap();
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    fault.crash_after_commits(k, CrashMode::Down);
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let res = runner(fault, false)
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await;
    assert!(res.is_err());
    (inner, thread, run)
}

#[tokio::test]
async fn a_resume_crashing_after_its_run_started_record_leaves_the_pointer_where_it_was() {
    let (inner, thread, run) = crashed_run(12).await;
    let before = latest_phase(&inner, &thread, "run_rules");
    assert!(before.0 >= 1, "crashed mid-run: {before:?}");
    // The resume's first commit is its run_started record; crash right after it.
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    fault.crash_after_commits(1, CrashMode::Down);
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let res = runner(fault.clone(), false)
        .resume(&agent, &thread, &run)
        .result()
        .await;
    assert!(res.is_err());
    assert_eq!(fault.persisted_commits(), 1, "run_started was written");
    assert!(
        inner
            .snapshot(&thread)
            .contains_key("checkpoint:run_rules:0:run_started")
    );
    assert_eq!(
        latest_phase(&inner, &thread, "run_rules"),
        before,
        "the pointer did not move back to step 0"
    );
}

#[tokio::test]
async fn a_tampered_transcript_log_is_corrupt_and_calls_nothing() {
    let (inner, thread, run) = crashed_run(20).await;
    let key = afk_core::keys::messages_key(&run, 0);
    let mut entry: Value = serde_json::from_slice(&inner.snapshot(&thread)[&key]).unwrap();
    entry["messages"][1]["content"] = Value::String("a different question".into());
    // Rewrite the entry under a fresh claim (as a buggy tool with store access might).
    let epoch: Epoch = inner.claim(&thread, &run).await.unwrap();
    inner
        .commit(&afk_core::store::Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: vec![(key, serde_json::to_vec(&entry).unwrap())],
            latest: None,
            attention: None,
        })
        .await
        .unwrap();
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let err = runner(inner.clone(), false)
        .resume(&agent_with(llm.clone(), &counter), &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!((llm.calls(), counter.total()), (0, 0));
}
