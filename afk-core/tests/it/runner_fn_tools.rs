//! Tools made from functions, driven by the runner: typed arguments decoded from the model's
//! call, the output recorded, and, after a crash between a call's intent and its result, the
//! declared policy applied: an idempotent function runs again with the same idempotency key,
//! an at-most-once one does not run again and the run stops `EffectUncertain`.

#![allow(clippy::unwrap_used)]

use crate::common::{self, resp};

use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::ScriptedLlm;
use afk_core::runner::{Agent, FnTool, Outcome, ToolContext, ToolRef};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    amount: u64,
}

/// What the function saw: one idempotency key per execution.
type Seen = Arc<Mutex<Vec<String>>>;

/// A `transfer` function tool of the given policy that records each execution's key and,
/// when `crash` is set, takes the store down as it runs (after its intent is durable,
/// before its result is).
fn transfer(at_most_once: bool, seen: Seen, crash: Option<Arc<FaultStore>>) -> ToolRef {
    let f = move |ctx: ToolContext, t: Transfer| {
        let (seen, crash) = (seen.clone(), crash.clone());
        async move {
            seen.lock().unwrap().push(ctx.idempotency_key);
            if let Some(fault) = crash {
                fault.crash_after_commits(fault.persisted_commits(), CrashMode::Down);
            }
            Ok::<_, std::io::Error>(json!({"sent": t.amount}))
        }
    };
    if at_most_once {
        FnTool::at_most_once("transfer", "Move money", f)
    } else {
        FnTool::idempotent("transfer", "Move money", f)
    }
}

fn agent(tool: ToolRef) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "sending", "tool_calls": [
            {"id": "c1", "tool_name": "transfer", "arguments": {"amount": 5}}]})),
        resp(json!({"text": "sent", "tool_calls": []})),
    ]);
    Agent::new("bank", "Move money.", "m1", llm).with_tool(tool)
}

/// Run until the tool takes the store down; return the store as it was left.
async fn crashed_in_the_tool(at_most_once: bool, seen: &Seen) -> Arc<MemoryStore> {
    let inner = Arc::new(MemoryStore::new());
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    let tool = transfer(at_most_once, seen.clone(), Some(fault.clone()));
    let t = ThreadId::new("t_fn").unwrap();
    let out = common::runner(fault, false)
        .run_with_id(&agent(tool), &t, RunId::new("r").unwrap(), "go")
        .result()
        .await;
    assert!(out.is_err(), "the crash ends the first attempt: {out:?}");
    assert!(
        common::lone_intent(&inner, &t, "c1"),
        "the call's intent is durable, its result is not"
    );
    inner
}

#[tokio::test]
async fn a_function_tool_runs_with_typed_arguments_and_its_output_is_recorded() {
    let seen = Seen::default();
    let store = Arc::new(MemoryStore::new());
    let t = ThreadId::new("t_fn").unwrap();
    let out = common::runner(store, false)
        .run_with_id(
            &agent(transfer(false, seen.clone(), None)),
            &t,
            RunId::new("r").unwrap(),
            "go",
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert_eq!(res.final_text, "sent");
    assert_eq!(res.tool_executions[0].output, json!({"sent": 5}));
    assert_eq!(*seen.lock().unwrap(), ["r:1:c1"]);
}

#[tokio::test]
async fn an_idempotent_function_runs_again_with_the_same_key_after_a_crash() {
    let seen = Seen::default();
    let store = crashed_in_the_tool(false, &seen).await;
    let t = ThreadId::new("t_fn").unwrap();
    let out = common::runner(store, false)
        .resume(
            &agent(transfer(false, seen.clone(), None)),
            &t,
            &RunId::new("r").unwrap(),
        )
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let keys = seen.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "ran before the crash and once on resume");
    assert_eq!(keys[0], keys[1], "the same idempotency key both times");
}

#[tokio::test]
async fn an_at_most_once_function_does_not_run_again_after_a_crash() {
    let seen = Seen::default();
    let store = crashed_in_the_tool(true, &seen).await;
    let t = ThreadId::new("t_fn").unwrap();
    let err = common::runner(store, false)
        .resume(
            &agent(transfer(true, seen.clone(), None)),
            &t,
            &RunId::new("r").unwrap(),
        )
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::EffectUncertain, "{err}");
    assert_eq!(seen.lock().unwrap().len(), 1, "ran once, before the crash");
}
