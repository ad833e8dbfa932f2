//! A run resumed by an agent that no longer has the tool a pending call names (a new version
//! of the application, declared compatible with the old one): the effect journal still
//! decides. A stored result is replayed, as the uncrashed run had it; an intent without a
//! result is `EffectUncertain`, since nothing says whether the tool ran or what it was. Only a
//! call with no row, or one that would have to run again, is an unknown tool's failed call.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Outcome};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{effect_rows, resp, runner};
use serde_json::{Value, json};

fn script() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(vec![
        resp(json!({"text": "two calls", "tool_calls": [
            {"id": "a1", "tool_name": "add", "arguments": {"a": 1, "b": 1}},
            {"id": "p1", "tool_name": "charge", "arguments": {"amount": 3}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ])
}

/// The agent the run started with: `add` (idempotent) and `charge` (at-most-once).
fn old_agent(counter: &InvocationCounter) -> Agent {
    Agent::new("shop", "", "m", script())
        .with_version("1")
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_tool(common::charge(counter))
}

/// The new version: neither tool, and it may resume version 1's runs.
fn new_agent() -> Agent {
    Agent::new("shop", "", "m", script())
        .with_version("2")
        .compatible_with(["1"])
}

/// Crashed after every commit in turn, then resumed by the agent without the tools.
#[tokio::test]
async fn the_journal_decides_for_tools_the_agent_no_longer_has() {
    let t = ThreadId::new("t_changed").unwrap();
    let run = RunId::new("r").unwrap();
    let (mut replayed, mut uncertain) = (0, 0);
    for n in 0..30 {
        let counter = InvocationCounter::new();
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(n, CrashMode::Down);
        let first = runner(fault.clone(), false)
            .run_with_id(&old_agent(&counter), &t, run.clone(), "go")
            .result()
            .await;
        if first.is_ok() {
            break;
        }
        if !inner.snapshot(&t).contains_key("checkpoint:r:latest") {
            continue;
        }
        let before = effect_rows(&inner, &t);
        let row = |id: &str| {
            before
                .iter()
                .find(|(k, _)| k.ends_with(&format!(":{id}")))
                .map(|(_, r)| r.clone())
        };
        let (add_row, charge_row) = (row("a1"), row("p1"));
        let out = runner(inner.clone(), false)
            .resume(&new_agent(), &t, &run)
            .result()
            .await;
        let intent = |r: &Option<Value>| r.as_ref().is_some_and(|r| r["status"] == "intent");
        if intent(&add_row) || intent(&charge_row) {
            // A call that may have run, of a tool the new agent does not know: it must not
            // be called failed (nor run). The first such call of the batch is named.
            let first = if intent(&add_row) { "a1" } else { "p1" };
            let e = out.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::EffectUncertain, "crash at {n}: {e}");
            assert_eq!(
                e.key(),
                Some(format!("effect:r:1:{first}").as_str()),
                "crash at {n}"
            );
            assert!(e.message().contains("no such tool"), "crash at {n}: {e}");
            uncertain += 1;
            continue;
        }
        let out = out.unwrap_or_else(|e| panic!("crash at {n}: {e}"));
        let Outcome::Completed(res) = out else {
            panic!("crash at {n}: {out:?}")
        };
        let add = &res.tool_executions[0];
        match add_row {
            Some(r) if r["status"] == "done" => {
                assert!(add.success, "crash at {n}: {add:?}");
                assert_eq!(add.output, json!({"result": 2}), "crash at {n}");
                replayed += 1;
            }
            _ => assert!(
                !add.success,
                "crash at {n}: no stored result, no tool: {add:?}"
            ),
        }
    }
    assert!(replayed >= 1, "no case replayed a stored result");
    assert!(uncertain >= 1, "no case left the charge uncertain");
}
