//! A run records the agent that started it (name, version, fingerprint). A resume by another
//! agent is refused with `AgentMismatch` and writes nothing, unless the agent at hand declares
//! the recorded version compatible: then it continues, and the change is recorded.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, LlmClient, LlmRequest, Outcome};
use afk_core::schema::{AgentChange, AgentIdentity, LlmResponse};
use afk_core::{Error, ErrorKind, MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{agent_with, runner, script};
use serde_json::{Value, json};

/// A model that answers 503 while it is down, else from its script.
#[derive(Debug)]
struct Switch {
    inner: Arc<ScriptedLlm>,
    up: AtomicBool,
}

#[async_trait]
impl LlmClient for Switch {
    fn provider(&self) -> String {
        "switch".to_owned()
    }
    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        if !self.up.load(Ordering::SeqCst) {
            return Err(Error::unavailable("HTTP 503"));
        }
        self.inner.complete(request).await
    }
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_ver").unwrap(),
        RunId::new("r_ver").unwrap(),
    )
}

/// Version 1 of the scenario's agent, with a model that is up or down.
fn v1(up: bool, counter: &InvocationCounter) -> Agent {
    let llm = Arc::new(Switch {
        inner: ScriptedLlm::new(script()),
        up: AtomicBool::new(up),
    });
    let mut agent = agent_with(ScriptedLlm::new(script()), counter).with_version("1");
    agent.llm = llm;
    agent
}

/// A run of version 1 stopped (suspended) at its first model call, in a fresh store.
async fn stopped_run(counter: &InvocationCounter) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let (thread, run) = ids();
    let out = runner(store.clone(), true)
        .run_with_id(&v1(false, counter), &thread, run, "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Suspended { .. }), "{out:?}");
    store
}

/// The store's keys and values, the run's fence record left out (a resume claims the run).
fn contents(store: &MemoryStore) -> BTreeMap<String, Vec<u8>> {
    let (thread, _) = ids();
    let mut all = store.snapshot(&thread);
    all.retain(|k, _| !k.starts_with("run:"));
    all
}

fn latest(store: &MemoryStore) -> Value {
    let (thread, run) = ids();
    serde_json::from_slice(&store.snapshot(&thread)[&format!("checkpoint:{run}:latest")]).unwrap()
}

/// The newest `runtime_state` record of the run.
fn newest_snapshot(store: &MemoryStore) -> Value {
    let (thread, run) = ids();
    let snap = store.snapshot(&thread);
    let key = snap
        .keys()
        .filter(|k| k.starts_with(&format!("checkpoint:{run}:")) && k.ends_with(":runtime_state"))
        .max_by_key(|k| k.split(':').nth(2).unwrap().parse::<u64>().unwrap())
        .unwrap();
    serde_json::from_slice(&snap[key]).unwrap()
}

#[tokio::test]
async fn a_run_records_the_agent_that_started_it() {
    let counter = InvocationCounter::new();
    let store = stopped_run(&counter).await;
    let agent = v1(true, &counter);
    let recorded: AgentIdentity =
        serde_json::from_value(latest(&store)["payload"]["agent"].clone()).unwrap();
    assert_eq!(recorded, agent.identity());
    assert_eq!(
        (recorded.name.as_str(), recorded.version.as_str()),
        ("crashy", "1")
    );
    let (thread, run) = ids();
    let started: Value = serde_json::from_slice(
        &store.snapshot(&thread)[&format!("checkpoint:{run}:0:run_started")],
    )
    .unwrap();
    assert_eq!(
        started["payload"]["agent"]["fingerprint"],
        json!(agent.fingerprint())
    );
}

#[tokio::test]
async fn a_different_agent_is_refused_and_nothing_is_written() {
    let counter = InvocationCounter::new();
    let store = stopped_run(&counter).await;
    let before = contents(&store);
    // The same name and version, other instructions: a different agent.
    let mut changed = v1(true, &counter);
    changed.instructions = "Be reckless.".to_owned();
    let (thread, run) = ids();
    let err = runner(store.clone(), true)
        .resume(&changed, &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AgentMismatch, "{err}");
    let old = &v1(true, &counter).fingerprint()[..12];
    let new = &changed.fingerprint()[..12];
    assert!(
        err.message().contains(old) && err.message().contains(new),
        "{err}"
    );
    assert_eq!(contents(&store), before, "a refused resume writes nothing");
    assert_eq!(counter.total(), 0, "and runs nothing");
    // A version 2 that does not declare version 1 compatible is refused too.
    let v2 = v1(true, &counter).with_version("2");
    let mut v2 = v2;
    v2.model = "m2".to_owned();
    let err = runner(store.clone(), true)
        .resume(&v2, &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AgentMismatch, "{err}");
    assert!(err.message().contains("version '1'") && err.message().contains("version '2'"));
    assert_eq!(contents(&store), before);
}

