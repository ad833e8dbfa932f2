//! A store outage in the middle of a run fails the run promptly with `Unavailable`; once the
//! store is back, `resume` on the SAME `Runner` (same writer) completes the run with the
//! uncrashed result (the writer's error belongs to the failed claim, not to the run forever).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{EffectPolicy, Outcome, Runner, ToolRef};
use afk_core::store::{FaultStore, Op, RetryPolicy, Store};
use afk_core::testkit::deterministic_runner;
use afk_core::{CheckpointConfig, ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, essence, script};
use serde_json::{Value, json};

/// Long enough for any loaded machine, short enough to report a hang as a failure.
const NO_HANG: Duration = Duration::from_secs(60);

fn runner(store: Arc<dyn Store>, async_writes: bool) -> Runner {
    let checkpoint = CheckpointConfig::default()
        .with_async_writes(async_writes)
        .with_retry(
            RetryPolicy::default()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(10))
                .with_max_elapsed(Duration::from_millis(500)),
        );
    deterministic_runner(store, checkpoint)
}

async fn outage_then_resume_on_the_same_runner(async_writes: bool, outage_op: Option<Op>) {
    let thread = ThreadId::new("t_outage").unwrap();
    let run = RunId::new("run_outage").unwrap();

    // The uncrashed result.
    let counter = InvocationCounter::new();
    let clean = agent_with(ScriptedLlm::new(script()), &counter);
    let want = match runner(Arc::new(MemoryStore::new()), async_writes)
        .run_with_id(&clean, &thread, run.clone(), "go")
        .result()
        .await
    {
        Ok(Outcome::Completed(r)) => essence(&r),
        other => panic!("uncrashed run: {other:?}"),
    };

    // The store goes down while the second step's tool (echo) runs for the first time.
    let fault = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let counter = InvocationCounter::new();
    let mut agent = agent_with(ScriptedLlm::new(script()), &counter);
    let f = fault.clone();
    let once = std::sync::atomic::AtomicBool::new(false);
    let down_echo: ToolRef = ScriptedTool::new(
        "echo",
        EffectPolicy::Idempotent,
        counter.clone(),
        move |a| {
            if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                f.fail_with_probability(outage_op, 1.0, 7, ErrorKind::Unavailable);
            }
            Ok(json!({"echo": a.get("text").cloned().unwrap_or(Value::Null)}))
        },
    );
    agent.tools.retain(|t| t.spec().name != "echo");
    agent.tools.push(down_echo);
    let runner = runner(fault.clone(), async_writes);

    // The bound only catches a hang (a run that retries an outage forever); how fast the
    // run fails is a matter for benchmarks, not for a test on a loaded machine.
    let first = tokio::time::timeout(
        NO_HANG,
        runner
            .run_with_id(&agent, &thread, run.clone(), "go")
            .result(),
    )
    .await
    .expect("the failed run resolves its handle");
    let err = first.expect_err("the run cannot finish while the store is down");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(fault.injected_failures() > 0);

    // While the store is still down, a resume fails the same way (and does not hang).
    let still = tokio::time::timeout(NO_HANG, runner.resume(&agent, &thread, &run).result())
        .await
        .expect("no hang");
    assert_eq!(
        still.map(|_| ()).unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    // The store is back: the same runner resumes the run to the uncrashed result.
    fault.clear_failures();
    let out = tokio::time::timeout(NO_HANG, runner.resume(&agent, &thread, &run).result())
        .await
        .expect("no hang");
    match out {
        Ok(Outcome::Completed(r)) => assert_eq!(essence(&r), want),
        other => panic!("resume after the outage: {other:?}"),
    }
    assert_eq!(counter.get("c1"), 1, "add had a durable result");
    assert_eq!(counter.get("c2"), 1, "charge had a durable result");
}

#[tokio::test]
async fn commit_outage_with_the_write_behind_writer() {
    outage_then_resume_on_the_same_runner(true, Some(Op::Commit)).await;
}

#[tokio::test]
async fn commit_outage_with_inline_writes() {
    outage_then_resume_on_the_same_runner(false, Some(Op::Commit)).await;
}

#[tokio::test]
async fn whole_store_outage_with_the_write_behind_writer() {
    outage_then_resume_on_the_same_runner(true, None).await;
}
