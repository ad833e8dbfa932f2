//! Tool outputs larger than the store can keep (its `max_value_size`): the call is recorded as
//! failed with an error that says so, the run goes on, and a resume replays that failure
//! instead of running the tool again. Before, the result row's commit was refused, the run
//! failed, and every resume ran the tool again and failed the same way. Likewise a model answer
//! too large to record is a failed model call (fallback models, then the LLM policy), not a
//! refused commit that every resume would ask the model for again.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Outcome};
use afk_core::schema::AgentResult;
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, Result, RunId, ThreadId};
use common::limited::{self, LimitedStore};
use common::{essence, resp, runner};
use serde_json::{Value, json};

/// The largest value the test store keeps.
const MAX: usize = 64 * 1024;

/// A memory store that keeps values of at most [`MAX`] bytes and says so.
fn capped() -> LimitedStore {
    limited::values(MAX)
}

/// One step: `big` (idempotent) and `charge` (at-most-once) both return 40 KB of text,
/// recorded twice in the step's entry (over a third of [`MAX`] each); `add` returns a number.
/// Then the answer.
fn agent(counter: &InvocationCounter) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "three calls", "tool_calls": [
            {"id": "b1", "tool_name": "big", "arguments": {}},
            {"id": "p1", "tool_name": "charge", "arguments": {"amount": 3}},
            {"id": "a1", "tool_name": "add", "arguments": {"a": 1, "b": 1}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    let blob = |_: &Value| Ok(json!({"page": "x".repeat(40_000)}));
    Agent::new("shop", "", "m", llm)
        .with_tool(ScriptedTool::new(
            "big",
            EffectPolicy::Idempotent,
            counter.clone(),
            blob,
        ))
        .with_tool(ScriptedTool::new(
            "charge",
            EffectPolicy::AtMostOnce,
            counter.clone(),
            blob,
        ))
        .with_tool(ScriptedTool::add(counter.clone()))
}

/// Run `agent` on a capped store that goes down after its `n`-th commit: `None` when the run
/// finished first (`n` is past its last commit), else the store it left and whether the run
/// got as far as its latest pointer.
async fn crash_after(
    n: u64,
    agent: &Agent,
    t: &ThreadId,
    run: &RunId,
) -> Option<(Arc<LimitedStore>, bool)> {
    let inner = Arc::new(capped());
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    fault.crash_after_commits(n, CrashMode::Down);
    let first = runner(fault.clone(), false)
        .run_with_id(agent, t, run.clone(), "go")
        .result()
        .await;
    if first.is_ok() {
        return None;
    }
    let latest = format!("checkpoint:{run}:latest");
    let started = inner.inner().get(t, &latest).await.unwrap().is_some();
    Some((inner, started))
}

fn completed(out: Result<Outcome>, what: &str) -> AgentResult {
    match out {
        Ok(Outcome::Completed(r)) => *r,
        other => panic!("{what}: {other:?}"),
    }
}

/// The uncrashed run completes: the two large outputs are failed calls whose error says the
/// output was dropped, `add`'s is kept, each tool ran once; a resume of the finished run does
/// nothing.
#[tokio::test]
async fn an_output_the_store_cannot_keep_is_a_failed_call_and_the_run_goes_on() {
    for async_writes in [true, false] {
        let counter = InvocationCounter::new();
        let store = Arc::new(capped());
        let t = ThreadId::new("t_big").unwrap();
        let run = RunId::new("r").unwrap();
        let out = runner(store.clone(), async_writes)
            .run_with_id(&agent(&counter), &t, run.clone(), "go")
            .result()
            .await;
        let res = completed(out, "uncrashed");
        let ex = &res.tool_executions;
        assert_eq!(ex.len(), 3);
        for e in &ex[..2] {
            assert!(!e.success, "{e:?}");
            let err = e.error.as_deref().unwrap_or_default();
            assert!(err.contains("its output was dropped"), "{err}");
            assert!(
                err.contains(&MAX.to_string()),
                "names the store's limit: {err}"
            );
        }
        assert!(ex[2].success && ex[2].output == json!({"result": 2}));
        assert_eq!(counter.get("b1"), 1);
        assert_eq!(counter.get("p1"), 1);
        let again = runner(store.clone(), async_writes)
            .resume(&agent(&counter), &t, &run)
            .result()
            .await;
        let again = completed(again, "resume of the finished run");
        assert_eq!(essence(&again), essence(&res));
        assert_eq!(counter.get("p1"), 1, "the charge ran once");
    }
}

/// Crashed after every commit in turn, then resumed: the result is the uncrashed one, and once
/// the charge's dropped-output row is durable no resume runs it again (an intent without a
/// result stops the run `EffectUncertain`, as for any at-most-once call).
#[tokio::test]
async fn a_dropped_output_is_replayed_as_the_same_failure_after_a_crash() {
    let t = ThreadId::new("t_big_crash").unwrap();
    let run = RunId::new("r").unwrap();
    let reference = {
        let counter = InvocationCounter::new();
        let out = runner(Arc::new(capped()), false)
            .run_with_id(&agent(&counter), &t, run.clone(), "go")
            .result()
            .await;
        completed(out, "reference")
    };
    let (mut replayed, mut uncertain) = (0, 0);
    for n in 0..40 {
        let counter = InvocationCounter::new();
        let Some((inner, started)) = crash_after(n, &agent(&counter), &t, &run).await else {
            break;
        };
        if !started {
            continue;
        }
        let charge_done = inner
            .inner()
            .get(&t, "effect:r:1:p1")
            .await
            .unwrap()
            .is_some_and(|v| serde_json::from_slice::<Value>(&v).unwrap()["status"] == "done");
        let out = runner(inner.clone(), false)
            .resume(&agent(&counter), &t, &run)
            .result()
            .await;
        if let Err(e) = &out
            && e.kind() == ErrorKind::EffectUncertain
        {
            uncertain += 1;
            continue;
        }
        let res = completed(out, &format!("crash at {n}"));
        assert_eq!(essence(&res), essence(&reference), "crash at {n}");
        assert_eq!(counter.get("p1"), 1, "crash at {n}: the charge ran once");
        if charge_done {
            replayed += 1;
        }
    }
    assert!(replayed >= 1, "no crash left the dropped output durable");
    assert!(
        uncertain >= 1,
        "no crash hit between the charge's intent and its result"
    );
}

/// A tool that fails with a message larger than the store keeps: the run goes on, the call is
/// failed with the start of its message and a note that it was cut.
#[tokio::test]
async fn an_error_message_the_store_cannot_keep_is_cut_to_fit() {
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "one call", "tool_calls": [
            {"id": "f1", "tool_name": "flaky", "arguments": {}}]})),
        resp(json!({"text": "done", "tool_calls": []})),
    ]);
    let flaky = ScriptedTool::new("flaky", EffectPolicy::Idempotent, counter.clone(), |_| {
        Err(afk_core::runner::ToolError::new(format!(
            "upstream said: {}",
            "y".repeat(100_000)
        )))
    });
    let agent = Agent::new("a", "", "m", llm).with_tool(flaky);
    let store = Arc::new(capped());
    let t = ThreadId::new("t_err").unwrap();
    let out = runner(store, true)
        .run_with_id(&agent, &t, RunId::new("r").unwrap(), "go")
        .result()
        .await;
    let res = completed(out, "a long error");
    let e = &res.tool_executions[0];
    assert!(!e.success);
    let err = e.error.as_deref().unwrap_or_default();
    assert!(err.contains("upstream said: yyy"), "{}", &err[..80]);
    assert!(
        err.contains("error cut from"),
        "{}",
        &err[err.len() - 200..]
    );
    assert!(err.len() < MAX, "{}", err.len());
}

