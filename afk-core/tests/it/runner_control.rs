//! Cancel, interrupt, and a fresh run under an existing run id.
//!
//! * cancel: a `cancelled` terminal record is written; resume returns it and runs nothing;
//! * interrupt: nothing terminal is written; a later resume continues the run to the same
//!   result, and the time between the two (a day here) is not active time;
//! * `run_with_id` on a run that has checkpoints is refused with `Conflict`, writing nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{LlmClient, LlmRequest, ManualClock, Outcome, Runner};
use afk_core::schema::LlmResponse;
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{ErrorKind, MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{agent_with, essence, latest_terminal, script};
use tokio::sync::Notify;

/// A model whose `stall_at`-th request (1-based) never answers (until the run is stopped).
#[derive(Debug)]
struct StallOnce {
    inner: Arc<ScriptedLlm>,
    stall_at: u64,
    seen: std::sync::atomic::AtomicU64,
    stalled: AtomicBool,
    entered: Notify,
}

#[async_trait]
impl LlmClient for StallOnce {
    fn provider(&self) -> String {
        self.inner.provider()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.stall_at && !self.stalled.swap(true, Ordering::SeqCst) {
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
        self.inner.complete(request).await
    }
}

struct Rig {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    runner: Runner,
    thread: ThreadId,
    run: RunId,
}

fn rig(id: &str) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let clock = ManualClock::new(START_MS);
    let runner = Runner::new(
        store.clone(),
        deterministic_config().with_clock(clock.clone()),
    );
    Rig {
        store,
        clock,
        runner,
        thread: ThreadId::new("t_ctl").unwrap(),
        run: RunId::new(id).unwrap(),
    }
}

fn stalling(stall_at: u64) -> Arc<StallOnce> {
    Arc::new(StallOnce {
        inner: ScriptedLlm::new(script()),
        stall_at,
        seen: Default::default(),
        stalled: AtomicBool::new(false),
        entered: Notify::new(),
    })
}

async fn uncrashed() -> serde_json::Value {
    let r = rig("run_ref");
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    let out = r.runner.run_with_id(&agent, &r.thread, r.run.clone(), "go");
    essence(out.result().await.unwrap().result().unwrap())
}

#[tokio::test]
async fn cancel_writes_a_cancelled_record_that_resume_returns() {
    let r = rig("run_cancel");
    let counter = InvocationCounter::new();
    let llm = stalling(2);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm.clone();
    let h = r.runner.run_with_id(&agent, &r.thread, r.run.clone(), "go");
    llm.entered.notified().await;
    h.cancel();
    let err = h.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    let t = latest_terminal(&r.store, &r.thread, "run_cancel").expect("terminal record");
    assert_eq!(t["payload"]["state"], "cancelled");

    let ran = counter.total();
    let fresh = ScriptedLlm::new(script());
    let agent2 = agent_with(fresh.clone(), &counter);
    let out = r
        .runner
        .resume(&agent2, &r.thread, &r.run)
        .result()
        .await
        .unwrap();
    assert_eq!(out.result().unwrap().state, "cancelled");
    assert_eq!(
        (fresh.calls(), counter.total()),
        (0, ran),
        "resume ran nothing"
    );
}

#[tokio::test]
async fn interrupt_writes_nothing_terminal_and_a_later_resume_continues() {
    let want = uncrashed().await;
    let r = rig("run_ref");
    let counter = InvocationCounter::new();
    let llm = stalling(2);
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    agent.llm = llm.clone();
    agent.limits.max_wall_time_ms = Some(60_000);
    let h = r.runner.run_with_id(&agent, &r.thread, r.run.clone(), "go");
    llm.entered.notified().await;
    h.interrupt();
    let err = h.result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    assert!(latest_terminal(&r.store, &r.thread, "run_ref").is_none());

    // A day later (not active time: the wall-time budget is one minute).
    r.clock.advance_ms(86_400_000);
    let agent2 = agent_with(ScriptedLlm::new(script()), &counter);
    let mut agent2 = agent2;
    agent2.limits.max_wall_time_ms = Some(60_000);
    let out = r
        .runner
        .resume(&agent2, &r.thread, &r.run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert_eq!(essence(&res), want);
    assert_eq!(counter.get("c1"), 1, "the first batch was durable");
    assert_eq!(counter.get("c2"), 1);
}

#[tokio::test]
async fn a_fresh_run_under_an_existing_run_id_is_refused() {
    let r = rig("run_dup");
    let agent = agent_with(ScriptedLlm::new(script()), &InvocationCounter::new());
    r.runner
        .run_with_id(&agent, &r.thread, r.run.clone(), "go")
        .result()
        .await
        .unwrap();
    let before = r.store.snapshot(&r.thread);
    let llm = ScriptedLlm::new(script());
    let agent2 = agent_with(llm.clone(), &InvocationCounter::new());
    let err = r
        .runner
        .run_with_id(&agent2, &r.thread, r.run.clone(), "another input")
        .result()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.message().contains("already exists"), "{err}");
    assert_eq!(llm.calls(), 0);
    assert_eq!(
        r.store.snapshot(&r.thread),
        before,
        "nothing written or claimed"
    );
}