#[tokio::test]
async fn a_declared_compatible_version_continues_and_the_change_is_recorded() {
    let counter = InvocationCounter::new();
    let store = stopped_run(&counter).await;
    let mut v2 = v1(true, &counter).with_version("2").compatible_with(["1"]);
    v2.instructions = "Be careful, version 2.".to_owned();
    let (thread, run) = ids();
    let out = runner(store.clone(), true)
        .resume(&v2, &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(result) = out else {
        panic!("{out:?}")
    };
    assert_eq!(result.final_text, "all done");
    let snap = newest_snapshot(&store);
    let now: AgentIdentity = serde_json::from_value(snap["payload"]["agent"].clone()).unwrap();
    assert_eq!(now, v2.identity());
    let history: Vec<AgentChange> =
        serde_json::from_value(snap["payload"]["agent_history"].clone()).unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].from, v1(true, &counter).identity());
    assert_eq!(history[0].to, v2.identity());
    assert_eq!(history[0].step, 1);
}

#[tokio::test]
async fn the_same_agent_built_again_resumes_whatever_its_client_and_limits() {
    let counter = InvocationCounter::new();
    let store = stopped_run(&counter).await;
    // Another process: a new model client, other limits and policies; the same agent.
    let mut again = v1(true, &counter);
    again.limits = again.limits.with_max_steps(50);
    let (thread, run) = ids();
    let out = runner(store.clone(), true)
        .resume(&again, &thread, &run)
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert!(
        newest_snapshot(&store)["payload"]
            .get("agent_history")
            .is_none()
    );
}

#[test]
fn the_fingerprint_covers_what_shapes_the_transcript_and_nothing_else() {
    let counter = InvocationCounter::new();
    let base = || v1(true, &counter);
    let fp = base().fingerprint();
    assert_eq!(fp, base().fingerprint(), "deterministic");
    let changed: Vec<(&str, Agent)> = vec![
        (
            "name",
            Agent {
                name: "other".into(),
                ..base()
            },
        ),
        (
            "instructions",
            Agent {
                instructions: "x".into(),
                ..base()
            },
        ),
        (
            "model",
            Agent {
                model: "m9".into(),
                ..base()
            },
        ),
        (
            "fallbacks",
            Agent {
                fallback_models: vec!["m2".into()],
                ..base()
            },
        ),
        (
            "a tool more",
            base().with_tool(ScriptedTool::echo(counter.clone())),
        ),
        (
            "a tool's effect policy",
            Agent {
                tools: vec![ScriptedTool::new(
                    "add",
                    EffectPolicy::AtMostOnce,
                    counter.clone(),
                    |_| Ok(json!(0)),
                )],
                ..base()
            },
        ),
        ("a subagent", base().with_subagent(base())),
    ];
    for (what, agent) in changed {
        assert_ne!(agent.fingerprint(), fp, "{what} changes the fingerprint");
    }
    let mut same = base().with_version("7").compatible_with(["1"]);
    same.limits = same.limits.with_max_steps(3);
    same.llm = ScriptedLlm::new(Vec::new());
    assert_eq!(
        same.fingerprint(),
        fp,
        "client, limits and version are not part of it"
    );
}

/// A refused resume leaves the run waiting for a human: its entry says `mismatch`, names the
/// run's own agent and the fingerprint refused. A worker with that refused agent leaves it
/// alone; one with the run's agent (a new deployment) continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_run_waits_for_a_deployment_and_a_worker_with_the_right_agent_continues_it() {
    use afk_core::runner::{Worker, WorkerConfig};
    use afk_core::schema::{MarkState, RunMark};
    use afk_core::store::Store;
    use std::time::Duration;

    let counter = InvocationCounter::new();
    let store = stopped_run(&counter).await;
    let (thread, run) = ids();
    let mut changed = v1(true, &counter);
    changed.instructions = "Be reckless.".to_owned();
    let err = runner(store.clone(), true)
        .resume(&changed, &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AgentMismatch, "{err}");
    let entry = || async {
        RunMark::decode(&store.attention(&thread, &run).await.unwrap().unwrap()).unwrap()
    };
    let mark = entry().await;
    assert_eq!(mark.state, MarkState::Mismatch, "{mark:?}");
    assert_eq!(
        (mark.agent.as_str(), mark.version.as_deref()),
        ("crashy", Some("1"))
    );
    assert_eq!(mark.refused, Some(changed.fingerprint()));

    let poll = WorkerConfig::default().with_poll_interval(Duration::from_millis(5));
    let wrong = Worker::new(runner(store.clone(), true))
        .register(changed.clone())
        .with_config(poll.clone())
        .start();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stats = wrong.shutdown().await;
    assert_eq!((stats.resumed, stats.failed), (0, 0), "{stats:?}");
    assert_eq!(
        entry().await,
        mark,
        "the refused agent's worker left the entry alone"
    );

    let right = Worker::new(runner(store.clone(), true))
        .register(v1(true, &counter))
        .with_config(poll)
        .start();
    tokio::time::timeout(Duration::from_secs(20), async {
        while store.attention(&thread, &run).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the worker with the run's agent never finished it");
    let stats = right.shutdown().await;
    assert_eq!(stats.completed, 1, "{stats:?}");
}
