//! A memory store with the limits a real backend reports: most keys per commit (the pointer
//! counts) and the largest value, refusing what exceeds them with `InvalidInput`, as Redis
//! (32 MiB values) and S3 (64 MiB) do.

use std::sync::atomic::{AtomicU64, Ordering};

use afk_core::store::{Capabilities, Commit, Epoch, ListPage, Store, ThreadPage};
use afk_core::{Error, MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;

#[derive(Debug, Default)]
pub struct LimitedStore {
    pub inner: MemoryStore,
    max_keys: Option<usize>,
    max_value: Option<usize>,
    commits: AtomicU64,
}

impl LimitedStore {
    /// Commits of at most `max` keys.
    pub fn keys(max: usize) -> Self {
        LimitedStore {
            max_keys: Some(max),
            ..Self::default()
        }
    }

    /// Values of at most `max` bytes.
    pub fn values(max: usize) -> Self {
        LimitedStore {
            max_value: Some(max),
            ..Self::default()
        }
    }

    /// Commits applied so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for LimitedStore {
    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.max_commit_keys = self.max_keys;
        c.max_value_size = self.max_value;
        c
    }
    async fn get(&self, t: &ThreadId, k: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(t, k).await
    }
    async fn get_many(&self, t: &ThreadId, k: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.get_many(t, k).await
    }
    async fn list(&self, t: &ThreadId, p: &str, c: Option<&str>, l: usize) -> Result<ListPage> {
        self.inner.list(t, p, c, l).await
    }
    async fn list_threads(&self, c: Option<&str>, l: usize) -> Result<ThreadPage> {
        self.inner.list_threads(c, l).await
    }
    /// Each commit through the limits of [`LimitedStore::commit`].
    async fn commit_batch(&self, c: &[Commit]) -> Vec<Result<()>> {
        afk_core::store::commit_each(self, c).await
    }
    async fn delete(&self, t: &ThreadId, k: &[String]) -> Result<()> {
        self.inner.delete(t, k).await
    }
    async fn delete_run(&self, t: &ThreadId, r: &RunId) -> Result<u64> {
        self.inner.delete_run(t, r).await
    }
    async fn claim(&self, t: &ThreadId, r: &RunId) -> Result<Epoch> {
        self.inner.claim(t, r).await
    }
    async fn claim_if_new(&self, t: &ThreadId, r: &RunId) -> Result<Option<Epoch>> {
        self.inner.claim_if_new(t, r).await
    }
    /// Through this store's own limits.
    async fn commit_owned(
        &self,
        commit: Commit,
    ) -> std::result::Result<(), afk_core::store::CommitRejected> {
        afk_core::store::commit_by_ref(self, commit).await
    }
    async fn commit(&self, c: &Commit) -> Result<()> {
        let keys = c.puts.len() + usize::from(c.latest.is_some());
        if self.max_keys.is_some_and(|m| keys > m) {
            return Err(Error::invalid_input("commit too large"));
        }
        if let Some(max) = self.max_value {
            let latest = c.latest.iter().map(|v| ("latest", v));
            for (k, v) in c.puts.iter().map(|(k, v)| (k.as_str(), v)).chain(latest) {
                if v.len() > max {
                    return Err(Error::invalid_input(format!(
                        "the value of {k} is {} bytes, over {max}",
                        v.len()
                    )));
                }
            }
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.commit(c).await
    }
}
