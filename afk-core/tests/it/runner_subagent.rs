//! Delegation across failures: only a child run's own final outcome becomes the delegation's
//! result. A child that stops without one (an uncertain at-most-once effect, a transient store
//! error) stops the parent with the same error kind, naming the child run and the delegating
//! call, and leaves nothing in the parent's effect journal; a paused child pauses the parent,
//! and the parent's decision reaches the child.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{
    Agent, Decision, GateDecision, Outcome, Settlement, ToolGate, child_run_id,
};
use afk_core::schema::{AgentResult, ToolCall};
use afk_core::store::{CrashMode, FaultEvent, FaultStore, Op, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{resp, runner};
use serde_json::{Value, json};

/// The child pays: `charge` (at-most-once, call `c1`), then answers "paid".
fn child(counter: &InvocationCounter, gated: bool) -> Agent {
    let agent = common::payer(common::charge(counter));
    if gated {
        agent.with_gate(Arc::new(ChargeGate))
    } else {
        agent
    }
}

/// The parent delegates to the child (call `d1`), then answers "done".
fn parent(counter: &InvocationCounter, gated: bool) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "delegating", "tool_calls": [
            {"id": "d1", "tool_name": "payer", "arguments": {"input": "pay 5"}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    Agent::new("boss", "Delegate.", "m1", llm).with_subagent(child(counter, gated))
}

/// Asks a human before every `charge`.
#[derive(Debug)]
struct ChargeGate;

impl ToolGate for ChargeGate {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == "charge" {
            GateDecision::RequestApproval("charging needs approval".into())
        } else {
            GateDecision::Allow
        }
    }
}

fn ids() -> (ThreadId, RunId, RunId) {
    let run = RunId::new("run_boss").unwrap();
    let child = child_run_id(&run, 1, "d1");
    (ThreadId::new("t_sub").unwrap(), run, child)
}

/// The 1-based indexes of the commits (of a clean run) that write a key ending `suffix`.
async fn commits_writing(suffix: &str) -> Vec<u64> {
    let (thread, run, _) = ids();
    let probe = Arc::new(FaultStore::new(MemoryStore::new()));
    let counter = InvocationCounter::new();
    runner(probe.clone(), false)
        .run_with_id(&parent(&counter, false), &thread, run, "go")
        .result()
        .await
        .unwrap();
    let found: Vec<u64> = probe
        .log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) => Some(c),
            FaultEvent::Claim { .. } => None,
        })
        .zip(1..)
        .filter(|(c, _)| c.puts.iter().any(|(k, _)| k.ends_with(suffix)))
        .map(|(_, i)| i)
        .collect();
    assert!(!found.is_empty(), "no commit writes *{suffix}");
    found
}

/// The 1-based index of the first commit (of a clean run) that writes a key ending `suffix`.
async fn commit_writing(suffix: &str) -> u64 {
    commits_writing(suffix).await[0]
}

/// The parent's effect row for the delegation `d1`, as JSON.
fn delegation_row(store: &MemoryStore, thread: &ThreadId, run: &RunId) -> Option<Value> {
    let snap = store.snapshot(thread);
    let bytes = snap.get(&format!("effect:{run}:1:d1"))?;
    serde_json::from_slice(bytes).ok()
}

fn completed(out: afk_core::Result<Outcome>) -> AgentResult {
    match out {
        Ok(Outcome::Completed(r)) => *r,
        other => panic!("expected a completed run, got {other:?}"),
    }
}

