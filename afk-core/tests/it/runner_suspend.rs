//! A model provider's outage does not end a run: when every model the run may use fails and
//! at least one failed with a retryable error, the run is suspended (a durable snapshot in
//! state `suspended` naming the reason and a not-before time, nothing terminal), and a resume
//! once the provider is back completes it with the result it would have had without the
//! outage. Permanent model errors keep following the LLM failure policy.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{
    FailurePolicy, LlmClient, LlmRequest, ManualClock, Outcome, Runner, RunnerConfig, SequentialIds,
};
use afk_core::schema::{LlmResponse, RunStatus, Suspension};
use afk_core::store::Store;
use afk_core::{CheckpointConfig, Error, ErrorKind, MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{agent_with, essence, script};
use serde_json::Value;

const T0: u64 = 1_700_000_000_000;

/// From which request (1-based) on a provider fails, and with what error.
type Outage = Option<(u64, fn() -> Error)>;

/// A provider in front of a scripted model: while it is down, every request fails with the
/// error `down` makes (as a client gives up after its own retries); each request counts.
struct Provider {
    inner: Arc<ScriptedLlm>,
    /// The request ordinals (1-based) that fail, and how.
    down: Mutex<Outage>,
    requests: AtomicU64,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Provider")
    }
}

impl Provider {
    fn new(inner: Arc<ScriptedLlm>) -> Arc<Self> {
        Arc::new(Provider {
            inner,
            down: Mutex::new(None),
            requests: AtomicU64::new(0),
        })
    }

    /// Fail every request from the `from`th on with `e()`.
    fn go_down(&self, from: u64, e: fn() -> Error) {
        *self.down.lock().unwrap() = Some((from, e));
    }

    fn come_back(&self) {
        *self.down.lock().unwrap() = None;
    }
}

#[async_trait]
impl LlmClient for Provider {
    fn provider(&self) -> String {
        "flaky".to_owned()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((from, e)) = *self.down.lock().unwrap()
            && n >= from
        {
            return Err(e());
        }
        self.inner.complete(request).await
    }
}

fn service_unavailable() -> Error {
    Error::unavailable("HTTP 503 Service Unavailable")
}

fn rate_limited() -> Error {
    Error::new(ErrorKind::Llm, "HTTP 429 Too Many Requests")
        .with_retryable(true)
        .with_retry_after(Duration::from_secs(600))
}

fn bad_request() -> Error {
    Error::new(ErrorKind::Llm, "HTTP 400 Bad Request: unknown parameter")
}

fn runner(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Runner {
    Runner::new(
        store,
        RunnerConfig::default()
            .with_clock(clock)
            .with_ids(Arc::new(SequentialIds::default()))
            .with_checkpoint(CheckpointConfig::default())
            .with_suspension_backoff(Duration::from_secs(30)),
    )
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_sus").unwrap(),
        RunId::new("r_sus").unwrap(),
    )
}

/// Keys of run records in phase `phase`.
fn records_in(store: &MemoryStore, thread: &ThreadId, phase: &str) -> Vec<String> {
    store
        .snapshot(thread)
        .keys()
        .filter(|k| k.starts_with("checkpoint:") && k.ends_with(&format!(":{phase}")))
        .cloned()
        .collect()
}

/// The latest record of the run, as JSON.
fn latest(store: &MemoryStore, thread: &ThreadId, run: &RunId) -> Value {
    let snap = store.snapshot(thread);
    serde_json::from_slice(&snap[&format!("checkpoint:{run}:latest")]).unwrap()
}

/// The suspension the latest record names (it must be a suspended snapshot).
fn suspension_of(latest: &Value) -> Suspension {
    assert_eq!(latest["phase"], "runtime_state", "{latest}");
    assert_eq!(latest["payload"]["state"], RunStatus::Suspended.as_str());
    serde_json::from_value(latest["payload"]["suspension"].clone()).unwrap()
}

fn suspended(out: Result<Outcome>) -> (String, u64) {
    match out {
        Ok(Outcome::Suspended {
            reason,
            not_before_ms,
        }) => (reason, not_before_ms),
        other => panic!("want suspended, got {other:?}"),
    }
}

