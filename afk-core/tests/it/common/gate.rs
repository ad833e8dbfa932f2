//! Await-point gates: a store, a model and tools that count every await point of a run (every
//! store call, including the writer's commits, every model call, every tool call) and block at
//! the N-th one until the test has aborted the run task.
//!
//! A blocked point is released by the next `claim` of the store (after it took effect), so a
//! commit the aborted run had handed to the writer lands after the new claim, i.e. fenced.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::InvocationCounter;
use afk_core::runner::{LlmClient, LlmRequest, Tool, ToolContext, ToolError, ToolRef, ToolSpec};
use afk_core::schema::LlmResponse;
use afk_core::store::{Call, Done, HookStore, Hooks};
use afk_core::{MemoryStore, Result, ThreadId};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{Notify, watch};

#[derive(Debug, Default)]
struct GateState {
    count: u64,
    arm: Option<u64>,
    hit: Option<String>,
    tickets: u64,
    seen: Vec<String>,
}

/// Counts await points and blocks at the armed one.
#[derive(Debug)]
pub struct Gate {
    state: Mutex<GateState>,
    hit: Notify,
    released: watch::Sender<u64>,
}

impl Gate {
    /// An unarmed gate.
    pub fn new() -> Arc<Self> {
        Arc::new(Gate {
            state: Mutex::new(GateState::default()),
            hit: Notify::new(),
            released: watch::channel(0).0,
        })
    }

    /// Count points from zero again and block at the `n`-th (1-based) from now.
    pub fn arm(&self, n: u64) {
        let mut st = self.state.lock().unwrap();
        st.count = 0;
        st.arm = Some(n);
        st.hit = None;
        st.seen.clear();
    }

    /// Count from zero again without blocking anywhere.
    pub fn disarm(&self) {
        let mut st = self.state.lock().unwrap();
        st.count = 0;
        st.arm = None;
        st.hit = None;
        st.seen.clear();
    }

    /// Labels of the points passed since the last `arm`/`disarm`, in order.
    pub fn seen(&self) -> Vec<String> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Points passed since the last `arm`/`disarm`.
    pub fn count(&self) -> u64 {
        self.state.lock().unwrap().count
    }

    /// The label of the point the gate blocked at since the last `arm`, if any.
    pub fn hit_label(&self) -> Option<String> {
        self.state.lock().unwrap().hit.clone()
    }

    /// Resolves once the armed point was reached.
    pub async fn reached(&self) {
        self.hit.notified().await;
    }

    /// Let every blocked point go on.
    pub fn release(&self) {
        let t = self.state.lock().unwrap().tickets;
        self.released.send_replace(t);
    }

    /// One await point named `label`.
    pub async fn point(&self, label: String) {
        let ticket = {
            let mut st = self.state.lock().unwrap();
            st.count += 1;
            st.seen.push(label.clone());
            if st.arm != Some(st.count) {
                return;
            }
            st.arm = None;
            st.hit = Some(label);
            st.tickets += 1;
            st.tickets
        };
        let mut rx = self.released.subscribe();
        self.hit.notify_one();
        let _ = rx.wait_for(|r| *r >= ticket).await;
    }
}

/// What a resume saw when it claimed the run.
#[derive(Debug, Clone)]
pub struct ClaimSeen {
    /// Call ids with a durable successful result.
    pub durable: Vec<String>,
    /// Tool executions per call id so far.
    pub executed: BTreeMap<String, u64>,
}

/// A `MemoryStore` behind a gate: the hooks of a [`GatedStore`].
#[derive(Debug)]
pub struct StoreGate {
    inner: Arc<MemoryStore>,
    gate: Arc<Gate>,
    counter: InvocationCounter,
    /// What each claim saw, in order.
    pub claims: Mutex<Vec<ClaimSeen>>,
}

/// A `MemoryStore` behind a gate: every call but `delete` and `delete_run` is an await point
/// (a composite call is its gets, claims and commits), and a claim that took effect records
/// what it saw and releases the blocked point.
pub type GatedStore = HookStore<StoreGate, MemoryStore>;

/// Gate `inner`; claims record durable results and `counter`.
pub fn gated(
    inner: Arc<MemoryStore>,
    gate: Arc<Gate>,
    counter: InvocationCounter,
) -> Arc<GatedStore> {
    let hooks = StoreGate {
        inner: inner.clone(),
        gate,
        counter,
        claims: Mutex::new(Vec::new()),
    };
    Arc::new(HookStore::new(inner, hooks))
}

#[async_trait]
impl Hooks for StoreGate {
    /// The thread of a claim, for `after`.
    type Note = Option<ThreadId>;

    /// `claim_if_new`, `commit_owned` and `commit_batch` through the gated `get`, `claim` and
    /// `commit`.
    fn through_primitives(&self) -> bool {
        true
    }

    async fn before(&self, call: Call<'_>) -> Result<Option<ThreadId>> {
        let label = match call {
            Call::Get { key, .. } => format!("get {key}"),
            Call::GetMany { keys, .. } => {
                format!("get_many {}", keys.first().map_or("", String::as_str))
            }
            Call::List { prefix, .. } => format!("list {prefix}"),
            Call::Claim { thread, .. } => {
                self.gate.point("claim".to_owned()).await;
                return Ok(Some(thread.clone()));
            }
            // The newest record: a merged commit of the write-behind writer ends with it.
            Call::Commit(commit) => format!(
                "commit {}",
                commit.puts.last().map_or("", |(k, _)| k.as_str())
            ),
            Call::ListThreads { .. } => "list_threads".to_owned(),
            _ => return Ok(None),
        };
        self.gate.point(label).await;
        Ok(None)
    }

    /// After a claim took effect: record what it saw, then release the blocked point.
    fn after(&self, claimed: Option<ThreadId>, done: Done<'_>) {
        let (Some(thread), true) = (claimed, done.is_ok()) else {
            return;
        };
        let seen = ClaimSeen {
            durable: super::durable_results(&self.inner, &thread),
            executed: self.counter.snapshot(),
        };
        self.claims.lock().unwrap().push(seen);
        self.gate.release();
    }
}

/// A model behind a gate (the point is before the model is asked).
#[derive(Debug)]
pub struct GatedLlm<L: ?Sized> {
    pub inner: Arc<L>,
    pub gate: Arc<Gate>,
}

#[async_trait]
impl<L: LlmClient + ?Sized> LlmClient for GatedLlm<L> {
    fn provider(&self) -> String {
        self.inner.provider()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        self.gate.point(format!("llm step {}", request.step)).await;
        self.inner.complete(request).await
    }
}

/// A tool behind a gate (the point is before the tool runs).
#[derive(Debug)]
pub struct GatedTool {
    pub inner: ToolRef,
    pub gate: Arc<Gate>,
}

#[async_trait]
impl Tool for GatedTool {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    fn effect_policy(&self) -> afk_core::runner::EffectPolicy {
        self.inner.effect_policy()
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> std::result::Result<Value, ToolError> {
        self.gate.point(format!("tool {}", ctx.tool_call_id)).await;
        self.inner.call(ctx, args).await
    }
}
