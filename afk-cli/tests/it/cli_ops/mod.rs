//! Scenarios for the operator commands, on any store the tests can reach by URL: a run stopped
//! with `EffectUncertain` (its at-most-once `charge` call aborted mid-flight), a run paused for
//! approval, and a completed one; and the plain library resume that follows a CLI answer.
//!
//! Each phase runs on its own runtime that is dropped afterwards, so the store (a RocksDB
//! directory lock, connections) is released before the `afk` binary opens it.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use afk::runner::scripted::ScriptedLlm;
use afk::runner::{
    Agent, EffectPolicy, GateDecision, Outcome, Runner, Tool, ToolContext, ToolError, ToolGate,
    ToolSpec,
};
use afk::schema::{AgentResult, LlmResponse, ToolCall};
use afk::store::{Store, StoreExt};
use afk::{Result, RunId, ThreadId};
use serde_json::{Value, json};

/// The `charge` tool: at most once; counts its executions and records their idempotency keys;
/// hangs (after saying so) while `hang` is set.
#[derive(Debug, Default)]
pub struct Charge {
    pub calls: AtomicU64,
    pub keys: Mutex<Vec<String>>,
    pub hang: AtomicBool,
    pub started: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Tool for Charge {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "charge".into(),
            description: "charge a card".into(),
            parameters: json!({"type": "object"}),
        }
    }
    fn effect_policy(&self) -> EffectPolicy {
        EffectPolicy::AtMostOnce
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> std::result::Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.keys.lock().unwrap().push(ctx.idempotency_key);
        if self.hang.load(Ordering::SeqCst) {
            self.started.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(json!({"charged": args["amount"].clone()}))
    }
}

#[derive(Debug)]
struct AskForCharges;

impl ToolGate for AskForCharges {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == "charge" {
            GateDecision::RequestApproval("charging a card needs a human".into())
        } else {
            GateDecision::Allow
        }
    }
}

/// An agent that charges 5 (call `c1`), then answers "charged"; with a gate asking a human.
pub fn agent(charge: Arc<Charge>, gated: bool) -> Agent {
    let r = |v: Value| serde_json::from_value::<LlmResponse>(v).unwrap();
    let llm = ScriptedLlm::new(vec![
        r(json!({"text": "charging", "tool_calls": [
            {"id": "c1", "tool_name": "charge", "arguments": {"amount": 5}}]})),
        r(json!({"text": "charged", "tool_calls": []})),
    ]);
    let a = Agent::new("payer", "Pay.", "m", llm).with_tool(charge);
    if gated {
        a.with_gate(Arc::new(AskForCharges))
    } else {
        a
    }
}

/// Run `body` with the store `url` opened on a fresh runtime, then drop both.
pub fn with_store<T>(url: &str, body: impl AsyncFnOnce(Arc<dyn Store>) -> T) -> T {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = afk::open(url).await.unwrap();
        body(store).await
    })
}

pub fn ids(thread: &str, run: &str) -> (ThreadId, RunId) {
    (ThreadId::new(thread).unwrap(), RunId::new(run).unwrap())
}

/// Leave `run` stopped with its `charge` call's intent durable and no result: the call is
/// aborted while it runs (as a crash would). Returns the idempotency key of that attempt.
pub fn uncertain_run(url: &str, thread: &str, run: &str) -> String {
    with_store(url, async |store| {
        let (t, r) = ids(thread, run);
        let charge = Arc::new(Charge::default());
        charge.hang.store(true, Ordering::SeqCst);
        let h = Runner::new(store, Default::default()).run_with_id(
            &agent(charge.clone(), false),
            &t,
            r,
            "pay",
        );
        charge.started.notified().await;
        h.abort_handle().unwrap().abort();
        assert!(h.result().await.is_err());
        let keys = charge.keys.lock().unwrap().clone();
        assert_eq!(keys.len(), 1);
        keys[0].clone()
    })
}

/// Leave `run` paused for approval of `charge`.
pub fn paused_run(url: &str, thread: &str, run: &str) {
    with_store(url, async |store| {
        let (t, r) = ids(thread, run);
        let out = Runner::new(store, Default::default())
            .run_with_id(&agent(Arc::new(Charge::default()), true), &t, r, "pay")
            .result()
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Paused { .. }), "{out:?}");
    });
}

/// A plain resume of `run` with a fresh (non-hanging) `charge` tool: its outcome and the tool.
pub fn resume(url: &str, thread: &str, run: &str, gated: bool) -> (Result<Outcome>, Arc<Charge>) {
    with_store(url, async |store| {
        let (t, r) = ids(thread, run);
        let charge = Arc::new(Charge::default());
        let out = Runner::new(store, Default::default())
            .resume(&agent(charge.clone(), gated), &t, &r)
            .result()
            .await;
        (out, charge)
    })
}

/// The completed result of an outcome.
pub fn completed(out: Result<Outcome>) -> AgentResult {
    match out {
        Ok(Outcome::Completed(r)) => *r,
        other => panic!("not completed: {other:?}"),
    }
}

/// Every key and value of a thread (fence included).
pub fn contents(url: &str, thread: &str) -> BTreeMap<String, Vec<u8>> {
    with_store(url, async |store| {
        let t = ThreadId::new(thread).unwrap();
        let keys = store.list_all(&t, "").await.unwrap();
        let vals = store.get_many(&t, &keys).await.unwrap();
        keys.into_iter()
            .zip(vals)
            .map(|(k, v)| (k, v.unwrap_or_default()))
            .collect()
    })
}

/// A name unique to this test process and moment (servers are shared between runs).
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{nanos}", std::process::id())
}

pub use afk_core::testkit::require_env;

/// A fresh bucket on the test S3 server, as a store URL.
pub fn s3_url() -> Option<String> {
    let endpoint = require_env("AFK_TEST_S3_ENDPOINT")?;
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    Some(format!(
        "s3://{}/cli?endpoint={endpoint}&region={}&force_path_style=true\
         &access_key_id={}&secret_access_key={}&create_bucket=true",
        unique("afk-ops").replace('_', "-"),
        var("AFK_TEST_S3_REGION"),
        var("AFK_TEST_S3_ACCESS_KEY_ID"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY"),
    ))
}
