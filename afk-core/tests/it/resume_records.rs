//! Execution records live in the v2 transcript log, not in the snapshot (so a snapshot does
//! not grow with the run): a
//! resume restores them from the log; a v2 state written before they moved there (records
//! inline in every snapshot) still resumes to the same result, and from its next snapshot on
//! the log holds them; a snapshot claiming records both inline and in the log is `Corrupt`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::normalize::normalize_record;
use afk_core::runner::Outcome;
use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::schema::{PhasePayload, TranscriptEntry, TranscriptRef, reassemble};
use afk_core::store::{Commit, CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, essence, runner, script};
use serde_json::Value;

const RUN: &str = "run_records";

/// The result of the uncrashed run.
async fn reference() -> Value {
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let out = runner(Arc::new(MemoryStore::new()), false)
        .run_with_id(
            &agent,
            &ThreadId::new("t").unwrap(),
            RunId::new(RUN).unwrap(),
            "go",
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    essence(&r)
}

/// A run crashed after its step-2 snapshot, whose log holds step 1's two tool records.
async fn crashed() -> (Arc<MemoryStore>, ThreadId, RunId) {
    let inner = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_records").unwrap();
    let run = RunId::new(RUN).unwrap();
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    fault.crash_after_commits(22, CrashMode::Down);
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let res = runner(fault, false)
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await;
    assert!(res.is_err(), "crashed");
    let (_, newest) = snapshots(&inner, &thread).pop_last().unwrap();
    let tref = newest.get("transcript").unwrap();
    assert_eq!(tref["tool_count"], 2, "precondition: {tref}");
    assert_eq!(newest["tool_executions"], Value::Array(vec![]));
    (inner, thread, run)
}

/// Every `runtime_state` payload of the thread, by key.
fn snapshots(store: &MemoryStore, thread: &ThreadId) -> BTreeMap<String, Value> {
    store
        .snapshot(thread)
        .into_iter()
        .filter(|(k, _)| k.ends_with(":runtime_state"))
        .map(|(k, v)| {
            let v: Value = serde_json::from_slice(&v).unwrap();
            (k, v["payload"].clone())
        })
        .collect()
}

/// Rewrite `puts` (and the latest pointer) under a fresh claim.
async fn rewrite(
    store: &MemoryStore,
    thread: &ThreadId,
    run: &RunId,
    puts: Vec<(String, Vec<u8>)>,
) {
    let epoch = store.claim(thread, run).await.unwrap();
    let latest_key = afk_core::store::latest_key(run);
    let latest = puts
        .iter()
        .find(|(k, _)| *k == latest_key)
        .map(|(_, v)| v.clone());
    let puts = puts.into_iter().filter(|(k, _)| *k != latest_key).collect();
    store
        .commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts,
            latest,
            attention: None,
        })
        .await
        .unwrap();
}

/// Turn the stored run into what the runner wrote before records moved into the log: log
/// entries without records (re-chained) and every snapshot carrying its records inline.
async fn to_inline_records(store: &MemoryStore, thread: &ThreadId, run: &RunId) {
    let state = store.snapshot(thread);
    let mut old_log: Vec<TranscriptEntry> = Vec::new();
    let mut new_log: Vec<TranscriptEntry> = Vec::new();
    for i in 0.. {
        let Some(bytes) = state.get(&afk_core::keys::messages_key(run, i)) else {
            break;
        };
        let e: TranscriptEntry = serde_json::from_slice(bytes).unwrap();
        let prev = new_log.last().map(|e| e.digest.clone()).unwrap_or_default();
        new_log.push(TranscriptEntry::new(
            e.index,
            e.step,
            e.messages.clone(),
            &prev,
        ));
        old_log.push(e);
    }
    let mut puts = Vec::new();
    for e in &new_log {
        puts.push((
            afk_core::keys::messages_key(run, e.index),
            serde_json::to_vec(e).unwrap(),
        ));
    }
    for (key, bytes) in &state {
        if !(key.ends_with(":runtime_state") || key.ends_with(":latest")) {
            continue;
        }
        let mut rec = normalize_record(bytes, thread, key).unwrap();
        let PhasePayload::RuntimeState(s) = &mut rec.payload else {
            continue;
        };
        let tref = s.transcript.clone().unwrap();
        let n = usize::try_from(tref.len).unwrap();
        let logged = reassemble(&old_log[..n], &tref).unwrap().records;
        s.tool_executions = logged.tool_executions;
        s.transcript = Some(TranscriptRef::of(&new_log[..n]));
        puts.push((key.clone(), rec.to_bytes().unwrap()));
    }
    rewrite(store, thread, run, puts).await;
}

#[tokio::test]
async fn a_resume_restores_the_records_from_the_log() {
    let (inner, thread, run) = crashed().await;
    let out = runner(inner.clone(), false)
        .resume(
            &agent_with(ScriptedLlm::new(script()), &InvocationCounter::new()),
            &thread,
            &run,
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    assert_eq!(essence(&r), reference().await);
    assert_eq!(r.tool_executions.len(), 3);
}

#[tokio::test]
async fn a_v2_state_with_inline_records_resumes_and_then_logs_them() {
    let (inner, thread, run) = crashed().await;
    to_inline_records(&inner, &thread, &run).await;
    let (_, newest) = snapshots(&inner, &thread).pop_last().unwrap();
    assert_eq!(newest["tool_executions"].as_array().unwrap().len(), 2);
    assert!(newest["transcript"].get("tool_count").is_none());

    let out = runner(inner.clone(), false)
        .resume(
            &agent_with(ScriptedLlm::new(script()), &InvocationCounter::new()),
            &thread,
            &run,
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    assert_eq!(essence(&r), reference().await);
    // The resumed run's snapshots carry no records; its log holds every record exactly once.
    let (_, newest) = snapshots(&inner, &thread).pop_last().unwrap();
    assert_eq!(newest["tool_executions"], Value::Array(vec![]));
    let tref: TranscriptRef = serde_json::from_value(newest["transcript"].clone()).unwrap();
    let state = inner.snapshot(&thread);
    let entries: Vec<TranscriptEntry> = (0..tref.len)
        .map(|i| serde_json::from_slice(&state[&afk_core::keys::messages_key(&run, i)]).unwrap())
        .collect();
    let logged = reassemble(&entries, &tref).unwrap().records.tool_executions;
    let ids: Vec<_> = logged.iter().map(|t| t.tool_call_id.clone()).collect();
    let want: Vec<_> = r
        .tool_executions
        .iter()
        .map(|t| t.tool_call_id.clone())
        .collect();
    assert_eq!(ids, want);
}

#[tokio::test]
async fn records_both_inline_and_in_the_log_are_corrupt_and_call_nothing() {
    let (inner, thread, run) = crashed().await;
    let state = inner.snapshot(&thread);
    let (key, _) = snapshots(&inner, &thread).pop_last().unwrap();
    let mut rec = normalize_record(&state[&key], &thread, &key).unwrap();
    let PhasePayload::RuntimeState(s) = &mut rec.payload else {
        panic!("{key} is a snapshot")
    };
    s.tool_executions = vec![Default::default()];
    rewrite(&inner, &thread, &run, vec![(key, rec.to_bytes().unwrap())]).await;
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let err = runner(inner.clone(), false)
        .resume(&agent_with(llm.clone(), &counter), &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.message().contains("both inline"), "{err}");
    assert_eq!((llm.calls(), counter.total()), (0, 0));
}
