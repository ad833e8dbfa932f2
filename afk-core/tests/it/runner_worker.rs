//! Runs finish by themselves: the index of runs that need attention follows a run from its
//! first commit to its end, a run's entry names its owner and lease, and a [`Worker`] resumes
//! what nobody works on: runs whose lease expired, its own earlier incarnation's runs at once,
//! answered and suspended runs; never a paused or uncertain one, and each orphan exactly once
//! when several workers share the store.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{
    Agent, Clock, Decision, LlmClient, LlmRequest, ManualClock, Outcome, Runner, RunnerConfig,
    Worker, WorkerConfig, WorkerHandle,
};
use afk_core::schema::{LlmResponse, MarkState, RunMark};
use afk_core::store::{Attention, Call, HookStore, Hooks, Store};
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{agent_with, essence, script};
use tokio::sync::Notify;

/// Catches a hang; measures nothing.
const NO_HANG: Duration = Duration::from_secs(20);
const LEASE: Duration = Duration::from_secs(30);

/// A model that answers from a script, but holds the `hold_at`th request (1-based) until
/// released: a process stuck in (or killed during) a model call.
#[derive(Debug)]
struct Holding {
    inner: Arc<ScriptedLlm>,
    hold_at: u64,
    seen: std::sync::atomic::AtomicU64,
    reached: Notify,
    release: Notify,
}

impl Holding {
    fn new(inner: Arc<ScriptedLlm>, hold_at: u64) -> Arc<Self> {
        Arc::new(Holding {
            inner,
            hold_at,
            seen: Default::default(),
            reached: Notify::new(),
            release: Notify::new(),
        })
    }
}

#[async_trait]
impl LlmClient for Holding {
    fn provider(&self) -> String {
        "holding".into()
    }
    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if n == self.hold_at {
            self.reached.notify_one();
            self.release.notified().await;
        }
        self.inner.complete(request).await
    }
}

fn config(clock: &Arc<ManualClock>, owner: &str) -> RunnerConfig {
    deterministic_config()
        .with_clock(clock.clone())
        .with_owner(owner)
        .with_lease(LEASE)
}

fn fast() -> WorkerConfig {
    WorkerConfig::default()
        .with_poll_interval(Duration::from_millis(5))
        .with_backoff(Duration::from_millis(5), Duration::from_millis(50))
}

async fn mark_of(store: &dyn Store, t: &ThreadId, r: &RunId) -> Option<RunMark> {
    let bytes = store.attention(t, r).await.unwrap()?;
    Some(RunMark::decode(&bytes).expect("an entry the runner wrote"))
}

