//! Settling an uncertain at-most-once call with `Runner::resume_settling`: a run crashed
//! between the `charge` call's intent row and its result row stops its resume with
//! `EffectUncertain`; a settlement written by a new runner (another process, later) lets it
//! finish: `Ran` replays the given output without running the tool, `DidNotRun` runs it exactly
//! once more, `Failed` records a failed call. Refused settlements write nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, Outcome, Runner, Settlement, ToolContext};
use afk_core::schema::AgentResult;
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, essence, lone_intent, script};
use serde_json::{Value, json};

fn runner(store: Arc<dyn Store>) -> Runner {
    common::runner(store, false)
}

fn agent(counter: &InvocationCounter) -> (Arc<ScriptedLlm>, Agent) {
    let llm = ScriptedLlm::new(script());
    let agent = agent_with(llm.clone(), counter);
    (llm, agent)
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_settle").unwrap(),
        RunId::new("run_settle").unwrap(),
    )
}

async fn uncrashed() -> AgentResult {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let (_, a) = agent(&counter);
    let out = runner(Arc::new(MemoryStore::new()))
        .run_with_id(&a, &thread, run, "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    *r
}

/// The store of a run crashed after `charge` (call `c2`) ran but before its result row was
/// durable, and the counter of tool executions so far.
async fn crashed_between_intent_and_result() -> (Arc<MemoryStore>, InvocationCounter) {
    let (thread, run) = ids();
    for k in 0..60 {
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(k, CrashMode::Down);
        let counter = InvocationCounter::new();
        let (_, a) = agent(&counter);
        let res = runner(fault)
            .run_with_id(&a, &thread, run.clone(), "go")
            .result()
            .await;
        if res.is_err() && counter.get("c2") == 1 && lone_intent(&inner, &thread, "c2") {
            println!("crash after commit {k}");
            return (inner, counter);
        }
    }
    panic!("no commit index leaves c2 ran with a lone intent");
}

/// The thread's records without the claim epochs (a refused settlement still claims the run).
fn records(store: &MemoryStore) -> BTreeMap<String, Vec<u8>> {
    let (thread, _) = ids();
    store
        .snapshot(&thread)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("run:"))
        .collect()
}

fn effect_row(store: &MemoryStore, id: &str) -> Value {
    effect_entry(store, id).1
}

/// The step and the row of call `id`'s effect row (`effect:<run>:<step>:<id>`).
fn effect_entry(store: &MemoryStore, id: &str) -> (u64, Value) {
    let (thread, _) = ids();
    let snap = store.snapshot(&thread);
    let (key, v) = snap
        .iter()
        .find(|(k, _)| k.starts_with("effect:") && k.ends_with(&format!(":{id}")))
        .unwrap();
    let step = key.rsplit(':').nth(1).unwrap().parse().unwrap();
    (step, serde_json::from_slice(v).unwrap())
}

/// Resume with a new runner and expect `EffectUncertain` naming `c2` and `charge`.
async fn expect_uncertain(store: &Arc<MemoryStore>) {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let (llm, a) = agent(&counter);
    let e = runner(store.clone())
        .resume(&a, &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::EffectUncertain, "{e}");
    assert!(
        e.message().contains("c2") && e.message().contains("'charge'"),
        "{e}"
    );
    assert!(e.key().is_some_and(|k| k.ends_with(":c2")), "{e}");
    assert_eq!((counter.total(), llm.calls()), (0, 0));
}

async fn settle(
    store: &Arc<MemoryStore>,
    id: &str,
    s: Settlement,
) -> (afk_core::Result<Outcome>, InvocationCounter) {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let (_, a) = agent(&counter);
    let res = runner(store.clone())
        .resume_settling(&a, &thread, &run, id, s)
        .result()
        .await;
    (res, counter)
}

fn completed(res: afk_core::Result<Outcome>) -> AgentResult {
    match res {
        Ok(Outcome::Completed(r)) => *r,
        other => panic!("not completed: {other:?}"),
    }
}

