//! [`RocksDbStore`]: the [`Store`] contract on an embedded RocksDB database.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use afk_core::{
    Error, Result, RunId, ThreadId,
    store::{AttentionPage, Capabilities, Commit, CommitRejected, Epoch, ListPage, Store},
};
use async_trait::async_trait;
use rocksdb::{BlockBasedOptions, DB, Options};

use crate::config::{Compression, RocksDbConfig};
use crate::error::{Op, join, map};
use crate::group::Group;
use crate::ops::Inner;

/// An AFK store in a local RocksDB database.
///
/// Cheap to clone (an `Arc` inside); clones share the database and its locks. One process may
/// open a given database directory once: share the store (clone it, or hold it in an `Arc<dyn
/// Store>`) instead of opening the path again. Commits go to a thread of the store's own, which
/// writes the commits waiting together in one batch and one sync (group commit); every other
/// RocksDB call runs on tokio's blocking pool (`spawn_blocking`), so the async methods need a
/// tokio runtime. Dropping the last handle waits for the commits already sent.
#[derive(Clone)]
pub struct RocksDbStore {
    pub(crate) inner: Arc<Inner>,
    group: Arc<Group>,
    config: Arc<RocksDbConfig>,
}

impl fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("config", &self.config)
            .finish()
    }
}

impl RocksDbStore {
    /// Open (creating it if missing, unless [`RocksDbConfig::create_if_missing`] is false) the
    /// database `config` names
    /// (`RocksDbStore::open(RocksDbConfig::new(path))` for the defaults: sync writes, snappy
    /// compression, default block cache). Blocks while RocksDB opens.
    ///
    /// Errors: `InvalidConfig` when `create_if_missing` is false and the path holds no
    /// database (nothing is created); `Unavailable` naming the `LOCK` file when the database is
    /// already open (in this process or another); `Unavailable` for I/O errors; `Corrupt` for a
    /// damaged database; `Unsupported` or `InvalidConfig` when the linked RocksDB library cannot
    /// honor an option (for example a compression it was built without).
    pub fn open(config: RocksDbConfig) -> Result<Self> {
        if !config.create_if_missing && !config.path.join("CURRENT").is_file() {
            return Err(afk_core::Error::invalid_config(format!(
                "no RocksDB database at {}: check the path (this store was opened without \
                 create_if_missing, so nothing was created)",
                config.path.display()
            )));
        }
        let mut opts = Options::default();
        opts.create_if_missing(config.create_if_missing);
        opts.set_compression_type(config.compression.to_rocksdb());
        if let Some(size) = config.block_cache_size {
            let size = usize::try_from(size).map_err(|_| {
                afk_core::Error::invalid_config(format!(
                    "rocksdb parameter `block_cache_size` = {size} does not fit this machine"
                ))
            })?;
            let cache =
                crate::compat::lru_cache(size).map_err(|e| map(e, Op::Open, &config.path))?;
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            opts.set_block_based_table_factory(&table);
        }
        let db = DB::open(&opts, &config.path).map_err(|e| open_error(e, &config))?;
        let inner = Arc::new(Inner::new(db, config.path.clone(), config.sync));
        let group = Arc::new(Group::start(inner.clone())?);
        Ok(RocksDbStore {
            inner,
            group,
            config: Arc::new(config),
        })
    }

    /// Open with a `rocksdb://` URL; see [`RocksDbConfig::from_url`] for the syntax.
    ///
    /// Errors: `InvalidConfig` for a bad URL, plus those of [`RocksDbStore::open`].
    pub fn from_url(url: &str) -> Result<Self> {
        Self::open(RocksDbConfig::from_url(url)?)
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &RocksDbConfig {
        &self.config
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.config.path
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(join)?
    }
}

/// A failed open, naming the missing compression library when that is the cause: a RocksDB
/// built from source has only the compressions its cargo features enable.
fn open_error(err: rocksdb::Error, config: &RocksDbConfig) -> afk_core::Error {
    let c = config.compression;
    // RocksDB: "Compression type LZ4 is not linked with the binary." (or, with a compression
    // manager, "… is not recognized/supported …").
    if c != Compression::None && err.to_string().contains("Compression type") {
        return afk_core::Error::invalid_config(format!(
            "rocksdb parameter `compression` = {c}: the linked RocksDB library was built without \
             it; depend on the `rocksdb` crate with its `{c}` feature (cargo unifies it with this \
             store's) or choose another compression",
            c = c.as_str()
        ))
        .with_source(err);
    }
    map(err, Op::Open, &config.path)
}

#[async_trait]
impl Store for RocksDbStore {
    /// `rocksdb`: durable when opened with sync writes, one process only, batched commits, the
    /// index of runs that need attention and that of finished runs.
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::new("rocksdb");
        c.durable = self.config.sync;
        c.multi_process = false;
        c.batch_commit = true;
        c.list_threads = true;
        c.attention = true;
        c.claim_if = true;
        c.finished = true;
        c
    }

