//! A model that gives two calls of one batch the same id: each call still gets an effect row,
//! an idempotency key and (for a delegation) a child run of its own, so a resume after a crash
//! anywhere in the step replays each call's own result; it neither replays one call's output
//! for the other nor stops on an input-hash mismatch. The transcript keeps the ids the model
//! gave (a provider matches tool results to calls by them).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{
    Agent, EffectPolicy, Outcome, Settlement, Tool, ToolContext, ToolError, ToolSpec,
};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{effect_rows, essence, resp, resume_or_start, runner};
use serde_json::{Value, json};

/// `add` twice and `echo` once, all three with the id `c1` (and `c1.1`, the alias a repeat
/// at position 1 would get, taken by a fourth call), then the answer.
fn script() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(vec![
        resp(json!({"text": "three calls, one id", "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 1}},
            {"id": "c1", "tool_name": "add", "arguments": {"a": 5, "b": 5}},
            {"id": "c1.1", "tool_name": "echo", "arguments": {"text": "taken"}},
            {"id": "c1", "tool_name": "echo", "arguments": {"text": "third"}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ])
}

/// `add`, recording the idempotency key of each call it gets.
#[derive(Debug, Default)]
struct Add {
    keys: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Tool for Add {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn call(&self, ctx: ToolContext, a: Value) -> Result<Value, ToolError> {
        self.keys.lock().unwrap().push(ctx.idempotency_key);
        Ok(json!({"result": a["a"].as_i64().unwrap_or(0) + a["b"].as_i64().unwrap_or(0)}))
    }
}

/// The agent, and its `add` (which saw the idempotency keys).
fn agent(counter: &InvocationCounter) -> (Agent, Arc<Add>) {
    let add = Arc::new(Add::default());
    let agent = Agent::new("dup", "", "m", script())
        .with_tool(add.clone())
        .with_tool(ScriptedTool::echo(counter.clone()));
    (agent, add)
}

/// The essence of a completed run's result.
fn completed(out: &Outcome) -> Value {
    match out {
        Outcome::Completed(res) => essence(res),
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn each_call_of_a_repeated_id_has_its_own_row_and_key() {
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let (agent, add) = agent(&counter);
    let t = ThreadId::new("t_dup").unwrap();
    let out = runner(store.clone(), true)
        .run_with_id(&agent, &t, RunId::new("r").unwrap(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    let outputs: Vec<(Option<String>, Value)> = res
        .tool_executions
        .iter()
        .map(|e| (e.tool_call_id.clone(), e.output.clone()))
        .collect();
    assert_eq!(
        outputs,
        [
            (Some("c1".into()), json!({"result": 2})),
            (Some("c1".into()), json!({"result": 10})),
            (Some("c1.1".into()), json!({"echo": "taken"})),
            (Some("c1".into()), json!({"echo": "third"})),
        ]
    );
    let rows = effect_rows(&store, &t);
    let names: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "effect:r:1:c1",
            "effect:r:1:c1.1",
            "effect:r:1:c1.1.",
            "effect:r:1:c1.3"
        ]
    );
    let outs: Vec<&Value> = rows.iter().map(|(_, r)| &r["output"]).collect();
    assert_eq!(
        outs,
        [
            &json!({"result": 2}),
            &json!({"echo": "taken"}),
            &json!({"result": 10}),
            &json!({"echo": "third"})
        ]
    );
    let mut idem: Vec<&str> = rows
        .iter()
        .map(|(_, r)| r["idempotency_key"].as_str().unwrap())
        .collect();
    idem.sort_unstable();
    idem.dedup();
    assert_eq!(idem.len(), 4, "idempotency keys shared: {rows:?}");
    let keys = add.keys.lock().unwrap().clone();
    assert_eq!(keys, ["r:1:c1", "r:1:c1.1."], "the two adds' keys");
}

/// An at-most-once `charge` that writes each amount it charges into a ledger.
#[derive(Debug, Default)]
struct Charge {
    ledger: Mutex<Vec<i64>>,
}

#[async_trait::async_trait]
impl Tool for Charge {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "charge".into(),
            description: "charges".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::AtMostOnce
    }

    async fn call(&self, _ctx: ToolContext, a: Value) -> Result<Value, ToolError> {
        let amount = a["amount"].as_i64().unwrap_or(0);
        self.ledger.lock().unwrap().push(amount);
        Ok(json!({"charged": amount}))
    }
}

/// Two at-most-once charges with one id, crashed after every commit in turn: a crash between
/// a charge's intent and its result row stops the run with `EffectUncertain` naming the call
/// by its journal id (`p1.1` for the second), which is what `settle` takes; settled from the
/// ledger, the run ends with each charge made exactly once.
#[tokio::test]
async fn an_uncertain_repeat_is_named_and_settled_by_its_own_id() {
    let t = ThreadId::new("t_dup_charge").unwrap();
    let run = RunId::new("r").unwrap();
    let mut named = Vec::new();
    for n in 0..40 {
        let llm = ScriptedLlm::new(vec![
            resp(json!({"text": "two charges", "tool_calls": [
                {"id": "p1", "tool_name": "charge", "arguments": {"amount": 3}},
                {"id": "p1", "tool_name": "charge", "arguments": {"amount": 4}}]})),
            resp(json!({"text": "paid", "tool_calls": []})),
        ]);
        let charge = Arc::new(Charge::default());
        let agent = Agent::new("payer", "", "m", llm).with_tool(charge.clone());
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(n, CrashMode::Down);
        let first = runner(fault.clone(), false)
            .run_with_id(&agent, &t, run.clone(), "go")
            .result()
            .await;
        let crashed = first.is_err();
        let r = runner(inner.clone(), false);
        let mut out = if crashed {
            resume_or_start(&r, &agent, &inner, &t, &run).result().await
        } else {
            first
        };
        while let Err(e) = &out {
            assert_eq!(e.kind(), ErrorKind::EffectUncertain, "crash at {n}: {e}");
            let key = e.key().unwrap_or_default().to_owned();
            let id = key.rsplit(':').next().unwrap_or_default().to_owned();
            named.push(id.clone());
            let amount = if id == "p1" { 3 } else { 4 };
            let settlement = if charge.ledger.lock().unwrap().contains(&amount) {
                Settlement::Ran {
                    output: json!({"charged": amount}),
                }
            } else {
                Settlement::DidNotRun
            };
            r.settle(&t, &run, &id, settlement)
                .await
                .unwrap_or_else(|e| panic!("crash at {n}: settle {id}: {e}"));
            out = r.resume(&agent, &t, &run).result().await;
        }
        let out = out.unwrap();
        let Outcome::Completed(res) = &out else {
            panic!("{out:?}")
        };
        let charged: Vec<&Value> = res.tool_executions.iter().map(|e| &e.output).collect();
        assert_eq!(
            charged,
            [&json!({"charged": 3}), &json!({"charged": 4})],
            "crash at {n}"
        );
        let mut ledger = charge.ledger.lock().unwrap().clone();
        ledger.sort_unstable();
        assert_eq!(ledger, [3, 4], "crash at {n}: each charge exactly once");
        if !crashed {
            break;
        }
    }
    assert!(
        named.iter().any(|id| id == "p1.1"),
        "the second charge was never uncertain: {named:?}"
    );
    assert!(
        named.iter().any(|id| id == "p1"),
        "the first charge was never uncertain: {named:?}"
    );
}

/// Crashed after every commit of the run in turn and resumed: always the uncrashed result,
/// never a `CheckpointCorrupt` from one call's row read for another.
#[tokio::test]
async fn a_crash_anywhere_resumes_to_the_uncrashed_result() {
    let counter = InvocationCounter::new();
    let (agent, _) = agent(&counter);
    let t = ThreadId::new("t_dup_crash").unwrap();
    let clean = {
        let store = Arc::new(MemoryStore::new());
        let out = runner(store, false)
            .run_with_id(&agent, &t, RunId::new("r").unwrap(), "go")
            .result()
            .await
            .unwrap();
        completed(&out)
    };
    let mut crashed_mid_batch = 0;
    for n in 0..40 {
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(n, CrashMode::Down);
        let run = RunId::new("r").unwrap();
        let first = runner(fault.clone(), false)
            .run_with_id(&agent, &t, run.clone(), "go")
            .result()
            .await;
        if let Ok(out) = &first {
            assert_eq!(completed(out), clean, "uncrashed at {n}");
            break;
        }
        let rows = effect_rows(&inner, &t);
        if rows.iter().any(|(_, r)| r["status"] == "done")
            && !inner
                .snapshot(&t)
                .keys()
                .any(|k| k.ends_with(":post_tool_batch"))
        {
            crashed_mid_batch += 1;
        }
        let out = resume_or_start(&runner(inner.clone(), false), &agent, &inner, &t, &run)
            .result()
            .await
            .unwrap_or_else(|e| panic!("resume after a crash at commit {n}: {e}"));
        assert_eq!(completed(&out), clean, "crash at commit {n}");
    }
    assert!(
        crashed_mid_batch >= 2,
        "only {crashed_mid_batch} crashes with results and no post_tool_batch"
    );
}

/// Two delegations the model gave one id run as two child runs (`d1` and `d1.1`), each
/// delegation answered by its own child; before, both went to one child run.
#[tokio::test]
async fn repeated_delegation_ids_get_a_child_run_each() {
    let child_llm = ScriptedLlm::new(vec![resp(json!({"text": "helped", "tool_calls": []}))]);
    let child = Agent::new("helper", "Help.", "m", child_llm);
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "delegating twice", "tool_calls": [
            {"id": "d1", "tool_name": "helper", "arguments": {"input": "one"}},
            {"id": "d1", "tool_name": "helper", "arguments": {"input": "two"}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    let parent = Agent::new("boss", "Delegate.", "m", llm).with_subagent(child);
    let store = Arc::new(MemoryStore::new());
    let t = ThreadId::new("t_dup_sub").unwrap();
    let run = RunId::new("boss").unwrap();
    let out = runner(store.clone(), true)
        .run_with_id(&parent, &t, run.clone(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    let answered_by: Vec<&Value> = res
        .tool_executions
        .iter()
        .map(|e| &e.output["run_id"])
        .collect();
    let children: Vec<String> = ["d1", "d1.1"]
        .iter()
        .map(|id| afk_core::runner::child_run_id(&run, 1, id).to_string())
        .collect();
    assert_eq!(
        answered_by,
        [&json!(children[0]), &json!(children[1])],
        "each delegation answered by its own child run"
    );
    let snap = store.snapshot(&t);
    for child in &children {
        assert!(
            snap.contains_key(&format!("checkpoint:{child}:latest")),
            "no child run {child}"
        );
    }
}
