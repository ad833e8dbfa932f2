//! Stores that break the contract on purpose, so the suite can show it catches them
//! (a suite that cannot fail proves nothing). [`BrokenStore`] wraps a correct store and
//! breaks one rule, chosen by [`Breakage`]; this crate's `tests/it/broken.rs` runs the suite
//! against each and requires the cases about that rule to fail.
//!
//! Never use these outside tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use afk_core::{
    Result, RunId, ThreadId,
    store::{Capabilities, Commit, Epoch, ListPage, Store},
};
use async_trait::async_trait;

/// Which rule a [`BrokenStore`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    /// Moves the latest pointer without writing the records: applies `commit.latest` and
    /// drops `commit.puts`. A reader finds a pointer to a record that is not there.
    PointerWithoutRecord,
    /// Ignores fencing: every commit is made under the run's newest epoch, whatever epoch it
    /// carries, so a stale claimant keeps writing.
    NoFencing,
    /// Loses writes: every `n`-th commit (the `n`-th, the `2n`-th, …) is acknowledged with `Ok`
    /// without being written. `n` is at least 1 (1 loses every commit).
    LosesWrites(u64),
    /// Commits in two writes, pointer first: the latest pointer alone, then, [`TORN_GAP`]
    /// later, the records. Each write is atomic and fenced on its own. A reader in between
    /// (or a crash in between) finds the pointer naming a record that is not there.
    PointerFirst,
    /// Commits in two writes: the first half of the puts (rounded up), then, [`TORN_GAP`]
    /// later, the rest with the pointer. A reader in between (or a crash in between) sees
    /// records of a commit whose pointer has not moved, and part of a commit.
    SplitCommit,
    /// Answers `get_many` in the byte order of the keys, not in the order asked.
    GetManySorted,
    /// Pagination that drops a key: a page asked for with a cursor leaves out the first key
    /// after the cursor.
    PageDropsKey,
    /// Reads of a latest pointer (`get` of `checkpoint:<run>:latest`) come from a cache filled
    /// at the key's first read and never refreshed, as in a store that keeps a run's pointer
    /// in process memory: a runner that looked once does not see what others committed since.
    StaleLatest,
}

/// The time between the two writes of [`Breakage::PointerFirst`] and
/// [`Breakage::SplitCommit`]: the second transaction's round trip (or fsync) of a store that
/// commits in two transactions. A store doing so in one process without any wait in between
/// leaves a far smaller window, which only the crash level's kills reliably land in.
pub const TORN_GAP: std::time::Duration = std::time::Duration::from_millis(1);

/// A correct store with one rule broken; everything but `commit` and the call a breakage
/// names (`get_many`, `list`, `get` of a pointer; the bookkeeping of `claim` and `delete_run`
/// for [`Breakage::NoFencing`]) is forwarded unchanged, so wrapping a durable store gives a
/// durable broken store (the crash level reopens it).
#[derive(Debug)]
pub struct BrokenStore<S> {
    inner: S,
    breakage: Breakage,
    newest: Mutex<HashMap<(ThreadId, RunId), Epoch>>,
    commits: AtomicU64,
    latest_seen: Mutex<SeenPointers>,
}

/// What [`Breakage::StaleLatest`] answers for a pointer it read once: `(thread, key) -> value`.
type SeenPointers = HashMap<(ThreadId, String), Option<Vec<u8>>>;

impl<S> BrokenStore<S> {
    /// Wrap a correct store.
    pub fn new(inner: S, breakage: Breakage) -> Self {
        BrokenStore {
            inner,
            breakage,
            newest: Mutex::default(),
            commits: AtomicU64::new(0),
            latest_seen: Mutex::default(),
        }
    }

