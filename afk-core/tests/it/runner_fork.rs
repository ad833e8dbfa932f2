//! `Runner::fork`: a new run from another run's state at the start of a chosen step. The
//! source is left untouched, earlier steps are not run again, later ones are, an at-most-once
//! call the source may already have made waits for a human, and what cannot be forked is
//! refused with nothing written.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, Decision, FORKED_FROM_KEY, Outcome, Runner};
use afk_core::schema::AgentResult;
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{add_script, agent_with, limits_for, script};
use serde_json::{Value, json};

const STEPS: u64 = 3;

fn agent(llm: Arc<ScriptedLlm>, counter: &InvocationCounter) -> Agent {
    let mut agent = agent_with(llm, counter);
    agent.limits = limits_for(STEPS);
    agent
}

fn runner(store: &Arc<MemoryStore>) -> Runner {
    common::runner(store.clone(), false)
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_fork").unwrap(),
        RunId::new("source").unwrap(),
    )
}

/// The source: the add script run to its end. Its keys, the counter of its tool calls, and
/// its result.
async fn source(
    store: &Arc<MemoryStore>,
) -> (
    BTreeMap<String, Vec<u8>>,
    InvocationCounter,
    Box<AgentResult>,
) {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let a = agent(ScriptedLlm::new(add_script(STEPS)), &counter);
    let out = runner(store)
        .run_with_id(&a, &thread, run, "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    (store.snapshot(&thread), counter, r)
}

/// The keys whose values differ between `a` and `b` (or that only one has).
fn changed(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// The keys of `run` in `keys`.
fn of_run(keys: &BTreeMap<String, Vec<u8>>, run: &str) -> BTreeMap<String, Vec<u8>> {
    keys.iter()
        .filter(|(k, _)| k.split(':').nth(1) == Some(run))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn json_of(keys: &BTreeMap<String, Vec<u8>>, key: &str) -> Value {
    serde_json::from_slice(keys.get(key).unwrap_or_else(|| panic!("no {key}"))).unwrap()
}

#[tokio::test]
async fn a_fork_at_each_step_runs_only_that_step_and_later_ones_and_leaves_the_source_as_it_was() {
    let store = Arc::new(MemoryStore::new());
    let (before, source_counter, want) = source(&store).await;
    let (thread, src) = ids();
    assert_eq!(source_counter.total(), STEPS);
    // Steps 1..=STEPS call `add` (call ids c0, c1, …); step STEPS + 1 answers.
    for k in 1..=STEPS + 1 {
        let new = RunId::new(format!("fork{k}")).unwrap();
        let counter = InvocationCounter::new();
        let llm = ScriptedLlm::new(add_script(STEPS));
        let out = runner(&store)
            .fork(&agent(llm.clone(), &counter), &thread, &src, k, new.clone())
            .result()
            .await
            .unwrap();
        let Outcome::Completed(r) = out else {
            panic!("k={k}: {out:?}")
        };
        assert_eq!(r.final_text, want.final_text, "k={k}");
        assert_eq!(r.state, "completed", "k={k}");
        // The model is asked from step k on (its answer index = assistant turns so far).
        let asked: Vec<usize> =
            (usize::try_from(k).unwrap() - 1..=usize::try_from(STEPS).unwrap()).collect();
        assert_eq!(llm.asked(), asked, "k={k}");
        // Only the calls of steps k and later run again.
        let ran: Vec<String> = counter.snapshot().into_keys().collect();
        let want_ran: Vec<String> = (k..=STEPS).map(|s| format!("c{}", s - 1)).collect();
        assert_eq!(ran, want_ran, "k={k}");
        // The transcript and counters up to step k came along: the same totals at the end.
        assert_eq!(
            r.state_snapshot.llm_calls, want.state_snapshot.llm_calls,
            "k={k}"
        );
        assert_eq!(
            r.state_snapshot.tool_calls, want.state_snapshot.tool_calls,
            "k={k}"
        );
        let keys = store.snapshot(&thread);
        let started = json_of(&keys, &format!("checkpoint:{new}:0:run_started"));
        let origin = &started["payload"][FORKED_FROM_KEY];
        assert_eq!(origin["run_id"], json!("source"), "k={k}: {started}");
        assert_eq!(origin["step"], json!(k), "k={k}: {started}");
        // The source is untouched.
        let touched = changed(&of_run(&keys, "source"), &of_run(&before, "source"));
        assert!(touched.is_empty(), "k={k}: the fork changed {touched:?}");
        // The fork is a run like any other: resuming it returns its result.
        let again = runner(&store)
            .resume(&agent(ScriptedLlm::new(vec![]), &counter), &thread, &new)
            .result()
            .await
            .unwrap();
        assert!(matches!(again, Outcome::Completed(a) if a.final_text == want.final_text));
    }
}

#[tokio::test]
async fn an_at_most_once_call_the_source_may_have_made_waits_for_a_human() {
    let store = Arc::new(MemoryStore::new());
    let (thread, src) = ids();
    let counter = InvocationCounter::new();
    // Step 1: `add` and `charge` (at-most-once, call c2); step 2: `echo`; then the answer.
    let out = runner(&store)
        .run_with_id(
            &agent_with(ScriptedLlm::new(script()), &counter),
            &thread,
            src.clone(),
            "go",
        )
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)));
    assert_eq!(counter.get("c2"), 1);

    // Forked at step 1: the charge is not made again without a human.
    let new = RunId::new("fork_charge").unwrap();
    let a = agent_with(ScriptedLlm::new(script()), &counter);
    let out = runner(&store)
        .fork(&a, &thread, &src, 1, new.clone())
        .result()
        .await
        .unwrap();
    let Outcome::Paused { request } = out else {
        panic!("{out:?}")
    };
    assert_eq!(request.tool_call_id.as_deref(), Some("c2"));
    let reason = request.reason.clone().unwrap_or_default();
    assert!(reason.contains("fork of run source"), "{reason}");
    assert_eq!(counter.get("c2"), 1, "the fork charged without a human");
    assert_eq!(counter.get("c1"), 1, "nothing of the paused batch ran");
    // Denied: the fork goes on without charging.
    let out = runner(&store)
        .resume_with_decision(&a, &thread, &new, Decision::Deny("already paid".into()))
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(counter.get("c2"), 1);

    // Forked at step 2 (past the charge): nothing to ask, the charge is in the transcript.
    let counter2 = InvocationCounter::new();
    let a2 = agent_with(ScriptedLlm::new(script()), &counter2);
    let out = runner(&store)
        .fork(&a2, &thread, &src, 2, RunId::new("fork_echo").unwrap())
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(counter2.get("c2"), 0);
    assert_eq!(counter2.get("c3"), 1);

    // Approved: the fork makes the charge (a human said so).
    let new3 = RunId::new("fork_approved").unwrap();
    let counter3 = InvocationCounter::new();
    let a3 = agent_with(ScriptedLlm::new(script()), &counter3);
    let out = runner(&store)
        .fork(&a3, &thread, &src, 1, new3.clone())
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    let out = runner(&store)
        .resume_with_decision(&a3, &thread, &new3, Decision::Approve)
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(counter3.get("c2"), 1);
}