/// The uncrashed run of the scenario, for comparison.
async fn uncrashed() -> afk_core::schema::AgentResult {
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    let (thread, run) = ids();
    let out = runner(store, ManualClock::new(T0))
        .run_with_id(&agent, &thread, run, "go")
        .result()
        .await
        .unwrap();
    match out {
        Outcome::Completed(r) => *r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_provider_outage_suspends_the_run_and_a_resume_after_it_completes() {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(T0);
    let counter = InvocationCounter::new();
    let llm = Provider::new(ScriptedLlm::new(script()));
    // The provider goes down at the run's second model call (step 2), after step 1's tools.
    llm.go_down(2, service_unavailable);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm.clone();
    agent.policies.llm = FailurePolicy::Fail;
    let (thread, run) = ids();
    let r = runner(store.clone(), clock.clone());

    let (reason, not_before) = suspended(
        r.run_with_id(&agent, &thread, run.clone(), "go")
            .result()
            .await,
    );
    assert!(reason.contains("503"), "{reason}");
    assert_eq!(not_before, T0 + 30_000, "the first backoff");
    assert!(records_in(&store, &thread, "run_terminal").is_empty());
    let sus = suspension_of(&latest(&store, &thread, &run));
    assert_eq!((sus.attempt, sus.not_before_ms), (1, T0 + 30_000));
    assert_eq!(sus.error_kind, "unavailable");
    assert_eq!(latest(&store, &thread, &run)["step"], 2);

    // Still down: suspended again, the backoff doubled, still nothing terminal.
    clock.advance_ms(30_000);
    let (_, not_before) = suspended(r.resume(&agent, &thread, &run).result().await);
    assert_eq!(
        not_before,
        T0 + 30_000 + 60_000,
        "the second backoff doubles"
    );
    assert_eq!(suspension_of(&latest(&store, &thread, &run)).attempt, 2);
    assert!(records_in(&store, &thread, "run_terminal").is_empty());

    // Back: the resume completes the run as if nothing happened.
    llm.come_back();
    clock.advance_ms(60_000);
    assert_eq!(
        counter.total(),
        2,
        "step 1's add and charge ran before the outage"
    );
    let out = r.resume(&agent, &thread, &run).result().await.unwrap();
    let Outcome::Completed(result) = out else {
        panic!("{out:?}")
    };
    assert_eq!(result.state, "completed");
    assert_eq!(essence(&result), essence(&uncrashed().await));
    for call in ["c1", "c2", "c3"] {
        assert_eq!(counter.get(call), 1, "call {call} ran exactly once");
    }
    assert_eq!(records_in(&store, &thread, "run_terminal").len(), 1);
    assert_eq!(
        latest(&store, &thread, &run)["payload"]["state"],
        "completed"
    );
}

#[tokio::test]
async fn a_model_answer_resets_the_backoff_and_the_mark_leaves_the_snapshot() {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(T0);
    let counter = InvocationCounter::new();
    let llm = Provider::new(ScriptedLlm::new(script()));
    llm.go_down(1, service_unavailable);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm.clone();
    let (thread, run) = ids();
    let r = runner(store.clone(), clock.clone());
    suspended(
        r.run_with_id(&agent, &thread, run.clone(), "go")
            .result()
            .await,
    );
    assert_eq!(latest(&store, &thread, &run)["step"], 1);
    // Up for exactly one answer (step 1's), then down again: a fresh first backoff.
    llm.come_back();
    let answered = llm.requests.load(Ordering::SeqCst) + 1;
    llm.go_down(answered + 1, service_unavailable);
    let (_, not_before) = suspended(r.resume(&agent, &thread, &run).result().await);
    assert_eq!(
        not_before,
        T0 + 30_000,
        "one model answer resets the backoff"
    );
    let last = latest(&store, &thread, &run);
    assert_eq!(
        (last["step"].as_u64(), suspension_of(&last).attempt),
        (Some(2), 1)
    );
    // Step 1's snapshots after the answer carry no suspension mark.
    let snap = store.snapshot(&thread);
    let step1: Value =
        serde_json::from_slice(&snap[&format!("checkpoint:{run}:1:runtime_state")]).unwrap();
    assert!(step1["payload"].get("suspension").is_none(), "{step1}");
    assert_eq!(step1["payload"]["state"], "running");
}

#[tokio::test]
async fn a_retry_after_longer_than_the_backoff_is_honoured() {
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let llm = Provider::new(ScriptedLlm::new(script()));
    llm.go_down(1, rate_limited);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm;
    let (thread, run) = ids();
    let out = runner(store.clone(), ManualClock::new(T0))
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await;
    let (reason, not_before) = suspended(out);
    assert!(reason.contains("429"), "{reason}");
    assert_eq!(
        not_before,
        T0 + 600_000,
        "the provider's Retry-After, not the 30 s backoff"
    );
    assert_eq!(
        suspension_of(&latest(&store, &thread, &run)).error_kind,
        "llm"
    );
}

#[tokio::test]
async fn a_permanent_model_error_follows_the_llm_policy() {
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let llm = Provider::new(ScriptedLlm::new(script()));
    llm.go_down(1, bad_request);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm;
    agent.policies.llm = FailurePolicy::Fail;
    let (thread, run) = ids();
    let err = runner(store.clone(), ManualClock::new(T0))
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Llm);
    assert!(err.message().contains("400"), "{err}");
    let last = latest(&store, &thread, &run);
    assert_eq!(last["phase"], "run_terminal");
    assert_eq!(last["payload"]["state"], "failed");
}

#[tokio::test]
async fn a_retryable_failure_of_any_candidate_suspends_though_a_fallback_failed_for_good() {
    /// The primary model is down (503); the fallback model refuses the request (400).
    #[derive(Debug)]
    struct Split;
    #[async_trait]
    impl LlmClient for Split {
        fn provider(&self) -> String {
            "split".to_owned()
        }
        async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
            Err(if request.model == "m1" {
                service_unavailable()
            } else {
                bad_request()
            })
        }
    }
    let store = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.fallback_models = vec!["m2".to_owned()];
    agent.llm = Arc::new(Split);
    agent.policies.llm = FailurePolicy::Fail;
    let (thread, run) = ids();
    let out = runner(store.clone(), ManualClock::new(T0))
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await;
    let (reason, _) = suspended(out);
    assert!(
        reason.contains("503"),
        "the retryable failure is the reason: {reason}"
    );
    assert!(records_in(&store, &thread, "run_terminal").is_empty());
}
