//! A real runner run across a restart of a redis-server of our own (AOF, fsync always): the
//! server dies while a tool runs, the run fails with `Unavailable`, the server comes back with
//! what it acknowledged, the same runner resumes the run to completion, and
//! `afk_core::verify` finds nothing half-written, before the resume and after it.
//! Skipped like the others when `AFK_TEST_REDIS_URL` is unset.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Outcome, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::{RetryPolicy, Store};
use afk_core::verify::{Report, verify_thread};
use afk_core::{CheckpointConfig, ErrorKind, RunId, ThreadId};
use common::*;
use serde_json::{Value, json};

fn answer(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("scripted answer")
}

fn problems(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{}: {p}", r.run)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_run_across_a_server_restart_verifies_clean() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_s = dir.path().to_str().expect("utf8 temp dir").to_owned();
    let server = Arc::new(Mutex::new(OwnServer::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--dir",
        &dir_s,
    ])));
    let url = server.lock().expect("lock").url();
    let mut cfg = config(&url);
    cfg.connect_timeout_ms = 200;
    cfg.response_timeout_ms = 500;
    let store: Arc<dyn Store> = Arc::new(connect(cfg).await);
    let runner = Runner::new(
        store.clone(),
        RunnerConfig::default().with_checkpoint(
            CheckpointConfig::default().with_retry(
                RetryPolicy::default()
                    .with_max_attempts(3)
                    .with_initial_backoff(Duration::from_millis(10))
                    .with_max_elapsed(Duration::from_millis(500)),
            ),
        ),
    );

    // Two tool steps; the first call of the second tool kills the server under the run.
    let llm = ScriptedLlm::new(vec![
        answer(json!({"text": "First.", "tool_calls": [
            {"id": "call_1", "tool_name": "add", "arguments": {"a": 2, "b": 5}}]})),
        answer(json!({"text": "Second.", "tool_calls": [
            {"id": "call_2", "tool_name": "add", "arguments": {"a": 7, "b": 1}}]})),
        answer(json!({"text": "Done: 8.", "tool_calls": []})),
    ]);
    let tool_runs = InvocationCounter::new();
    let killed = Arc::new(AtomicBool::new(false));
    let (srv, k) = (server.clone(), killed.clone());
    let add = ScriptedTool::new(
        "add",
        EffectPolicy::Idempotent,
        tool_runs.clone(),
        move |a| {
            let x = a.get("a").and_then(Value::as_i64).unwrap_or_default();
            let y = a.get("b").and_then(Value::as_i64).unwrap_or_default();
            if x == 7 && !k.swap(true, Ordering::SeqCst) {
                srv.lock().expect("lock").kill();
            }
            Ok(json!({"result": x + y}))
        },
    );
    let agent = Agent::new("adder", "Use the add tool.", "scripted", llm.clone()).with_tool(add);
    let thread: ThreadId = thread("verify_restart");
    let run = RunId::new("run_restart").expect("run id");

    let first = tokio::time::timeout(
        Duration::from_secs(60),
        runner
            .run_with_id(&agent, &thread, run.clone(), "go")
            .result(),
    )
    .await
    .expect("the failed run resolves its handle");
    let err = first.expect_err("the run cannot finish while the server is down");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        killed.load(Ordering::SeqCst),
        "the server was killed mid-run"
    );

    // Back with what it acknowledged: the state at the crash point is whole.
    server.lock().expect("lock").restart();
    let at_crash = verify_thread(store.as_ref(), &thread)
        .await
        .expect("verify after the restart");
    assert_eq!(at_crash.len(), 1, "the run's pointer survived the restart");
    assert_eq!(problems(&at_crash), Vec::<String>::new());
    assert_eq!(
        at_crash[0].uncertain().count(),
        1,
        "step 2's intent was acknowledged (so kept) before its tool ran: {:?}",
        at_crash[0].notes
    );

    // The same runner resumes the run to the uncrashed result.
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        runner.resume(&agent, &thread, &run).result(),
    )
    .await
    .expect("no hang");
    match out {
        Ok(Outcome::Completed(r)) => assert_eq!(r.final_text, "Done: 8."),
        other => panic!("resume after the restart: {other:?}"),
    }
    assert_eq!(tool_runs.get("call_1"), 1, "step 1's result was durable");

    let after = verify_thread(store.as_ref(), &thread)
        .await
        .expect("verify after the resume");
    assert_eq!(after.len(), 1);
    assert_eq!(problems(&after), Vec::<String>::new());
    assert_eq!(
        after[0].uncertain().count(),
        0,
        "the resume settled every effect intent: {:?}",
        after[0].notes
    );
}
