//! `Runner::settle` and `Runner::decide`: answering a stopped run without its agent and
//! without resuming it (the library side of `afk settle` / `afk decide`). The settled row is
//! the one `resume_settling` writes, and a later *plain* `resume` continues from it; refusals
//! write nothing, not even a claim.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Decision, Outcome, Recorded, Runner, Settlement};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, lone_intent, script};
use serde_json::json;

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_operator").unwrap(),
        RunId::new("run_operator").unwrap(),
    )
}

fn runner(store: Arc<dyn Store>) -> Runner {
    common::runner(store, true)
}

/// Everything the thread holds, fence included.
fn all(store: &MemoryStore) -> BTreeMap<String, Vec<u8>> {
    store.snapshot(&ids().0)
}

/// A run crashed after `charge` (call `c2`) started and before its result was durable.
async fn uncertain() -> Arc<MemoryStore> {
    let (thread, run) = ids();
    for k in 0..60 {
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(k, CrashMode::Down);
        let counter = InvocationCounter::new();
        let a = agent_with(ScriptedLlm::new(script()), &counter);
        let res = common::runner(fault, false)
            .run_with_id(&a, &thread, run.clone(), "go")
            .result()
            .await;
        if res.is_err() && counter.get("c2") == 1 && lone_intent(&inner, &thread, "c2") {
            return inner;
        }
    }
    panic!("no commit index leaves c2 with a lone intent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_written_without_resuming_is_used_by_a_plain_resume() {
    let (thread, run) = ids();
    let store = uncertain().await;
    let ran = || Settlement::Ran {
        output: json!({"charged": 5}),
    };

    // Refused: not in the pending batch. Nothing written, not even the claim.
    let before = all(&store);
    let e = runner(store.clone())
        .settle(&thread, &run, "nope", ran())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(all(&store), before);

    let w = runner(store.clone())
        .settle(&thread, &run, "c2", ran())
        .await;
    assert_eq!(w.unwrap(), Recorded::Written);
    let again = runner(store.clone())
        .settle(&thread, &run, "c2", ran())
        .await;
    assert_eq!(again.unwrap(), Recorded::AlreadyStored);
    let before = all(&store);
    let other = runner(store.clone())
        .settle(&thread, &run, "c2", Settlement::DidNotRun)
        .await
        .unwrap_err();
    assert_eq!(other.kind(), ErrorKind::Conflict, "{other}");
    assert_eq!(all(&store), before, "a refused settlement wrote");

    let counter = InvocationCounter::new();
    let a = agent_with(ScriptedLlm::new(script()), &counter);
    let out = runner(store.clone())
        .resume(&a, &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    assert_eq!(counter.get("c2"), 0, "the settled charge ran again");
    let c2 = r
        .tool_executions
        .iter()
        .find(|t| t.tool_call_id.as_deref() == Some("c2"))
        .unwrap();
    assert_eq!((c2.success, &c2.output), (true, &json!({"charged": 5})));

    let done = all(&store);
    let e = runner(store.clone())
        .settle(&thread, &run, "c2", ran())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert_eq!(all(&store), done, "settling a terminal run wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_written_without_resuming_is_applied_by_a_plain_resume() {
    use afk_core::runner::{GateDecision, ToolGate};
    use afk_core::schema::ToolCall;

    #[derive(Debug)]
    struct AskForCharges;
    impl ToolGate for AskForCharges {
        fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
            if call.tool_name == "charge" {
                GateDecision::RequestApproval("a human approves charges".into())
            } else {
                GateDecision::Allow
            }
        }
    }
    let (thread, run) = ids();
    let store = Arc::new(MemoryStore::new());
    let gated = |c: &InvocationCounter| {
        agent_with(ScriptedLlm::new(script()), c).with_gate(Arc::new(AskForCharges))
    };
    let counter = InvocationCounter::new();
    let out = runner(store.clone())
        .run_with_id(&gated(&counter), &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");

    let w = runner(store.clone())
        .decide(&thread, &run, Decision::Approve)
        .await;
    assert_eq!(w.unwrap(), Recorded::Written);
    let again = runner(store.clone())
        .decide(&thread, &run, Decision::Approve)
        .await;
    assert_eq!(again.unwrap(), Recorded::AlreadyStored);
    let before = all(&store);
    let other = runner(store.clone())
        .decide(&thread, &run, Decision::Deny("no".into()))
        .await
        .unwrap_err();
    assert_eq!(other.kind(), ErrorKind::Conflict, "{other}");
    assert_eq!(all(&store), before, "a refused decision wrote");

    let counter = InvocationCounter::new();
    let out = runner(store.clone())
        .resume(&gated(&counter), &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused again: the decision was not applied")
    };
    assert_eq!(counter.get("c2"), 1);
    let c2 = r
        .tool_executions
        .iter()
        .find(|t| t.tool_call_id.as_deref() == Some("c2"))
        .unwrap();
    assert_eq!(c2.output, json!({"charged": 5}));

    let done = all(&store);
    let e = runner(store.clone())
        .decide(&thread, &run, Decision::Approve)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.message().contains("not paused"), "{e}");
    assert_eq!(all(&store), done);
}