/// Wait until the run's entry satisfies `ok` (or fail after [`NO_HANG`], showing the entry).
async fn until(store: &dyn Store, t: &ThreadId, r: &RunId, ok: impl Fn(Option<&RunMark>) -> bool) {
    let deadline = tokio::time::Instant::now() + NO_HANG;
    loop {
        let m = mark_of(store, t, r).await;
        if ok(m.as_ref()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {r}: the entry never reached the state the test waits for; it is {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A run of the three-step scenario stopped (its task aborted, as a killed process stops) in
/// its `hold_at`th model call, by a runner owned by `owner`. Returns the agent to resume it
/// with and its tool counter.
async fn orphan(
    store: &Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    owner: &str,
    t: &ThreadId,
    r: &RunId,
    hold_at: u64,
) -> (Agent, InvocationCounter) {
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, hold_at);
    agent.llm = holding.clone();
    let runner = Runner::new(store.clone(), config(clock, owner));
    let h = runner.run_with_id(&agent, t, r.clone(), "go");
    tokio::time::timeout(NO_HANG, holding.reached.notified())
        .await
        .unwrap();
    h.abort_handle().unwrap().abort();
    let _ = h.result().await;
    // The entry says running under the dead owner's lease.
    until(&**store, t, r, |m| {
        m.is_some_and(|m| m.state == MarkState::Running)
    })
    .await;
    let fresh = agent_with(ScriptedLlm::new(script()), &counter);
    (fresh, counter)
}

/// The result of the scenario without any crash.
async fn uncrashed() -> serde_json::Value {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    let t = ThreadId::new("t_ref").unwrap();
    let out = Runner::new(store, deterministic_config())
        .run_with_id(&agent, &t, RunId::new("run_w").unwrap(), "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    essence(&r)
}

async fn completed_result(store: &dyn Store, t: &ThreadId, r: &RunId) -> serde_json::Value {
    let bytes = store
        .get(t, &format!("checkpoint:{r}:latest"))
        .await
        .unwrap()
        .unwrap();
    let record: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let result = &record["payload"]["terminal_result"];
    assert!(result.is_object(), "run {r} has not ended: {record}");
    let r: afk_core::schema::AgentResult = serde_json::from_value(result.clone()).unwrap();
    essence(&r)
}

fn worker(
    store: &Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    owner: &str,
    agent: &Agent,
) -> WorkerHandle {
    let runner = Runner::new(store.clone(), config(clock, owner));
    Worker::new(runner)
        .register(agent.clone())
        .with_config(fast())
        .start()
}

/// The keys and attention of every commit the store was asked for.
#[derive(Debug, Default, Clone)]
struct Seen(Arc<std::sync::Mutex<Vec<Seen1>>>);

/// One commit's keys and attention.
type Seen1 = (Vec<String>, Option<Attention>);

#[async_trait]
impl Hooks for Seen {
    type Note = ();
    async fn before(&self, call: Call<'_>) -> Result<()> {
        let mut seen = self.0.lock().unwrap();
        let mut note = |c: &afk_core::store::Commit| {
            seen.push((
                c.puts.iter().map(|(k, _)| k.clone()).collect(),
                c.attention.clone(),
            ));
        };
        match call {
            Call::Commit(c) | Call::CommitOwned(c) => note(c),
            Call::CommitBatch(cs) => cs.iter().for_each(note),
            _ => {}
        }
        Ok(())
    }
}

/// The first commit enters the run with its owner and lease; the commit of its terminal
/// record, the same one, takes it out again.
#[tokio::test]
async fn the_index_follows_a_run_from_its_first_commit_to_its_terminal_one() {
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let seen = Seen::default();
    let store: Arc<dyn Store> = Arc::new(HookStore::new(inner.clone(), seen.clone()));
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_idx").unwrap(),
        RunId::new("run_idx").unwrap(),
    );
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, 2);
    agent.llm = holding.clone();
    let h = Runner::new(store.clone(), config(&clock, "owner-a")).run_with_id(
        &agent,
        &t,
        r.clone(),
        "go",
    );
    holding.reached.notified().await;
    until(&*inner, &t, &r, |m| m.is_some()).await;
    let m = mark_of(&*inner, &t, &r).await.unwrap();
    assert_eq!(m.state, MarkState::Running);
    assert_eq!(m.owner.as_deref(), Some("owner-a"));
    assert_eq!(m.lease_until_ms, START_MS + 30_000);
    assert_eq!(m.agent, "crashy");
    holding.release.notify_one();
    assert!(matches!(h.result().await.unwrap(), Outcome::Completed(_)));
    assert_eq!(
        mark_of(&*inner, &t, &r).await,
        None,
        "a finished run stays in the index"
    );
    let seen = seen.0.lock().unwrap();
    let first = seen.first().unwrap();
    assert!(
        matches!(first.1, Some(Attention::Open(_))),
        "the first commit did not open it"
    );
    assert!(
        first.0.iter().any(|k| k.ends_with(":0:run_started")),
        "{:?}",
        first.0
    );
    let closing: Vec<_> = seen
        .iter()
        .filter(|c| c.1 == Some(Attention::Closed))
        .collect();
    assert_eq!(closing.len(), 1, "one commit closes the run");
    assert!(
        closing[0].0.iter().any(|k| k.ends_with(":run_terminal")),
        "the run left the index in another commit than its terminal record's: {:?}",
        closing[0].0
    );
}

/// A worker takes over a run whose owner died only once the lease (plus the allowed skew)
/// has expired, and the run ends with the result of a run without a crash, its at-most-once
/// tool run once.
#[tokio::test]
async fn a_worker_takes_over_a_run_only_once_its_lease_expired() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_exp").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let (agent, counter) = orphan(&store, &clock, "dead", &t, &r, 2).await;
    let w = worker(&store, &clock, "alive", &agent);
    tokio::time::sleep(Duration::from_millis(100)).await;
    clock.advance_ms(30_000 + 5_000); // the lease's end plus the skew: not yet after it
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = mark_of(&*store, &t, &r).await.unwrap();
    assert_eq!(
        m.owner.as_deref(),
        Some("dead"),
        "taken over before the lease expired"
    );
    assert_eq!(w.stats().resumed, 0);
    clock.advance_ms(1);
    until(&*store, &t, &r, |m| m.is_none()).await;
    let stats = w.shutdown().await;
    assert_eq!((stats.taken_over, stats.completed), (1, 1), "{stats:?}");
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
    assert_eq!(counter.get("c2"), 1, "the at-most-once charge ran again");
}

/// At its first look a worker takes back its own earlier incarnation's runs without waiting
/// for their leases; a worker of another owner leaves them alone.
#[tokio::test]
async fn a_restarted_worker_takes_back_its_own_runs_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_own").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let (agent, counter) = orphan(&store, &clock, "w1", &t, &r, 3).await;
    let other = worker(&store, &clock, "w2", &agent);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        other.shutdown().await.resumed,
        0,
        "another owner took a live lease"
    );
    clock.advance_ms(1); // the restart comes after the entry was written
    let again = worker(&store, &clock, "w1", &agent);
    until(&*store, &t, &r, |m| m.is_none()).await;
    let stats = again.shutdown().await;
    assert_eq!((stats.resumed, stats.taken_over), (1, 0), "{stats:?}");
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
    assert_eq!(counter.get("c2"), 1);
}

