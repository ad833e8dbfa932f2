//! The S3 server stopped and restarted in the middle of a run: calls fail with a clear error
//! within their time bounds, never hang, and nothing half-written becomes visible.
//!
//! Uses its own throwaway moto server (`AFK_TEST_MOTO_SERVER`, which `cargo xtask test` sets
//! to the `moto_server` of its virtualenv) on a free port. moto keeps everything in memory, so after
//! the restart the bucket is gone: the expected outcome is then an `InvalidConfig` error naming
//! the bucket, not stale or partial data.
//!
//! With a real runner run: `afk_core::verify` finds the state whole at the moment
//! of the kill (checked while the run waits in a tool, before the server dies), and whole again
//! after the run completes on the fresh bucket. What it cannot show: that the state at the kill
//! survives the restart; moto does not keep it, so that half is covered by Redis and RocksDB.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Outcome, Runner, RunnerConfig, Tool, ToolContext, ToolError};
use afk_core::runner::{EffectPolicy, ToolSpec};
use afk_core::schema::LlmResponse;
use afk_core::store::RetryPolicy;
use afk_core::verify::{Report, verify_thread};
use afk_core::{
    CheckpointConfig, ErrorKind, RunId, ThreadId,
    store::{Commit, Store},
};
use afk_store_s3::S3Store;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Longest any single store call may take while the server is down (the request bound is
/// 120 s; refused connections fail much faster).
const BOUND: Duration = Duration::from_secs(150);

/// The `moto_server` binary to start (`AFK_TEST_MOTO_SERVER`); skipped or, under
/// `AFK_REQUIRE_INTEGRATION=1`, a failure when it is not set or does not exist.
fn moto_binary() -> Option<String> {
    let path = afk_conformance::require_env("AFK_TEST_MOTO_SERVER")?;
    assert!(
        std::path::Path::new(&path).exists(),
        "AFK_TEST_MOTO_SERVER={path} does not exist"
    );
    Some(path)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

struct Moto(Child);

impl Moto {
    fn start(bin: &str, port: u16) -> Moto {
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto(child)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung longer than {BOUND:?}"))
}

#[tokio::test]
async fn server_restart_mid_run_fails_clearly_without_hanging() {
    let Some(bin) = moto_binary() else { return };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let Some(cfg) = common::config(&endpoint, "restart") else {
        return;
    };
    let mut moto = Some(Moto::start(&bin, port));
    let store = S3Store::open(cfg.clone()).await.unwrap();
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_r").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let step = |i: u32| Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![(format!("checkpoint:run_r:{i}:pre_llm"), vec![i as u8; 2048])],
        latest: Some(format!("{{\"step\":{i}}}").into_bytes()),
        attention: None,
    };
    store.commit(&step(0)).await.unwrap();

    // Server down: commit and get fail with Unavailable (retryable), within the bound.
    drop(moto.take());
    let started = Instant::now();
    let err = bounded("commit while down", store.commit(&step(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    let err = bounded("get while down", store.get(&t, "checkpoint:run_r:latest"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    eprintln!("calls while down failed after {:?}", started.elapsed());

    // Server back, empty (moto is in memory): a clear error naming the bucket, no stale data.
    let _moto = Moto::start(&bin, port);
    let err = bounded("commit after restart", store.commit(&step(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains(&cfg.bucket), "{err}");
    let err = bounded(
        "get after restart",
        store.get(&t, "checkpoint:run_r:latest"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains(&cfg.bucket), "{err}");

    // Reopened (bucket created again) the run starts from nothing: no half-written step 1.
    let store = S3Store::open(cfg.clone()).await.unwrap();
    assert_eq!(
        store.get(&t, "checkpoint:run_r:1:pre_llm").await.unwrap(),
        None
    );
    assert_eq!(
        store.get(&t, "checkpoint:run_r:latest").await.unwrap(),
        None
    );
    let epoch = store.claim(&t, &r).await.unwrap();
    let c = Commit { epoch, ..step(1) };
    store.commit(&c).await.unwrap();
    assert_eq!(
        store.get(&t, "checkpoint:run_r:latest").await.unwrap(),
        Some(b"{\"step\":1}".to_vec())
    );
}

/// `add`, whose first call with `a == 7` says so and then waits to be released.
#[derive(Debug, Default)]
struct GatedAdd {
    used: AtomicBool,
    reached: Notify,
    release: Notify,
}

#[async_trait::async_trait]
impl Tool for GatedAdd {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "add".into(),
            description: "adds a and b".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::Idempotent
    }

    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        let x = args.get("a").and_then(Value::as_i64).unwrap_or_default();
        let y = args.get("b").and_then(Value::as_i64).unwrap_or_default();
        if x == 7 && !self.used.swap(true, Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
        Ok(json!({"result": x + y}))
    }
}

fn answer(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("scripted answer")
}

fn script() -> Vec<LlmResponse> {
    vec![
        answer(json!({"text": "First.", "tool_calls": [
            {"id": "call_1", "tool_name": "add", "arguments": {"a": 2, "b": 5}}]})),
        answer(json!({"text": "Second.", "tool_calls": [
            {"id": "call_2", "tool_name": "add", "arguments": {"a": 7, "b": 1}}]})),
        answer(json!({"text": "Done: 8.", "tool_calls": []})),
    ]
}

fn runner(store: Arc<dyn Store>) -> Runner {
    let retry = RetryPolicy::default()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(10))
        .with_max_elapsed(Duration::from_millis(500));
    Runner::new(
        store,
        RunnerConfig::default().with_checkpoint(CheckpointConfig::default().with_retry(retry)),
    )
}

fn problems(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{}: {p}", r.run)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_run_verifies_clean_at_the_kill_and_after_completing_on_a_fresh_bucket() {
    let Some(bin) = moto_binary() else { return };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let Some(cfg) = common::config(&endpoint, "restartrun") else {
        return;
    };
    let mut moto = Some(Moto::start(&bin, port));
    let store: Arc<dyn Store> = Arc::new(S3Store::open(cfg.clone()).await.unwrap());
    let (t, r) = (
        ThreadId::new("t_run").unwrap(),
        RunId::new("run_k").unwrap(),
    );
    let gate = Arc::new(GatedAdd::default());
    let agent = Agent::new("adder", "Use add.", "scripted", ScriptedLlm::new(script()))
        .with_tool(gate.clone());
    let first = runner(store.clone());
    let handle = first.run_with_id(&agent, &t, r.clone(), "go");

    // While the run waits in step 2's tool: verify, then kill the server and let it go on.
    let (result, at_kill) = tokio::join!(bounded("the run", handle.result()), async {
        gate.reached.notified().await;
        let reports = verify_thread(store.as_ref(), &t).await.unwrap();
        drop(moto.take());
        gate.release.notify_one();
        reports
    });
    assert_eq!(at_kill.len(), 1, "the run is visible before the kill");
    assert_eq!(problems(&at_kill), Vec::<String>::new());
    assert_eq!(
        at_kill[0].uncertain().count(),
        1,
        "step 2's intent is durable before its tool runs: {:?}",
        at_kill[0].notes
    );
    let err = result.expect_err("the run cannot finish while the server is down");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    // Back, empty: verifying the old bucket is a clear error naming it, not a clean report.
    let _moto = Moto::start(&bin, port);
    let err = bounded("verify after restart", verify_thread(store.as_ref(), &t))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&cfg.bucket), "{err}");

    // On the fresh bucket there is nothing to resume; the run is started again and completes,
    // a resume of it returns the stored result, and the state verifies clean.
    let fresh: Arc<dyn Store> = Arc::new(S3Store::open(cfg.clone()).await.unwrap());
    let again = runner(fresh.clone());
    let agent = Agent::new("adder", "Use add.", "scripted", ScriptedLlm::new(script()))
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    let err = again.resume(&agent, &t, &r).result().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let done = again
        .run_with_id(&agent, &t, r.clone(), "go")
        .result()
        .await;
    assert!(matches!(done, Ok(Outcome::Completed(ref c)) if c.final_text == "Done: 8."));
    let resumed = again.resume(&agent, &t, &r).result().await;
    assert!(matches!(resumed, Ok(Outcome::Completed(ref c)) if c.final_text == "Done: 8."));
    let after = verify_thread(fresh.as_ref(), &t).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(problems(&after), Vec::<String>::new());
    assert_eq!(after[0].uncertain().count(), 0, "{:?}", after[0].notes);
}