fn assert_delegated_once(r: &AgentResult, counter: &InvocationCounter) {
    assert_eq!(r.state, "completed");
    assert_eq!(r.final_text, "done");
    let subs: Vec<_> = r
        .subagent_executions
        .iter()
        .map(|s| (s.success, s.output_text.clone()))
        .collect();
    assert_eq!(subs, [(true, Some("paid".to_owned()))], "{r:?}");
    assert_eq!(counter.get("c1"), 1, "the charge happened exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_with_an_uncertain_effect_stops_the_parent_until_the_child_is_settled() {
    let (thread, run, child_run) = ids();
    // Crash the process right after the child's intent row for `charge` is durable: the
    // charge runs, its result row is lost.
    let k = commit_writing(&format!("effect:{child_run}:1:c1")).await;
    let inner = Arc::new(MemoryStore::new());
    let crashing = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    crashing.crash_after_commits(k, CrashMode::Down);
    let counter = InvocationCounter::new();
    let first = runner(crashing, false)
        .run_with_id(&parent(&counter, false), &thread, run.clone(), "go")
        .result()
        .await;
    assert!(first.is_err(), "{first:?}");
    assert_eq!(counter.get("c1"), 1, "the charge ran before the crash");

    // The parent's resume resumes the child, which cannot know whether it charged.
    let err = runner(inner.clone(), false)
        .resume(&parent(&counter, false), &thread, &run)
        .result()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::EffectUncertain, "{err}");
    for needle in [child_run.as_str(), "tool call d1", "run_boss", "c1"] {
        assert!(err.message().contains(needle), "{needle} not in: {err}");
    }
    assert_eq!(
        err.key(),
        Some(format!("effect:{child_run}:1:c1").as_str()),
        "the key is the child's uncertain effect row"
    );
    let row = delegation_row(&inner, &thread, &run).expect("the delegation's intent");
    assert_eq!(row["status"], "intent", "nothing recorded for d1: {row}");
    assert!(
        common::latest_terminal(&inner, &thread, run.as_str()).is_none(),
        "the parent is not terminal"
    );
    // Still uncertain on a second resume: nothing ran, nothing was recorded.
    let again = runner(inner.clone(), false)
        .resume(&parent(&counter, false), &thread, &run)
        .result()
        .await;
    assert_eq!(
        again.map(|_| ()).unwrap_err().kind(),
        ErrorKind::EffectUncertain
    );
    assert_eq!(counter.get("c1"), 1);

    // The operator settles the child's call (it did charge); the parent then completes with
    // the charge exactly once.
    let settled = runner(inner.clone(), false)
        .resume_settling(
            &child(&counter, false),
            &thread,
            &child_run,
            "c1",
            Settlement::Ran {
                output: json!({"charged": 5}),
            },
        )
        .result()
        .await;
    assert_eq!(completed(settled).final_text, "paid");
    let r = completed(
        runner(inner.clone(), false)
            .resume(&parent(&counter, false), &thread, &run)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_child_is_resumed_by_the_parent_when_the_settlement_alone_did_not_finish_it() {
    let (thread, run, child_run) = ids();
    let k = commit_writing(&format!("effect:{child_run}:1:c1")).await;
    let inner = Arc::new(MemoryStore::new());
    let crashing = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    crashing.crash_after_commits(k, CrashMode::Down);
    let counter = InvocationCounter::new();
    let _ = runner(crashing, false)
        .run_with_id(&parent(&counter, false), &thread, run.clone(), "go")
        .result()
        .await;
    // The settlement's resume crashes right after the settlement is written.
    let settling = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    settling.crash_after_commits(1, CrashMode::Down);
    let s = runner(settling, false)
        .resume_settling(
            &child(&counter, false),
            &thread,
            &child_run,
            "c1",
            Settlement::Ran {
                output: json!({"charged": 5}),
            },
        )
        .result()
        .await;
    assert!(s.is_err(), "{s:?}");
    // A plain resume of the parent resumes the child from the settlement and completes.
    let r = completed(
        runner(inner.clone(), false)
            .resume(&parent(&counter, false), &thread, &run)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_error_in_a_child_stops_the_parent_and_is_never_recorded() {
    let (thread, run, child_run) = ids();
    // One commit of the child (its post_llm of step 1) fails once with Unavailable.
    let n = commit_writing(&format!("checkpoint:{child_run}:1:post_llm")).await;
    let inner = Arc::new(MemoryStore::new());
    let flaky = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    flaky.fail_nth(Some(Op::Commit), n, ErrorKind::Unavailable);
    let counter = InvocationCounter::new();
    let err = runner(flaky.clone(), false)
        .run_with_id(&parent(&counter, false), &thread, run.clone(), "go")
        .result()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(flaky.injected_failures(), 1);
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(err.message().contains(child_run.as_str()), "{err}");
    assert!(err.message().contains("tool call d1"), "{err}");
    let row = delegation_row(&inner, &thread, &run).expect("the delegation's intent");
    assert_eq!(row["status"], "intent", "nothing recorded for d1: {row}");
    assert_eq!(counter.get("c1"), 0);

    let r = completed(
        runner(flaky, false)
            .resume(&parent(&counter, false), &thread, &run)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_through_delegation_a_paused_child_pauses_the_parent() {
    let (thread, run, child_run) = ids();
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let out = runner(store.clone(), false)
        .run_with_id(&parent(&counter, true), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Paused { request } = out else {
        panic!("the parent pauses with its child: {out:?}")
    };
    assert_eq!(request.tool_call_id.as_deref(), Some("d1"));
    assert_eq!(request.payload["child_run_id"], child_run.as_str());
    assert_eq!(request.payload["child_tool_call_id"], "c1");
    assert_eq!(request.payload["tool_name"], "charge");
    assert_eq!(request.payload["subagent"], "payer");
    assert_eq!(request.reason.as_deref(), Some("charging needs approval"));
    let row = delegation_row(&store, &thread, &run).expect("the delegation's intent");
    assert_eq!(row["status"], "intent", "nothing recorded for d1: {row}");
    assert_eq!(counter.get("c1"), 0);

    // A plain resume asks again; nothing runs.
    let again = runner(store.clone(), false)
        .resume(&parent(&counter, true), &thread, &run)
        .result()
        .await
        .unwrap();
    assert!(matches!(again, Outcome::Paused { .. }), "{again:?}");
    assert_eq!(counter.get("c1"), 0);

    // The decision, given to the parent, reaches the child's paused call.
    let r = completed(
        runner(store.clone(), false)
            .resume_with_decision(&parent(&counter, true), &thread, &run, Decision::Approve)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_through_delegation_reaches_the_child_and_the_parent_completes() {
    let (thread, run, _) = ids();
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let out = runner(store.clone(), false)
        .run_with_id(&parent(&counter, true), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    let r = completed(
        runner(store.clone(), false)
            .resume_with_decision(
                &parent(&counter, true),
                &thread,
                &run,
                Decision::Deny("no money today".into()),
            )
            .result()
            .await,
    );
    assert_eq!(r.final_text, "done");
    assert_eq!(counter.get("c1"), 0, "denied: never charged");
    let subs: Vec<_> = r.subagent_executions.iter().map(|s| s.success).collect();
    assert_eq!(
        subs,
        [true],
        "the child completed (its own call was denied)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_child_stops_the_parent_which_stays_resumable() {
    let (thread, run, child_run) = ids();
    // Crash right after the child's first commit, then corrupt the child's latest record.
    let k = commit_writing(&format!("checkpoint:{child_run}:0:runtime_state")).await;
    let inner = Arc::new(MemoryStore::new());
    let crashing = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    crashing.crash_after_commits(k, CrashMode::Down);
    let counter = InvocationCounter::new();
    let first = runner(crashing, false)
        .run_with_id(&parent(&counter, false), &thread, run.clone(), "go")
        .result()
        .await;
    assert!(first.is_err(), "{first:?}");
    let epoch = inner.claim(&thread, &child_run).await.unwrap();
    inner
        .commit(&afk_core::store::Commit {
            thread: thread.clone(),
            run: child_run.clone(),
            epoch,
            puts: Vec::new(),
            latest: Some(b"{not a record".to_vec()),
            attention: None,
        })
        .await
        .unwrap();

    let err = runner(inner.clone(), false)
        .resume(&parent(&counter, false), &thread, &run)
        .result()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.message().contains(child_run.as_str()), "{err}");
    assert!(err.message().contains("tool call d1"), "{err}");
    assert!(
        common::latest_terminal(&inner, &thread, run.as_str()).is_none(),
        "the child's corruption does not end the parent"
    );
    let row = delegation_row(&inner, &thread, &run).expect("the delegation's intent");
    assert_eq!(row["status"], "intent", "nothing recorded for d1: {row}");

    // The operator removes the broken child; the parent's resume starts it again.
    inner.delete_run(&thread, &child_run).await.unwrap();
    let r = completed(
        runner(inner.clone(), false)
            .resume(&parent(&counter, false), &thread, &run)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_replayed_from_its_result_row_keeps_its_subagent_record() {
    let (thread, run, _) = ids();
    // Crash right after the parent's result row for `d1` is durable, before the snapshot that
    // would hold the delegation's record: the resume replays `d1` from its row.
    let rows = commits_writing(&format!("effect:{run}:1:d1")).await;
    assert_eq!(rows.len(), 2, "an intent row, then a result row: {rows:?}");
    let inner = Arc::new(MemoryStore::new());
    let crashing = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    crashing.crash_after_commits(rows[1], CrashMode::Down);
    let counter = InvocationCounter::new();
    let first = runner(crashing, false)
        .run_with_id(&parent(&counter, false), &thread, run.clone(), "go")
        .result()
        .await;
    assert!(first.is_err(), "{first:?}");
    let row = delegation_row(&inner, &thread, &run).expect("the delegation's row");
    assert_eq!(row["status"], "done", "{row}");

    let r = completed(
        runner(inner.clone(), false)
            .resume(&parent(&counter, false), &thread, &run)
            .result()
            .await,
    );
    assert_delegated_once(&r, &counter);
    assert_eq!(r.state_snapshot.replayed_effect_count, 1, "d1 was replayed");
}