    /// One iterator over the index of finished runs, from the cursor to the cutoff (see
    /// `finished.rs`).
    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::FinishedPage> {
        let cursor = cursor.map(str::to_owned);
        self.blocking(move |db| crate::finished::list(db, before_ms, cursor.as_deref(), limit))
            .await
    }

    /// One write batch of deletes.
    async fn forget_finished(&self, entries: &[afk_core::store::FinishedRun]) -> Result<()> {
        let entries = entries.to_vec();
        self.blocking(move |db| crate::finished::forget(db, &entries))
            .await
    }

    /// One bounded iterator over the index, from the cursor on, in `(thread, run)` order (see
    /// `attention.rs`); the cursor names the last run of the previous page.
    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        let cursor = cursor.map(str::to_owned);
        self.blocking(move |db| crate::attention::list(db, cursor.as_deref(), limit))
            .await
    }

    /// One point read of the run's key in the index.
    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        let (thread, run) = (thread.clone(), run.clone());
        self.blocking(move |db| crate::attention::get(db, &thread, &run))
            .await
    }

    /// One seek per thread (see `threads.rs`); sorted by id, the cursor is the last id.
    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::ThreadPage> {
        let cursor = cursor.map(str::to_owned);
        self.blocking(move |db| crate::threads::list_threads(db, cursor.as_deref(), limit))
            .await
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        let (thread, key) = (thread.clone(), key.to_owned());
        self.blocking(move |db| db.get(&thread, &key)).await
    }

    /// One `multi_get` for all keys.
    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        let (thread, keys) = (thread.clone(), keys.to_vec());
        self.blocking(move |db| db.get_many(&thread, &keys)).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let (thread, prefix, cursor) =
            (thread.clone(), prefix.to_owned(), cursor.map(str::to_owned));
        self.blocking(move |db| db.list(&thread, &prefix, cursor.as_deref(), limit))
            .await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        let (thread, keys) = (thread.clone(), keys.to_vec());
        self.blocking(move |db| db.delete(&thread, &keys)).await
    }

    /// Range deletes per key family (`checkpoint:<run>:`, `effect:<run>:`, `messages:<run>:`,
    /// `bgtool:<run>:`) plus the fence `run:<run>` and the run's entry in the index of runs
    /// that need attention, in one write batch.
    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let (thread, run) = (thread.clone(), run.clone());
        self.blocking(move |db| db.delete_run(&thread, &run)).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let (thread, run) = (thread.clone(), run.clone());
        self.blocking(move |db| db.claim(&thread, &run)).await
    }

    /// The look at the epoch and the claim in one blocking call, under the run's lock.
    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        let (thread, run) = (thread.clone(), run.clone());
        self.blocking(move |db| db.claim_if(&thread, &run, seen))
            .await
    }

    /// The look at the pointer and the claim in one blocking call, under the run's lock.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        let (thread, run) = (thread.clone(), run.clone());
        self.blocking(move |db| db.claim_if_new(&thread, &run))
            .await
    }

    /// One `WriteBatch` (puts, latest pointer and the run's entry in the index of runs that
    /// need attention), written after the fence check under the run's lock, together with the
    /// commits of other callers waiting at the same moment (group commit).
    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.commit_owned(commit.clone()).await.map_err(Error::from)
    }

    /// [`Store::commit`] without the copy: the commit is moved to the commit thread.
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        let ids = (commit.thread.clone(), commit.run.clone(), commit.epoch);
        let (mut results, mut back) = self.group.commit(vec![commit]).await;
        let error = match results.pop() {
            Some(Ok(())) => return Ok(()),
            Some(Err(error)) => error,
            None => afk_core::Error::unexpected("commit produced no result"),
        };
        match back.pop() {
            Some(commit) => Err(CommitRejected {
                error,
                commit: Box::new(commit),
            }),
            // The commit thread died holding it: nothing was written, and there is nothing to
            // retry with, so the error is final (an empty commit of the same run stands in).
            None => Err(CommitRejected {
                error: error.with_retryable(false),
                commit: Box::new(Commit {
                    thread: ids.0,
                    run: ids.1,
                    epoch: ids.2,
                    puts: Vec::new(),
                    latest: None,
                    attention: None,
                }),
            }),
        }
    }

    /// One `WriteBatch` for every commit that passes its checks, with those of other callers
    /// waiting at the same moment; each answer is individual.
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        self.group.commit(commits.to_vec()).await.0
    }
}