/// A worker whose clock runs ahead of the owner's by more than the allowed skew takes a live
/// run over early; fencing still keeps the former owner from writing, and the run ends as an
/// uncrashed one, its at-most-once tool run once.
#[tokio::test]
async fn a_worker_with_a_clock_off_by_more_than_the_allowance_cannot_break_a_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let owner_clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_skew").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, 2);
    agent.llm = holding.clone();
    let live = Runner::new(store.clone(), config(&owner_clock, "live")).run_with_id(
        &agent,
        &t,
        r.clone(),
        "go",
    );
    holding.reached.notified().await;
    // Within the allowance: no takeover.
    let near = ManualClock::new(START_MS + 30_000 + 4_000);
    let fresh = agent_with(ScriptedLlm::new(script()), &counter);
    let w = worker(&store, &near, "near", &fresh);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        w.shutdown().await.resumed,
        0,
        "a clock within the allowance took over"
    );
    // Beyond it: the skewed worker takes the live run over.
    let skewed = ManualClock::new(START_MS + 30_000 + 6_000);
    let w = worker(&store, &skewed, "skewed", &fresh);
    until(&*store, &t, &r, |m| m.is_none()).await;
    assert_eq!(w.shutdown().await.taken_over, 1);
    holding.release.notify_one();
    let err = live.result().await.unwrap_err();
    assert_eq!(err.kind(), afk_core::ErrorKind::Fenced, "{err}");
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
    assert_eq!(
        counter.get("c2"),
        1,
        "the former owner or the taker charged twice"
    );
}

/// A run paused for approval is not resumed by a worker; once decided (`Runner::decide`, as
/// `afk decide` does), its entry says `ready` and a worker finishes it.
#[tokio::test]
async fn a_paused_run_waits_for_its_decision_then_a_worker_finishes_it() {
    use afk_core::runner::{GateDecision, ToolGate};
    #[derive(Debug)]
    struct AskForCharges;
    impl ToolGate for AskForCharges {
        fn decide(&self, _: u64, call: &afk_core::schema::ToolCall) -> GateDecision {
            if call.tool_name == "charge" {
                GateDecision::RequestApproval("a human approves charges".into())
            } else {
                GateDecision::Allow
            }
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_pause").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let counter = InvocationCounter::new();
    let gated = |llm| agent_with(llm, &counter).with_gate(Arc::new(AskForCharges));
    let runner = Runner::new(store.clone(), config(&clock, "app"));
    let out = runner
        .run_with_id(&gated(ScriptedLlm::new(script())), &t, r.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    let m = mark_of(&*store, &t, &r).await.unwrap();
    assert_eq!((m.state, m.lease_until_ms), (MarkState::Paused, 0));
    let agent = gated(ScriptedLlm::new(script()));
    let w = worker(&store, &clock, "w", &agent);
    clock.advance_ms(3_600_000);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        w.stats().resumed,
        0,
        "a worker resumed a run waiting for a human"
    );
    assert_eq!(
        mark_of(&*store, &t, &r).await.unwrap().state,
        MarkState::Paused
    );
    runner.decide(&t, &r, Decision::Approve).await.unwrap();
    until(&*store, &t, &r, |m| m.is_none()).await;
    assert_eq!(w.shutdown().await.completed, 1);
    assert_eq!(counter.get("c2"), 1);
}

/// Three workers share a store with twelve orphaned runs: every run ends once, with the
/// uncrashed result, each at-most-once charge made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_workers_finish_each_orphan_exactly_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let t = ThreadId::new("t_many").unwrap();
    let mut runs = Vec::new();
    let counter = InvocationCounter::new();
    for i in 0..12 {
        let r = RunId::new(format!("run_{i}")).unwrap();
        let (_, c) = orphan(&store, &clock, &format!("dead{i}"), &t, &r, 1 + i % 3).await;
        runs.push((r, c));
    }
    let _ = counter;
    clock.advance_ms(60_000);
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let workers: Vec<_> = (0..3)
        .map(|i| worker(&store, &clock, &format!("w{i}"), &agent))
        .collect();
    for (r, _) in &runs {
        until(&*store, &t, r, |m| m.is_none()).await;
    }
    let mut completed = 0;
    for w in workers {
        completed += w.shutdown().await.completed;
    }
    assert!(completed >= 12, "{completed} completions for 12 runs");
    let want = uncrashed().await;
    for (r, _) in &runs {
        assert_eq!(completed_result(&*store, &t, r).await, want, "run {r}");
    }
}

/// A worker's shutdown interrupts its runs, which let go of their leases (`stopped`), so
/// another worker takes them at once, without waiting for a lease to expire.
#[tokio::test]
async fn a_shutdown_hands_the_runs_back_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_shut").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let (_, counter) = orphan(&store, &clock, "w1", &t, &r, 2).await;
    let llm = ScriptedLlm::new(script());
    let mut slow = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, 1);
    slow.llm = holding.clone();
    clock.advance_ms(1); // the restart comes after the entry was written
    let first = worker(&store, &clock, "w1", &slow);
    holding.reached.notified().await;
    let stats = first.shutdown().await;
    assert_eq!(stats.resumed, 1);
    let m = mark_of(&*store, &t, &r).await.unwrap();
    assert_eq!(
        (m.state, m.lease_until_ms),
        (MarkState::Stopped, 0),
        "{m:?}"
    );
    let agent = agent_with(ScriptedLlm::new(script()), &counter);
    let second = worker(&store, &clock, "w2", &agent);
    until(&*store, &t, &r, |m| m.is_none()).await;
    assert_eq!(second.shutdown().await.completed, 1);
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
}

