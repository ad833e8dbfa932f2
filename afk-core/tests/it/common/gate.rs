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
use afk_core::store::{Capabilities, Commit, Epoch, ListPage, Store, ThreadPage};
use afk_core::{MemoryStore, Result, RunId, ThreadId};
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

/// A `MemoryStore` behind a gate.
#[derive(Debug)]
pub struct GatedStore {
    pub inner: Arc<MemoryStore>,
    gate: Arc<Gate>,
    counter: InvocationCounter,
    pub claims: Mutex<Vec<ClaimSeen>>,
}

impl GatedStore {
    /// Gate `inner`; claims record durable results and `counter`.
    pub fn new(inner: Arc<MemoryStore>, gate: Arc<Gate>, counter: InvocationCounter) -> Arc<Self> {
        Arc::new(GatedStore {
            inner,
            gate,
            counter,
            claims: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for GatedStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        self.gate.point(format!("get {key}")).await;
        self.inner.get(thread, key).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.gate
            .point(format!(
                "get_many {}",
                keys.first().map_or("", String::as_str)
            ))
            .await;
        self.inner.get_many(thread, keys).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        self.gate.point(format!("list {prefix}")).await;
        self.inner.list(thread, prefix, cursor, limit).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        self.inner.delete(thread, keys).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        self.inner.delete_run(thread, run).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.gate.point("claim".to_owned()).await;
        let e = self.inner.claim(thread, run).await?;
        let seen = ClaimSeen {
            durable: super::durable_results(&self.inner, thread),
            executed: self.counter.snapshot(),
        };
        self.claims.lock().unwrap().push(seen);
        self.gate.release();
        Ok(e)
    }

    /// Through this store's own gated `get` and `claim`.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        afk_core::store::claim_if_new_each(self, thread, run).await
    }
    /// Through this store's own gated `commit`.
    async fn commit_owned(
        &self,
        commit: Commit,
    ) -> std::result::Result<(), afk_core::store::CommitRejected> {
        afk_core::store::commit_by_ref(self, commit).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        // The newest record: a merged commit of the write-behind writer ends with it.
        let key = commit.puts.last().map_or("", |(k, _)| k.as_str());
        self.gate.point(format!("commit {key}")).await;
        self.inner.commit(commit).await
    }

    /// Each commit through the gate of [`GatedStore::commit`].
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        afk_core::store::commit_each(self, commits).await
    }

    async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<ThreadPage> {
        self.gate.point("list_threads".to_owned()).await;
        self.inner.list_threads(cursor, limit).await
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