    fn newest(&self) -> MutexGuard<'_, HashMap<(ThreadId, RunId), Epoch>> {
        self.newest.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: Store> Store for BrokenStore<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        if self.breakage != Breakage::StaleLatest
            || !(key.starts_with("checkpoint:") && key.ends_with(":latest"))
        {
            return self.inner.get(thread, key).await;
        }
        let id = (thread.clone(), key.to_owned());
        let cached = self
            .latest_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(value) = cached {
            return Ok(value);
        }
        let value = self.inner.get(thread, key).await?;
        self.latest_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, value.clone());
        Ok(value)
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        if self.breakage != Breakage::GetManySorted {
            return self.inner.get_many(thread, keys).await;
        }
        let mut sorted = keys.to_vec();
        sorted.sort();
        self.inner.get_many(thread, &sorted).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let mut page = self.inner.list(thread, prefix, cursor, limit).await?;
        if self.breakage == Breakage::PageDropsKey && cursor.is_some() && !page.keys.is_empty() {
            page.keys.remove(0);
        }
        Ok(page)
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        self.inner.delete(thread, keys).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        self.newest().remove(&(thread.clone(), run.clone()));
        self.inner.delete_run(thread, run).await
    }

    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::ThreadPage> {
        self.inner.list_threads(cursor, limit).await
    }

    async fn list_attention(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::AttentionPage> {
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
    ) -> Result<afk_core::store::FinishedPage> {
        self.inner.list_finished(before_ms, cursor, limit).await
    }

    async fn forget_finished(&self, entries: &[afk_core::store::FinishedRun]) -> Result<()> {
        self.inner.forget_finished(entries).await
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        self.inner.finish_run(thread, run, epoch).await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        self.inner.claim_if(thread, run, seen).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let epoch = self.inner.claim(thread, run).await?;
        let mut newest = self.newest();
        let slot = newest.entry((thread.clone(), run.clone())).or_default();
        *slot = (*slot).max(epoch);
        Ok(epoch)
    }

    /// Through this store's own `get` and `claim` (the claim's bookkeeping).
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        afk_core::store::claim_if_new_each(self, thread, run).await
    }

    /// Through this store's own (broken) `commit`.
    async fn commit_owned(
        &self,
        commit: Commit,
    ) -> std::result::Result<(), afk_core::store::CommitRejected> {
        afk_core::store::commit_by_ref(self, commit).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        match self.breakage {
            Breakage::PointerWithoutRecord => {
                self.inner
                    .commit(&Commit {
                        puts: Vec::new(),
                        ..commit.clone()
                    })
                    .await
            }
            Breakage::NoFencing => {
                let key = (commit.thread.clone(), commit.run.clone());
                let newest = self.newest().get(&key).copied();
                match newest {
                    Some(epoch) => {
                        self.inner
                            .commit(&Commit {
                                epoch,
                                ..commit.clone()
                            })
                            .await
                    }
                    None => self.inner.commit(commit).await,
                }
            }
            Breakage::PointerFirst | Breakage::SplitCommit
                if commit.latest.is_some() && !commit.puts.is_empty() =>
            {
                // Break only atomicity: an invalid commit is still rejected whole.
                afk_core::store::validate_commit(commit)?;
                let (first, second) = if self.breakage == Breakage::PointerFirst {
                    let pointer = Commit {
                        puts: Vec::new(),
                        ..commit.clone()
                    };
                    let records = Commit {
                        latest: None,
                        ..commit.clone()
                    };
                    (pointer, records)
                } else {
                    let half = commit.puts.len().div_ceil(2);
                    let head = Commit {
                        puts: commit.puts[..half].to_vec(),
                        latest: None,
                        ..commit.clone()
                    };
                    let tail = Commit {
                        puts: commit.puts[half..].to_vec(),
                        ..commit.clone()
                    };
                    (head, tail)
                };
                self.inner.commit(&first).await?;
                tokio::time::sleep(TORN_GAP).await;
                self.inner.commit(&second).await
            }
            Breakage::PointerFirst
            | Breakage::SplitCommit
            | Breakage::GetManySorted
            | Breakage::PageDropsKey
            | Breakage::StaleLatest => self.inner.commit(commit).await,
            Breakage::LosesWrites(n) => {
                let count = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
                if count.is_multiple_of(n.max(1)) {
                    return Ok(());
                }
                self.inner.commit(commit).await
            }
        }
    }

    /// Each commit through the breakage of [`BrokenStore::commit`].
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        afk_core::store::commit_each(self, commits).await
    }
}