/// While a long model call runs, a timer renews the lease (a commit carrying the entry every
/// third of it): a worker with the same clock never finds it expired.
#[tokio::test]
async fn a_long_model_call_keeps_its_lease() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (t, r) = (
        ThreadId::new("t_long").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, 2);
    agent.llm = holding.clone();
    let cfg = RunnerConfig::default()
        .with_owner("slow")
        .with_lease(Duration::from_millis(150))
        .with_lease_skew(Duration::from_millis(20));
    let h = Runner::new(store.clone(), cfg.clone()).run_with_id(&agent, &t, r.clone(), "go");
    holding.reached.notified().await;
    let first = mark_of(&*store, &t, &r).await.unwrap().lease_until_ms;
    let other = Runner::new(store.clone(), cfg.with_owner("other"));
    let w = Worker::new(other)
        .register(agent_with(ScriptedLlm::new(script()), &counter))
        .with_config(fast())
        .start();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = mark_of(&*store, &t, &r).await.unwrap();
    assert!(
        later.lease_until_ms > first + 300,
        "the lease was not renewed: {first} -> {later:?}"
    );
    assert_eq!(later.owner.as_deref(), Some("slow"));
    assert_eq!(
        w.shutdown().await.resumed,
        0,
        "a renewed lease was taken over"
    );
    holding.release.notify_one();
    assert!(matches!(h.result().await.unwrap(), Outcome::Completed(_)));
    let _ = afk_core::runner::SystemClock.now_ms();
}

/// A run whose handle was dropped (started and left, as a service starting runs from requests
/// does) still runs to its end: nobody can stop it any more, and a model call is not taken
/// for a stop signal.
#[tokio::test]
async fn a_run_whose_handle_was_dropped_runs_to_its_end() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_drop").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &counter);
    let holding = Holding::new(llm, 2);
    agent.llm = holding.clone();
    let runner = Runner::new(store.clone(), config(&clock, "app"));
    drop(runner.run_with_id(&agent, &t, r.clone(), "go"));
    holding.reached.notified().await;
    holding.release.notify_one();
    until(&*store, &t, &r, |m| m.is_none()).await;
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
}

/// A process that claimed an orphan and died before writing its entry leaves the entry of an
/// older claim: the worker's conditional claim is refused, and once the entry stayed the same
/// for a lease and the skew allowance, the worker takes the run with a plain claim.
#[tokio::test]
async fn a_run_whose_claimer_died_before_its_entry_is_still_taken_over() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let (t, r) = (
        ThreadId::new("t_claimer").unwrap(),
        RunId::new("run_w").unwrap(),
    );
    let (agent, counter) = orphan(&store, &clock, "dead", &t, &r, 2).await;
    store.claim(&t, &r).await.unwrap(); // a claimer that died before its first commit
    clock.advance_ms(40_000);
    let w = worker(&store, &clock, "alive", &agent);
    let deadline = tokio::time::Instant::now() + NO_HANG;
    while w.stats().fenced == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no conditional claim was refused"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        mark_of(&*store, &t, &r).await.unwrap().owner.as_deref(),
        Some("dead")
    );
    clock.advance_ms(35_001);
    until(&*store, &t, &r, |m| m.is_none()).await;
    let stats = w.shutdown().await;
    assert_eq!(stats.completed, 1, "{stats:?}");
    assert_eq!(completed_result(&*store, &t, &r).await, uncrashed().await);
    assert_eq!(counter.get("c2"), 1);
}
