//! A fork of a run that is still running, and a fork racing a resume, on RocksDB, Redis and S3
//! (the library, on the stores the command line opens by URL). The source's step-2 tool call
//! blocks: a fork from a step the source has not begun is refused (`Conflict`, nothing
//! written); a fork from step 2, which the source has begun, runs from the state the source had
//! when it began that step (snapshot-consistent: it reads only the steps the source has left)
//! and completes while the source still blocks; released, the source completes undisturbed,
//! with the same answer. Then a fork of the finished source and a resume of it, at the same
//! moment, both end well.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use afk::runner::scripted::ScriptedLlm;
use afk::runner::{Agent, EffectPolicy, Outcome, Runner, Tool, ToolContext, ToolError, ToolSpec};
use afk::schema::{LlmResponse, Phase};
use afk::store::Store;
use afk::{ErrorKind, RunId};
use serde_json::{Value, json};

use crate::cli_ops::{completed, ids, with_store};

/// Executions per tool call id.
#[derive(Debug, Clone, Default)]
struct InvocationCounter(Arc<Mutex<BTreeMap<String, u64>>>);

impl InvocationCounter {
    fn new() -> Self {
        Self::default()
    }
    fn record(&self, call: &str) {
        *self.0.lock().unwrap().entry(call.to_owned()).or_default() += 1;
    }
    fn get(&self, call: &str) -> u64 {
        self.0.lock().unwrap().get(call).copied().unwrap_or(0)
    }
    fn total(&self) -> u64 {
        self.0.lock().unwrap().values().sum()
    }
}

/// `add`, idempotent; its call `c2` waits for a permit of `gate`, when there is one. Counts
/// its executions per call id.
#[derive(Debug)]
struct SlowAdd {
    gate: Option<Arc<tokio::sync::Semaphore>>,
    counter: InvocationCounter,
}

#[async_trait::async_trait]
impl Tool for SlowAdd {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "add".into(),
            description: "add two integers".into(),
            parameters: json!({"type": "object"}),
        }
    }
    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::Idempotent
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.counter.record(&ctx.tool_call_id);
        if let Some(gate) = self.gate.as_ref().filter(|_| ctx.tool_call_id == "c2") {
            let _permit = gate
                .acquire()
                .await
                .map_err(|e| ToolError::new(e.to_string()))?;
        }
        let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
        Ok(json!({"sum": sum}))
    }
}

/// Three steps: add 1+2 (`c1`), add 3+4 (`c2`), answer.
fn agent(gate: Option<Arc<tokio::sync::Semaphore>>, counter: &InvocationCounter) -> Agent {
    let r = |v: Value| serde_json::from_value::<LlmResponse>(v).unwrap();
    let llm = ScriptedLlm::new(vec![
        r(json!({"text": "first", "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]})),
        r(json!({"text": "second", "tool_calls": [
            {"id": "c2", "tool_name": "add", "arguments": {"a": 3, "b": 4}}]})),
        r(json!({"text": "3 and 7", "tool_calls": []})),
    ]);
    let tool = SlowAdd {
        gate,
        counter: counter.clone(),
    };
    Agent::new("adder", "Add.", "m", llm).with_tool(Arc::new(tool))
}

async fn every_key(store: &Arc<dyn Store>, thread: &afk::ThreadId) -> Vec<(String, Vec<u8>)> {
    use afk::store::StoreExt as _;
    let keys = store.list_all(thread, "").await.unwrap();
    let values = store.get_many(thread, &keys).await.unwrap();
    keys.into_iter()
        .zip(values)
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect()
}

fn forking_a_running_run(url: &str, thread: &str) {
    with_store(url, async |store| {
        let (t, src) = ids(thread, "source");
        let runner = || Runner::new(store.clone(), Default::default());
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let source_tools = InvocationCounter::new();
        let handle = runner().run_with_id(
            &agent(Some(gate.clone()), &source_tools),
            &t,
            src.clone(),
            "go",
        );
        // Wait until the source has begun step 2 (and blocks in its tool).
        let began = afk::keys::checkpoint_key(&src, 2, Phase::StepStarted);
        let deadline = Instant::now() + Duration::from_secs(30);
        while store.get(&t, &began).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "the source never began step 2");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Step 3, not begun: refused, nothing written.
        let before = every_key(&store, &t).await;
        let fresh = InvocationCounter::new();
        let err = runner()
            .fork(
                &agent(None, &fresh),
                &t,
                &src,
                3,
                RunId::new("too-far").unwrap(),
            )
            .result()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert_eq!(every_key(&store, &t).await, before, "a refused fork wrote");

        // Step 2, begun: the fork runs from there while the source still blocks.
        let fork_tools = InvocationCounter::new();
        let out = runner()
            .fork(
                &agent(None, &fork_tools),
                &t,
                &src,
                2,
                RunId::new("while-running").unwrap(),
            )
            .result()
            .await;
        let forked = completed(out);
        assert_eq!(forked.final_text, "3 and 7");
        assert_eq!(
            fork_tools.get("c1"),
            0,
            "step 1 was run again, not replayed"
        );
        assert_eq!(fork_tools.get("c2"), 1);

        // Released, the source completes as if nothing had happened.
        gate.add_permits(1);
        let source = completed(handle.result().await);
        assert_eq!(source.final_text, forked.final_text);
        assert_eq!(source_tools.get("c1"), 1);
        assert_eq!(source_tools.get("c2"), 1);

        // A fork racing a resume of the (finished) source: both end well.
        let (a, b) = (InvocationCounter::new(), InvocationCounter::new());
        let (resumed, raced) = tokio::join!(
            runner().resume(&agent(None, &a), &t, &src).result(),
            runner()
                .fork(&agent(None, &b), &t, &src, 1, RunId::new("racing").unwrap())
                .result(),
        );
        assert!(matches!(resumed, Ok(Outcome::Completed(_))), "{resumed:?}");
        assert_eq!(completed(raced).final_text, "3 and 7");
        assert_eq!(a.total(), 0, "the resume of a finished run ran a tool");
    });
}

#[test]
fn a_running_run_is_forked_and_a_fork_races_a_resume_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    forking_a_running_run(&crate::common::rocks(&dir.path().join("db")), "forks");
}

#[cfg(feature = "redis")]
#[test]
fn a_running_run_is_forked_and_a_fork_races_a_resume_on_redis() {
    if let Some(url) = crate::cli_ops::require_env("AFK_TEST_REDIS_URL") {
        forking_a_running_run(&url, &crate::cli_ops::unique("fork_running"));
    }
}

#[cfg(feature = "s3")]
#[test]
fn a_running_run_is_forked_and_a_fork_races_a_resume_on_s3() {
    if let Some(url) = crate::cli_ops::s3_url() {
        forking_a_running_run(&url, "forks");
    }
}
