//! A tool output larger than Redis keeps in one value (32 MiB): on a real server, the run
//! completes with that call failed ("its output was dropped") instead of failing on the
//! refused commit, and an output that fits is kept whole. Skipped like the others when
//! `AFK_TEST_REDIS_URL` is unset.

use crate::common;

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Outcome, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::Store;
use common::*;
use serde_json::{Value, json};

fn answer(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("scripted answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_over_the_value_limit_fails_its_call_and_the_run_completes() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(connect(config(&url)).await);
    assert_eq!(
        store.capabilities().max_value_size,
        Some(afk_store_redis::MAX_VALUE_SIZE)
    );
    let llm = ScriptedLlm::new(vec![
        answer(json!({"text": "Fetch both.", "tool_calls": [
            {"id": "huge", "tool_name": "fetch", "arguments": {"mb": 20}},
            {"id": "fits", "tool_name": "fetch", "arguments": {"mb": 2}}]})),
        answer(json!({"text": "Done.", "tool_calls": []})),
    ]);
    let runs = InvocationCounter::new();
    let fetch = ScriptedTool::new("fetch", EffectPolicy::Idempotent, runs.clone(), |a| {
        let mb = a["mb"].as_u64().unwrap_or(0) as usize;
        Ok(json!({"page": "x".repeat(mb << 20)}))
    });
    let agent = Agent::new("fetcher", "", "m", llm).with_tool(fetch);
    let runner = Runner::new(store.clone(), RunnerConfig::default());
    let t = thread("big");
    let out = runner
        .run_with_id(&agent, &t, run("r_big"), "go")
        .result()
        .await
        .expect("the run completes");
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    let (huge, fits) = (&res.tool_executions[0], &res.tool_executions[1]);
    assert!(!huge.success, "{:?}", huge.error);
    let err = huge.error.as_deref().unwrap_or_default();
    assert!(err.contains("its output was dropped"), "{err}");
    assert!(fits.success);
    assert_eq!(fits.output["page"].as_str().map(str::len), Some(2 << 20));
    assert_eq!((runs.get("huge"), runs.get("fits")), (1, 1));
    let row = store.get(&t, "effect:r_big:1:huge").await.unwrap().unwrap();
    assert!(row.len() < 64 * 1024, "the dropped output is not stored");
    let again = runner
        .resume(&agent, &t, &run("r_big"))
        .result()
        .await
        .expect("a resume of the finished run");
    assert!(matches!(again, Outcome::Completed(_)));
    assert_eq!((runs.get("huge"), runs.get("fits")), (1, 1));
    store.delete_run(&t, &run("r_big")).await.unwrap();
}