fn record_of(r: &AgentResult, id: &str) -> (bool, Value, Option<String>) {
    let t = r
        .tool_executions
        .iter()
        .find(|t| t.tool_call_id.as_deref() == Some(id))
        .unwrap();
    (t.success, t.output.clone(), t.error.clone())
}

/// A plain resume of the finished run returns the same result and executes nothing.
async fn terminal_resume_does_nothing(store: &Arc<MemoryStore>, want: &Value) {
    let (thread, run) = ids();
    let before = records(store);
    let counter = InvocationCounter::new();
    let (llm, a) = agent(&counter);
    let r = completed(
        runner(store.clone())
            .resume(&a, &thread, &run)
            .result()
            .await,
    );
    assert_eq!(essence(&r), *want);
    assert_eq!((counter.total(), llm.calls()), (0, 0));
    assert_eq!(records(store), before, "a terminal resume wrote something");
}

/// The rows the runner writes for a call: its intent before it runs (no output, not a
/// success, when it began) and its result after (the output and that output's hash), both
/// with the call's input hash, its tool's name and the idempotency key the tool is handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_intent_and_result_rows_carry_its_hashes_key_and_name() {
    let (_, run) = ids();
    let (crashed, _) = crashed_between_intent_and_result().await;
    let (step, intent) = effect_entry(&crashed, "c2");
    let mut fields: Vec<&str> = intent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "idempotency_key",
            "input_hash",
            "output",
            "started_at_ms",
            "status",
            "success",
            "tool_name"
        ]
    );
    assert_eq!(
        (
            &intent["status"],
            &intent["output"],
            &intent["success"],
            &intent["tool_name"]
        ),
        (
            &json!("intent"),
            &Value::Null,
            &json!(false),
            &json!("charge")
        )
    );
    assert_eq!(
        intent["input_hash"],
        json!(afk_core::hash::input_hash("charge", &json!({"amount": 5})))
    );
    assert_eq!(
        intent["idempotency_key"],
        json!(ToolContext::idempotency_key_for(run.as_str(), step, "c2"))
    );
    assert!(intent["started_at_ms"].as_u64().is_some_and(|t| t > 0));

    let (thread, run) = ids();
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let (_, a) = agent(&counter);
    completed(
        runner(store.clone())
            .run_with_id(&a, &thread, run.clone(), "go")
            .result()
            .await,
    );
    for (id, tool, args) in [
        ("c1", "add", json!({"a": 1, "b": 2})),
        ("c2", "charge", json!({"amount": 5})),
    ] {
        let (step, row) = effect_entry(&store, id);
        let output = &row["output"];
        assert_ne!(output, &Value::Null, "{id}");
        assert_eq!(
            (&row["status"], &row["success"], &row["tool_name"]),
            (&json!("done"), &json!(true), &json!(tool)),
            "{id}"
        );
        assert_eq!(
            row["input_hash"],
            json!(afk_core::hash::input_hash(tool, &args))
        );
        assert_eq!(
            row["output_hash"],
            json!(afk_core::hash::output_hash(output))
        );
        assert_eq!(
            row["idempotency_key"],
            json!(ToolContext::idempotency_key_for(run.as_str(), step, id))
        );
        assert!(row.get("started_at_ms").is_none(), "{id}: {row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_as_ran_replays_the_output_and_never_runs_the_tool_again() {
    let want = essence(&uncrashed().await);
    let (store, first) = crashed_between_intent_and_result().await;
    expect_uncertain(&store).await;

    let (res, counter) = settle(
        &store,
        "c2",
        Settlement::Ran {
            output: json!({"charged": 5}),
        },
    )
    .await;
    let r = completed(res);
    assert_eq!(counter.get("c2"), 0, "the settled charge ran again");
    assert_eq!(first.get("c2") + counter.get("c2"), 1);
    assert_eq!(record_of(&r, "c2"), (true, json!({"charged": 5}), None));
    assert_eq!(
        essence(&r),
        want,
        "same output -> same result as the uncrashed run"
    );
    let row = effect_row(&store, "c2");
    assert_eq!(
        (
            &row["status"],
            &row["settled"],
            &row["settlement"],
            &row["output"]
        ),
        (
            &json!("done"),
            &json!("human"),
            &json!("ran"),
            &json!({"charged": 5})
        )
    );
    terminal_resume_does_nothing(&store, &want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_output_is_what_the_run_records() {
    let (store, _) = crashed_between_intent_and_result().await;
    let (res, counter) = settle(
        &store,
        "c2",
        Settlement::Ran {
            output: json!({"charged": "by hand"}),
        },
    )
    .await;
    let r = completed(res);
    assert_eq!(counter.get("c2"), 0);
    assert_eq!(
        record_of(&r, "c2"),
        (true, json!({"charged": "by hand"}), None)
    );
    assert_eq!(r.final_text, "all done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_as_did_not_run_runs_the_tool_exactly_once_more() {
    let want = essence(&uncrashed().await);
    let (store, first) = crashed_between_intent_and_result().await;
    let key_before = effect_row(&store, "c2")["idempotency_key"].clone();
    let (res, counter) = settle(&store, "c2", Settlement::DidNotRun).await;
    let r = completed(res);
    assert_eq!(
        counter.get("c2"),
        1,
        "the charge must run exactly once more"
    );
    assert_eq!((first.get("c2"), counter.get("c1")), (1, 0));
    assert_eq!(essence(&r), want);
    let row = effect_row(&store, "c2");
    assert_eq!(
        (
            &row["status"],
            &row["success"],
            &row["settlement"],
            &row["idempotency_key"]
        ),
        (
            &json!("done"),
            &json!(true),
            &json!("did_not_run"),
            &key_before
        )
    );
    terminal_resume_does_nothing(&store, &want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_as_failed_records_a_failed_call_without_running_it() {
    let (store, _) = crashed_between_intent_and_result().await;
    let (res, counter) = settle(
        &store,
        "c2",
        Settlement::Failed {
            error: "card declined".into(),
        },
    )
    .await;
    let r = completed(res); // the default tool-failure policy is Continue
    assert_eq!(counter.get("c2"), 0);
    assert_eq!(
        record_of(&r, "c2"),
        (false, Value::Null, Some("card declined".into()))
    );
    assert_eq!(r.final_text, "all done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_settlements_write_nothing_and_a_repeat_must_be_identical() {
    let (store, _) = crashed_between_intent_and_result().await;
    let before = records(&store);
    // c1 has a durable result, not a lone intent.
    let (res, counter) = settle(&store, "c1", Settlement::DidNotRun).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Conflict);
    // c9 is not in the pending batch.
    let (res, counter2) = settle(&store, "c9", Settlement::DidNotRun).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!((counter.total(), counter2.total()), (0, 0));
    assert_eq!(
        records(&store),
        before,
        "a refused settlement wrote something"
    );

    // The settlement is durable, then the settling process crashes.
    let (thread, run) = ids();
    let fault = Arc::new(FaultStore::from_arc(store.clone() as Arc<dyn Store>));
    fault.crash_after_commits(1, CrashMode::Down);
    let counter = InvocationCounter::new();
    let (_, a) = agent(&counter);
    let ran = Settlement::Ran {
        output: json!({"charged": 5}),
    };
    let res = runner(fault)
        .resume_settling(&a, &thread, &run, "c2", ran.clone())
        .result()
        .await;
    assert!(res.is_err(), "the settling process crashed");
    assert_eq!(effect_row(&store, "c2")["settlement"], json!("ran"));

    // A different settlement now conflicts and writes nothing; the identical one resumes.
    let before = records(&store);
    let (res, _) = settle(&store, "c2", Settlement::DidNotRun).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Conflict);
    let (res, _) = settle(
        &store,
        "c2",
        Settlement::Ran {
            output: json!({"charged": 6}),
        },
    )
    .await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(records(&store), before);
    let (res, counter) = settle(&store, "c2", ran).await;
    let r = completed(res);
    assert_eq!(
        (counter.get("c2"), record_of(&r, "c2").1),
        (0, json!({"charged": 5}))
    );

    // Settling a finished run is refused and writes nothing.
    let before = records(&store);
    let (res, _) = settle(&store, "c2", Settlement::DidNotRun).await;
    assert_eq!(res.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(records(&store), before);
}