/// A model answer the store cannot keep (the run's snapshot holds it twice, over the store's
/// value limit) fails the run for good, as a failed model call does under the default LLM
/// policy: a terminal record says why, and a resume answers from it without asking the model
/// again. Before, the snapshot's commit was refused, and every resume asked the model again
/// and failed the same way.
#[tokio::test]
async fn a_model_answer_the_store_cannot_keep_fails_the_run_for_good() {
    for async_writes in [true, false] {
        let llm = ScriptedLlm::new(vec![resp(
            json!({"text": "z".repeat(40_000), "tool_calls": []}),
        )]);
        let agent = Agent::new("a", "", "m", llm.clone());
        let store = Arc::new(capped());
        let t = ThreadId::new("t_answer").unwrap();
        let run = RunId::new("r").unwrap();
        let err = runner(store.clone(), async_writes)
            .run_with_id(&agent, &t, run.clone(), "go")
            .result()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Llm, "{err}");
        assert!(err.message().contains(&MAX.to_string()), "{err}");
        assert_eq!(llm.calls(), 1);
        let latest = store.inner().get(&t, "checkpoint:r:latest").await.unwrap();
        let latest: Value = serde_json::from_slice(&latest.unwrap()).unwrap();
        assert_eq!(latest["phase"], "run_terminal", "{latest}");
        assert_eq!(latest["payload"]["state"], "failed");
        let again = runner(store.clone(), async_writes)
            .resume(&agent, &t, &run)
            .result()
            .await;
        // The terminal record answers: the run failed, and says why.
        let again = completed(again, "resume of the failed run");
        assert_eq!(again.state, afk_core::schema::RunStatus::Failed);
        assert!(
            again.final_text.contains("the model's answer is"),
            "{}",
            again.final_text
        );
        assert_eq!(llm.calls(), 1, "the resume did not ask the model again");
    }
}