#[tokio::test]
async fn what_cannot_be_forked_is_refused_and_nothing_is_written() {
    let store = Arc::new(MemoryStore::new());
    let (before, _, _) = source(&store).await;
    let (thread, src) = ids();
    let counter = InvocationCounter::new();
    let a = agent(ScriptedLlm::new(add_script(STEPS)), &counter);
    let new = RunId::new("refused").unwrap();
    let cases: Vec<(&str, RunId, u64, RunId, ErrorKind)> = vec![
        (
            "step 0",
            src.clone(),
            0,
            new.clone(),
            ErrorKind::InvalidInput,
        ),
        (
            "a step never begun",
            src.clone(),
            STEPS + 2,
            new.clone(),
            ErrorKind::Conflict,
        ),
        (
            "no such source",
            RunId::new("nothing").unwrap(),
            1,
            new.clone(),
            ErrorKind::NotFound,
        ),
        (
            "onto the source itself",
            src.clone(),
            1,
            src.clone(),
            ErrorKind::InvalidInput,
        ),
        (
            "onto an existing run",
            src.clone(),
            1,
            src.clone(),
            ErrorKind::InvalidInput,
        ),
    ];
    for (what, source, step, target, kind) in cases {
        let err = runner(&store)
            .fork(&a, &thread, &source, step, target)
            .result()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), kind, "{what}: {err}");
    }
    // An existing run is not overwritten.
    let other = RunId::new("other").unwrap();
    runner(&store)
        .run_with_id(&a, &thread, other.clone(), "go")
        .result()
        .await
        .unwrap();
    let existing = store.snapshot(&thread);
    let err = runner(&store)
        .fork(&a, &thread, &src, 1, other.clone())
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(
        of_run(&store.snapshot(&thread), "other"),
        of_run(&existing, "other")
    );
    // Another agent is refused.
    let mut stranger = agent(ScriptedLlm::new(add_script(STEPS)), &counter);
    stranger.instructions = "Something else entirely.".into();
    let err = runner(&store)
        .fork(&stranger, &thread, &src, 1, new.clone())
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AgentMismatch, "{err}");
    // Nothing of the refused forks was written; the source is as it was.
    let keys = store.snapshot(&thread);
    assert!(
        of_run(&keys, "refused").is_empty(),
        "{:?}",
        of_run(&keys, "refused").keys()
    );
    assert_eq!(of_run(&keys, "source"), of_run(&before, "source"));
}

