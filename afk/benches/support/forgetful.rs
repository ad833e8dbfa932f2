//! A store wrapper for one measurement only: what a step costs when the store does not keep
//! the run's records. Each commit is validated whole and its fence checked by the inner store
//! as always, and the latest pointer is written; its other keys are dropped instead of kept.
//!
//! Not a store anyone can use (a resume finds nothing to resume from). It exists so that
//! `perf_probe` (`PROBE_FORGET=1`) can split a step's time into what the core does and what
//! keeping ~4 KB of new records per step costs the in-memory store: the same binary, the same
//! minutes, one wrapper apart. See BENCHMARKS.md, "What keeping the records costs".

use std::sync::Arc;

use afk::{
    Result, RunId, ThreadId,
    store::{
        Capabilities, Commit, CommitRejected, Epoch, ListPage, Store, commit_each, validate_commit,
    },
};
use async_trait::async_trait;

/// Forwards everything to `inner`, except that commits lose their record keys (see the module
/// documentation).
#[derive(Debug)]
pub struct ForgetfulStore {
    inner: Arc<dyn Store>,
}

impl ForgetfulStore {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        ForgetfulStore { inner }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for ForgetfulStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(thread, key).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.get_many(thread, keys).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        self.inner.list(thread, prefix, cursor, limit).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        self.inner.delete(thread, keys).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        self.inner.delete_run(thread, run).await
    }

    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk::store::ThreadPage> {
        self.inner.list_threads(cursor, limit).await
    }

    async fn list_attention(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk::store::AttentionPage> {
        self.inner.list_attention(cursor, limit).await
    }

    async fn effect_hashes(&self, thread: &ThreadId) -> Result<afk_core::hash::EffectHashes> {
        self.inner.effect_hashes(thread).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        self.inner.attention(thread, run).await
    }

    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk::store::FinishedPage> {
        self.inner.list_finished(before_ms, cursor, limit).await
    }

    async fn forget_finished(&self, entries: &[afk::store::FinishedRun]) -> Result<()> {
        self.inner.forget_finished(entries).await
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        self.inner.finish_run(thread, run, epoch).await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        self.inner.claim_if(thread, run, seen).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.inner.claim(thread, run).await
    }

    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        self.inner.claim_if_new(thread, run).await
    }

    /// One path: a copy, through [`ForgetfulStore::commit_owned`].
    async fn commit(&self, commit: &Commit) -> Result<()> {
        Ok(self.commit_owned(commit.clone()).await?)
    }

    async fn commit_owned(&self, mut commit: Commit) -> std::result::Result<(), CommitRejected> {
        if let Err(error) = validate_commit(&commit) {
            return Err(CommitRejected {
                error,
                commit: Box::new(commit),
            });
        }
        let puts = std::mem::take(&mut commit.puts);
        // A refused commit comes back whole, as the trait asks.
        self.inner
            .commit_owned(commit)
            .await
            .map_err(|mut refused| {
                refused.commit.puts = puts;
                refused
            })
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        commit_each(self, commits).await
    }
}