/// A model that answers the primary model at length and the fallback briefly.
#[derive(Debug, Default)]
struct Verbose {
    calls: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl afk_core::runner::LlmClient for Verbose {
    fn provider(&self) -> String {
        "verbose".to_owned()
    }
    async fn complete(
        &self,
        req: afk_core::runner::LlmRequest,
    ) -> Result<afk_core::schema::LlmResponse> {
        self.calls.lock().unwrap().push(req.model.clone());
        let text = if req.model == "long" {
            "z".repeat(40_000)
        } else {
            "short".to_owned()
        };
        Ok(resp(json!({"text": text, "tool_calls": []})))
    }
}

/// An answer too large to record is a failed model call: the fallback model is asked next,
/// and its answer completes the run.
#[tokio::test]
async fn a_model_answer_too_large_to_record_falls_back_to_the_next_model() {
    let llm = Arc::new(Verbose::default());
    let mut agent = Agent::new("a", "", "long", llm.clone());
    agent.fallback_models = vec!["brief".to_owned()];
    let store = Arc::new(capped());
    let t = ThreadId::new("t_fallback").unwrap();
    let out = runner(store, true)
        .run_with_id(&agent, &t, RunId::new("r").unwrap(), "go")
        .result()
        .await;
    let res = completed(out, "fallback");
    assert_eq!(res.final_text, "short");
    assert_eq!(*llm.calls.lock().unwrap(), ["long", "brief"]);
}

/// Five steps whose `big` outputs (15 KB each) are each kept, but together are more than the
/// run's terminal record can hold on the capped store; then the answer.
fn many_outputs(counter: &InvocationCounter) -> Agent {
    let mut script: Vec<_> = (0..5)
        .map(|i| {
            resp(json!({"text": format!("step {i}"), "tool_calls": [
                {"id": format!("b{i}"), "tool_name": "big", "arguments": {"i": i}}]}))
        })
        .collect();
    script.push(resp(json!({"text": "done", "tool_calls": []})));
    let blob = |args: &Value| Ok(json!({"page": format!("{}{}", args["i"], "x".repeat(15_000))}));
    Agent::new("a", "", "m", ScriptedLlm::new(script)).with_tool(ScriptedTool::new(
        "big",
        EffectPolicy::Idempotent,
        counter.clone(),
        blob,
    ))
}

/// Outputs that each fit but together overflow the terminal record: the largest are left out
/// of the run's result (marked with their size; the transcript keeps them) until the record
/// fits, and the run completes. Before, the terminal commit was refused at the run's end and
/// every resume asked the model again and failed the same way. A crash after any commit,
/// then a resume, gives the same result, and a resume of the finished run answers it again.
#[tokio::test]
async fn outputs_that_overflow_the_terminal_record_are_left_to_the_transcript() {
    let t = ThreadId::new("t_many").unwrap();
    let run = RunId::new("r").unwrap();
    let store = Arc::new(capped());
    let counter = InvocationCounter::new();
    let out = runner(store.clone(), true)
        .run_with_id(&many_outputs(&counter), &t, run.clone(), "go")
        .result()
        .await;
    let reference = completed(out, "uncrashed");
    let ex = &reference.tool_executions;
    assert_eq!(ex.len(), 5);
    let left_out: Vec<&str> = ex
        .iter()
        .filter(|e| e.extra.contains_key("output_in_transcript"))
        .map(|e| e.tool_call_id.as_deref().unwrap_or_default())
        .collect();
    assert!(!left_out.is_empty() && left_out.len() < 5, "{left_out:?}");
    for e in ex {
        assert!(e.success, "{e:?}");
        match e.extra.get("output_in_transcript") {
            Some(bytes) => {
                assert_eq!(e.output, Value::Null);
                assert!(bytes.as_u64().unwrap() > 15_000, "{bytes}");
            }
            None => assert!(e.output["page"].as_str().unwrap().len() > 15_000),
        }
    }
    // The transcript log still holds every output.
    let page = store
        .inner()
        .list(&t, "messages:r:", None, 100)
        .await
        .unwrap();
    let mut pages = 0;
    for key in &page.keys {
        let v = store.inner().get(&t, key).await.unwrap().unwrap();
        pages += String::from_utf8_lossy(&v)
            .matches(&"x".repeat(15_000))
            .count();
    }
    assert!(pages >= 5, "{pages} outputs in the log");
    let again = runner(store.clone(), true)
        .resume(&many_outputs(&counter), &t, &run)
        .result()
        .await;
    assert_eq!(essence(&completed(again, "resume")), essence(&reference));

    let mut crashes = 0;
    for n in 0..60 {
        let Some((inner, started)) = crash_after(n, &many_outputs(&counter), &t, &run).await else {
            break;
        };
        if !started {
            continue;
        }
        let out = runner(inner.clone(), false)
            .resume(&many_outputs(&counter), &t, &run)
            .result()
            .await;
        let res = completed(out, &format!("crash at {n}"));
        assert_eq!(essence(&res), essence(&reference), "crash at {n}");
        crashes += 1;
    }
    assert!(crashes > 10, "only {crashes} crash points");
}