/// `add`, but its call `c1` (step 2) waits for a permit of `gate`: a source still running.
fn slow_add(gate: Arc<tokio::sync::Semaphore>) -> afk_core::runner::ToolRef {
    use afk_core::runner::{EffectPolicy, FnTool, ToolContext, ToolError};
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        a: i64,
        b: i64,
    }
    FnTool::with_policy(
        "add",
        "Add two integers",
        EffectPolicy::Idempotent,
        move |ctx: ToolContext, args: Args| {
            let gate = gate.clone();
            async move {
                if ctx.tool_call_id == "c1" {
                    let _permit = gate
                        .acquire()
                        .await
                        .map_err(|e| ToolError::new(e.to_string()))?;
                }
                Ok::<_, ToolError>(json!({"result": args.a + args.b}))
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_source_is_forked_from_a_step_it_left_and_goes_on_undisturbed() {
    let store = Arc::new(MemoryStore::new());
    let (thread, src) = ids();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    // The same agent (name, instructions, model, tool specs) with a tool that blocks at step 2.
    let mut running = Agent::new(
        "crashy",
        "Be careful.",
        "m1",
        ScriptedLlm::new(add_script(STEPS)),
    )
    .with_tool(slow_add(gate.clone()));
    running.limits = limits_for(STEPS);
    let plain = |llm| {
        let mut a = Agent::new("crashy", "Be careful.", "m1", llm)
            .with_tool(slow_add(Arc::new(tokio::sync::Semaphore::new(100))));
        a.limits = limits_for(STEPS);
        a
    };
    let handle = runner(&store).run_with_id(&running, &thread, src.clone(), "go");
    // Wait until the source has begun step 2 (and blocks in its tool).
    let began = format!("checkpoint:{src}:2:step_started");
    for _ in 0..500 {
        if store.snapshot(&thread).contains_key(&began) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        store.snapshot(&thread).contains_key(&began),
        "the source never began step 2"
    );
    // Step 3 not begun: refused. Step 2 begun: forked, while the source is still running.
    let err = runner(&store)
        .fork(
            &plain(ScriptedLlm::new(add_script(STEPS))),
            &thread,
            &src,
            3,
            RunId::new("too_far").unwrap(),
        )
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let forked = runner(&store)
        .fork(
            &plain(ScriptedLlm::new(add_script(STEPS))),
            &thread,
            &src,
            2,
            RunId::new("while_running").unwrap(),
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(f) = forked else {
        panic!("{forked:?}")
    };
    // The source was not fenced by the fork: it finishes once its tool returns.
    gate.add_permits(1);
    let Outcome::Completed(s) = handle.result().await.unwrap() else {
        panic!("the source did not complete")
    };
    assert_eq!(f.final_text, s.final_text);
    assert_eq!(f.state_snapshot.tool_calls, s.state_snapshot.tool_calls);

    // A fork racing a resume of the source (here: of its finished run) both end well.
    let (a, b) = tokio::join!(
        runner(&store)
            .resume(&plain(ScriptedLlm::new(vec![])), &thread, &src)
            .result(),
        runner(&store)
            .fork(
                &plain(ScriptedLlm::new(add_script(STEPS))),
                &thread,
                &src,
                1,
                RunId::new("racing").unwrap()
            )
            .result(),
    );
    assert!(matches!(a, Ok(Outcome::Completed(_))), "{a:?}");
    assert!(matches!(b, Ok(Outcome::Completed(_))), "{b:?}");
}

#[tokio::test]
async fn a_prepared_fork_is_written_ready_with_its_agent_and_resumed_by_the_application() {
    use afk_core::store::Store;
    let store = Arc::new(MemoryStore::new());
    let (before, _, want) = source(&store).await;
    let (thread, src) = ids();
    let new = RunId::new("prepared").unwrap();
    runner(&store)
        .prepare_fork(&thread, &src, 2, &new)
        .await
        .unwrap();
    // Written, not run: the snapshot of step 1, the source's agent, ready for a worker.
    let keys = store.snapshot(&thread);
    let latest = json_of(&keys, &format!("checkpoint:{new}:latest"));
    assert_eq!(latest["phase"], json!("runtime_state"), "{latest}");
    assert_eq!(latest["step"], json!(1), "{latest}");
    assert_eq!(
        latest["payload"][FORKED_FROM_KEY]["step"],
        json!(2),
        "{latest}"
    );
    let entry = store
        .attention(&thread, &new)
        .await
        .unwrap()
        .expect("an entry");
    let entry: Value = serde_json::from_slice(&entry).unwrap();
    assert_eq!(entry["state"], json!("ready"), "{entry}");
    assert_eq!(entry["agent"], json!("crashy"), "{entry}");
    let touched = changed(&of_run(&keys, "source"), &of_run(&before, "source"));
    assert!(touched.is_empty(), "the fork changed {touched:?}");
    // Again under the same id: refused, nothing changed.
    let err = runner(&store)
        .prepare_fork(&thread, &src, 2, &new)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(changed(&store.snapshot(&thread), &keys).is_empty());
    // The application resumes it: steps 2 and later run.
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(add_script(STEPS));
    let out = runner(&store)
        .resume(&agent(llm.clone(), &counter), &thread, &new)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.final_text, want.final_text);
    assert_eq!(llm.asked(), vec![1, 2, 3]);
    assert_eq!(
        counter.snapshot().into_keys().collect::<Vec<_>>(),
        vec!["c1", "c2"]
    );
}

#[tokio::test]
async fn a_fork_can_ask_again_with_another_user_message() {
    use afk_core::runner::ForkPoint;
    let store = Arc::new(MemoryStore::new());
    let (before, _, _) = source(&store).await;
    let (thread, src) = ids();
    let new = RunId::new("asked_again").unwrap();
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(add_script(STEPS));
    let point = ForkPoint::step(1).with_user_message("go, but differently");
    let out = runner(&store)
        .fork(
            &agent(llm.clone(), &counter),
            &thread,
            &src,
            point,
            new.clone(),
        )
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    // The fork's transcript holds the new question, not the old one.
    let keys = store.snapshot(&thread);
    let first = json_of(&keys, &format!("messages:{new}:00000000000000000000"));
    let users: Vec<&Value> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == json!("user"))
        .collect();
    assert_eq!(users.len(), 1, "{first}");
    assert_eq!(users[0]["content"], json!("go, but differently"), "{first}");
    let origin =
        &json_of(&keys, &format!("checkpoint:{new}:0:run_started"))["payload"][FORKED_FROM_KEY];
    assert_eq!(origin["user_message_edited"], json!(true), "{origin}");
    let touched = changed(&of_run(&keys, "source"), &of_run(&before, "source"));
    assert!(touched.is_empty(), "the fork changed {touched:?}");
}
