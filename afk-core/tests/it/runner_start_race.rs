//! Two starts of one run id at once. A fresh start checks that the run does not exist, then
//! claims it; another runner can start the run in between. The start that claims last must see
//! that run and run nothing: before this was checked after the claim, it started the run over
//! (the latest pointer back at step 0, its steps taken for fresh, so the effect journal unread)
//! and executed an at-most-once effect a second time. The same holds for a child run that two
//! parents (one of them already fenced) delegate to at once.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, Outcome};
use afk_core::store::{Commit, FaultStore, Op, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::gate::{self, Gate, GatedTool};
use common::{resp, runner};
use serde_json::json;

/// `common::payer`, its `charge` behind `gate` if given.
fn payer(counter: &InvocationCounter, gate: Option<Arc<Gate>>) -> Agent {
    let charge = common::charge(counter);
    common::payer(match gate {
        Some(gate) => Arc::new(GatedTool {
            inner: charge,
            gate,
        }),
        None => charge,
    })
}

/// The parent delegates to `payer` (call `d1`), then answers "done".
fn boss(counter: &InvocationCounter) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "delegating", "tool_calls": [
            {"id": "d1", "tool_name": "payer", "arguments": {"input": "pay 5"}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    Agent::new("boss", "Delegate.", "m1", llm).with_subagent(payer(counter, None))
}

/// Wait for a gate to be reached; a test that never gets there fails instead of hanging.
async fn reached(gate: &Gate) {
    tokio::time::timeout(Duration::from_secs(60), gate.reached())
        .await
        .unwrap_or_else(|_| panic!("the gate was not reached: {:?}", gate.seen()));
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_race").unwrap(),
        RunId::new("run_race").unwrap(),
    )
}

/// Runner `b` (through a gated store) checks that the run does not exist and is held right
/// before its claim. Returns its handle, the gate and the shared store.
async fn start_held_before_claim(
    counter: &InvocationCounter,
) -> (afk_core::runner::RunHandle, Arc<Gate>, Arc<MemoryStore>) {
    let (thread, run) = ids();
    let inner = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    gate.arm(2);
    let gated = gate::gated(inner.clone(), gate.clone(), counter.clone());
    let b = runner(gated, true).run_with_id(&payer(counter, None), &thread, run, "go");
    reached(&gate).await;
    assert_eq!(
        gate.hit_label().as_deref(),
        Some("claim"),
        "{:?}",
        gate.seen()
    );
    (b, gate, inner)
}

#[tokio::test]
async fn a_start_that_loses_the_race_to_a_finished_run_runs_nothing() {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let (b, gate, inner) = start_held_before_claim(&counter).await;

    // Runner `a` starts the same run id and finishes it while `b` waits to claim.
    let a = runner(inner.clone(), true)
        .run_with_id(&payer(&counter, None), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(done) = a else {
        panic!("a: {a:?}")
    };
    assert_eq!(done.final_text, "paid");
    assert_eq!(counter.get("c1"), 1);

    gate.release();
    let err = b.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(counter.get("c1"), 1, "the losing start charged again");

    // The stored run is `a`'s, finished: a resume returns its result and runs nothing.
    let again = runner(inner, true)
        .resume(&payer(&counter, None), &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = again else {
        panic!("resume: {again:?}")
    };
    assert_eq!(
        (r.state.as_str(), r.final_text.as_str()),
        ("completed", "paid")
    );
    assert_eq!(counter.get("c1"), 1);
}

#[tokio::test]
async fn a_start_that_loses_the_race_to_a_live_run_runs_nothing() {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let (b, gate, inner) = start_held_before_claim(&counter).await;

    // Runner `a` starts the run and is held as its charge is about to run (its intent is
    // durable).
    let tool_gate = Gate::new();
    tool_gate.arm(1);
    let a = runner(inner.clone(), true).run_with_id(
        &payer(&counter, Some(tool_gate.clone())),
        &thread,
        run.clone(),
        "go",
    );
    reached(&tool_gate).await;
    assert_eq!(tool_gate.hit_label().as_deref(), Some("tool c1"));

    // `b` claims now: it finds the run and runs nothing (its claim fences `a`).
    gate.release();
    let err = b.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(counter.get("c1"), 0, "the losing start charged");

    // `a`'s charge runs (its intent was durable before `b`'s claim), then `a` is fenced.
    tool_gate.release();
    let err = a.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(counter.get("c1"), 1);

    // The charge may or may not have happened as far as the store knows: a resume stops.
    let err = runner(inner, true)
        .resume(&payer(&counter, None), &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::EffectUncertain, "{err}");
    assert_eq!(counter.get("c1"), 1);
}

#[tokio::test]
async fn a_child_run_started_by_two_parents_at_once_charges_once() {
    let (thread, run) = ids();
    // Where runner `b`'s parent claims the child: its second claim.
    let probe = Gate::new();
    let probe_counter = InvocationCounter::new();
    let gated = gate::gated(Arc::new(MemoryStore::new()), probe.clone(), probe_counter);
    runner(gated, true)
        .run_with_id(&boss(&InvocationCounter::new()), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    let seen = probe.seen();
    let child_claim = seen
        .iter()
        .enumerate()
        .filter(|(_, l)| *l == "claim")
        .nth(1)
        .map(|(i, _)| i as u64 + 1)
        .unwrap_or_else(|| panic!("no child claim in {seen:?}"));

    let counter = InvocationCounter::new();
    let inner = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    gate.arm(child_claim);
    let gated = gate::gated(inner.clone(), gate.clone(), counter.clone());
    let b = runner(gated, true).run_with_id(&boss(&counter), &thread, run.clone(), "go");
    reached(&gate).await;
    assert_eq!(gate.hit_label().as_deref(), Some("claim"));

    // Runner `a` resumes the parent (fencing `b`'s), re-runs the idempotent delegation, and
    // the child charges and finishes, and so does the parent.
    let a = runner(inner.clone(), true)
        .resume(&boss(&counter), &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(done) = a else {
        panic!("a: {a:?}")
    };
    assert_eq!(done.final_text, "done");
    assert_eq!(counter.get("c1"), 1);

    // `b`'s child claims now: it finds the finished child and takes its result; `b`'s parent
    // is fenced.
    gate.release();
    let err = b.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(counter.get("c1"), 1, "the child charged twice");
}

#[tokio::test]
async fn a_start_over_records_without_a_pointer_runs_nothing() {
    // What an import (or a fixture load) stopped before its pointer leaves: a claim and records.
    let (thread, run) = ids();
    let inner = Arc::new(MemoryStore::new());
    let epoch = inner.claim(&thread, &run).await.unwrap();
    let key = format!("checkpoint:{run}:1:pre_llm");
    inner
        .commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: vec![(key.clone(), b"{}".to_vec())],
            latest: None,
            attention: None,
        })
        .await
        .unwrap();
    let mut before = inner.snapshot(&thread);
    let counter = InvocationCounter::new();
    let err = runner(inner.clone(), true)
        .run_with_id(&payer(&counter, None), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(err.key(), Some(key.as_str()));
    assert_eq!(counter.get("c1"), 0);
    let mut after = inner.snapshot(&thread);
    let fence = afk_core::store::run_key(&run);
    before.remove(&fence);
    after.remove(&fence);
    assert_eq!(after, before, "the refused start wrote");
}

/// The look under the claim costs a clean run (and its fresh child) nothing but one `get` for
/// the child: no `list`, no second look at the parent.
#[tokio::test]
async fn a_clean_run_with_a_child_looks_once_and_lists_nothing() {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let store = Arc::new(FaultStore::new(MemoryStore::new()));
    let out = runner(store.clone(), true)
        .run_with_id(&boss(&counter), &thread, run, "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    // The parent's look before its claim, the child's under its claim.
    assert_eq!(
        (
            store.calls(Op::Claim),
            store.calls(Op::Get),
            store.calls(Op::List)
        ),
        (2, 2, 0)
    );
}
