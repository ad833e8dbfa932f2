//! The verifier on real runner runs over `MemoryStore`: clean, then each kind of damage.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ProblemKind, Report, newest_snapshot, verify_run, verify_thread};
use crate::keys::{checkpoint_key, messages_key};
use crate::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use crate::runner::{Agent, Outcome, Runner, RunnerConfig};
use crate::schema::{LlmResponse, Phase};
use crate::store::latest_key;
use crate::{
    MemoryStore, RunId, ThreadId,
    store::{Commit, Store},
};

fn answer(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("scripted answer")
}

/// One completed two-step run (a tool call, then an answer) on a fresh store.
async fn completed_run(thread: &str, run: &str) -> (Arc<MemoryStore>, ThreadId, RunId) {
    let llm = ScriptedLlm::new(vec![
        answer(json!({"text": "Let me add.", "tool_calls": [
            {"id": "call_1", "tool_name": "add", "arguments": {"a": 2, "b": 5}}]})),
        answer(json!({"text": "2 + 5 = 7.", "tool_calls": []})),
    ]);
    let agent = Agent::new("calculator", "Use the add tool.", "scripted", llm)
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    let store = Arc::new(MemoryStore::new());
    let runner = Runner::new(store.clone(), RunnerConfig::default());
    let (t, r) = (ThreadId::new(thread).unwrap(), RunId::new(run).unwrap());
    let out = runner
        .run_with_id(&agent, &t, r.clone(), "What is 2 + 5?")
        .result()
        .await
        .expect("run completes");
    assert!(matches!(out, Outcome::Completed(_)));
    (store, t, r)
}

/// Overwrite `puts` (and the latest pointer when `latest` is set) under a fresh claim.
async fn overwrite(
    store: &MemoryStore,
    t: &ThreadId,
    r: &RunId,
    puts: Vec<(String, Vec<u8>)>,
    latest: Option<Vec<u8>>,
) {
    let epoch = store.claim(t, r).await.expect("claim");
    let commit = Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts,
        latest,
        attention: None,
    };
    store.commit(&commit).await.expect("commit");
}

fn kinds(report: &Report) -> Vec<ProblemKind> {
    report.problems.iter().map(|p| p.kind).collect()
}

#[tokio::test]
async fn a_completed_run_is_clean() {
    let (store, t, r) = completed_run("t_clean", "run_clean").await;
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.uncertain().count(), 0);
    let all = verify_thread(store.as_ref(), &t).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0], report);
}

#[tokio::test]
async fn a_deleted_record_the_latest_points_to_is_reported() {
    let (store, t, r) = completed_run("t_dangling", "run_dangling").await;
    let key = checkpoint_key(&r, 2, Phase::RunTerminal);
    store.delete(&t, std::slice::from_ref(&key)).await.unwrap();
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert_eq!(kinds(&report), vec![ProblemKind::DanglingLatest]);
    assert_eq!(report.problems[0].key, key);
    assert!(report.problems[0].message.contains("does not exist"));
}

#[tokio::test]
async fn a_tampered_transcript_entry_is_reported() {
    let (store, t, r) = completed_run("t_tamper", "run_tamper").await;
    let key = messages_key(&r, 0);
    let bytes = store.get(&t, &key).await.unwrap().expect("entry 0");
    let mut entry: Value = serde_json::from_slice(&bytes).unwrap();
    entry["messages"][1]["content"] = json!("What is 2 + 6?");
    let edited = serde_json::to_vec(&entry).unwrap();
    overwrite(&store, &t, &r, vec![(key, edited)], None).await;
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert_eq!(kinds(&report), vec![ProblemKind::TranscriptMismatch]);
    assert!(
        report.problems[0].message.contains("digest mismatch"),
        "{}",
        report.problems[0]
    );
}

#[tokio::test]
async fn a_truncated_log_is_reported() {
    let (store, t, r) = completed_run("t_trunc", "run_trunc").await;
    let key = messages_key(&r, 1);
    store.delete(&t, std::slice::from_ref(&key)).await.unwrap();
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert_eq!(kinds(&report), vec![ProblemKind::MissingTranscriptEntry]);
    assert_eq!(report.problems[0].key, key);
}

#[tokio::test]
async fn a_snapshot_count_mismatch_is_reported() {
    let (store, t, r) = completed_run("t_count", "run_count").await;
    let snap = newest_snapshot(store.as_ref(), &t, &r, None)
        .await
        .unwrap()
        .expect("a runtime_state snapshot");
    let key = checkpoint_key(&r, snap.step, Phase::RuntimeState);
    let bytes = store.get(&t, &key).await.unwrap().expect("snapshot");
    let mut rec: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(rec["payload"]["transcript"]["message_count"], json!(4));
    rec["payload"]["transcript"]["message_count"] = json!(5);
    let edited = serde_json::to_vec(&rec).unwrap();
    overwrite(&store, &t, &r, vec![(key.clone(), edited)], None).await;
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert_eq!(kinds(&report), vec![ProblemKind::TranscriptMismatch]);
    assert_eq!(report.problems[0].key, key);
    assert!(
        report.problems[0].message.contains("5"),
        "{}",
        report.problems[0]
    );
}

#[tokio::test]
async fn a_bad_effect_hash_is_a_problem_and_an_intent_is_uncertain() {
    let (store, t, r) = completed_run("t_effect", "run_effect").await;
    let bad = json!({"input_hash": "XYZ", "status": "intent", "tool_name": "add",
        "idempotency_key": "run_effect:2:call_9"});
    let key = "effect:run_effect:2:call_9".to_owned();
    let puts = vec![(key.clone(), serde_json::to_vec(&bad).unwrap())];
    overwrite(&store, &t, &r, puts, None).await;
    let report = verify_run(store.as_ref(), &t, &r).await.unwrap();
    assert_eq!(kinds(&report), vec![ProblemKind::MalformedInputHash]);
    let uncertain: Vec<_> = report.uncertain().map(|n| n.key.as_str()).collect();
    assert_eq!(uncertain, vec![key.as_str()]);
}

#[tokio::test]
async fn a_run_without_a_latest_pointer_is_reported() {
    let store = MemoryStore::new();
    let (t, r) = (
        ThreadId::new("t_nolatest").unwrap(),
        RunId::new("run_x").unwrap(),
    );
    store.claim(&t, &r).await.unwrap();
    let reports = verify_thread(&store, &t).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(kinds(&reports[0]), vec![ProblemKind::MissingLatest]);
    assert_eq!(reports[0].problems[0].key, latest_key(&r));
}
