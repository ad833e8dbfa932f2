//! [`SealedStore`]: any store, with every value sealed at rest.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use afk_core::hash::{EffectHashes, HashKey};
use afk_core::runner::{Clock, SystemClock};
use afk_core::store::{
    AttentionPage, Capabilities, Commit, CommitRejected, Epoch, FinishedPage, FinishedRun,
    ListPage, Store, ThreadPage, latest_key,
};
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use async_trait::async_trait;
use lru::LruCache;
use serde::{Deserialize, Serialize};

use crate::format::{Key, OVERHEAD, looks_sealed, open, parse, seal};
use crate::hashes::{open_hash_key, seal_hash_key};
use crate::keyring::Keyring;
use crate::keys::KeySource;

/// How a [`SealedStore`] treats plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Seal every write; refuse to read a plaintext value (`Corrupt` naming its key).
    #[default]
    Sealed,
    /// Seal every write; read plaintext values as they are: for a store being moved to
    /// encryption (older values stay plaintext until rewritten).
    Migrate,
    /// Write plaintext; read sealed and plaintext values: for rolling encryption back.
    DecryptOnly,
}

/// One thread's data keys, as its keyring record stores them: each wrapped by a
/// key-encryption key, the active one sealing new values.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) version: u32,
    pub(crate) thread: String,
    pub(crate) active: String,
    /// Data key id → the wrapped key, hex.
    pub(crate) keys: std::collections::BTreeMap<String, String>,
    /// The thread's key for its effect hashes, sealed with one of its data keys (hex);
    /// absent from records written before effect hashes were keyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hash: Option<String>,
}

/// One thread's data keys, unwrapped.
#[derive(Debug)]
pub(crate) struct ThreadKeys {
    pub(crate) active: String,
    pub(crate) keys: HashMap<String, Key>,
    /// The key of the thread's effect hashes, if its record holds one.
    pub(crate) hash: Option<HashKey>,
    /// The keyring record these keys were unwrapped from, as stored.
    record: Vec<u8>,
    /// When they were unwrapped (ms since the Unix epoch, by the store's clock).
    loaded_ms: u64,
}

/// A [`Store`] that seals every value it writes (records, latest pointers, effect rows,
/// transcript entries) with the thread's data key, and opens them on reads; see the crate
/// docs. Keys, fences (`run:<run>`) and index entries stay as they are.
#[derive(Debug)]
pub struct SealedStore {
    pub(crate) inner: Arc<dyn Store>,
    pub(crate) source: Arc<dyn KeySource>,
    pub(crate) ring: Arc<dyn Keyring>,
    mode: Mode,
    /// Unwrapped data keys of the threads used lately, at most [`KEY_CACHE`] of them (the
    /// least recently used go first): a process that touches millions of threads neither keeps
    /// them all in memory nor keeps key material it no longer needs.
    cache: Mutex<LruCache<ThreadId, Arc<ThreadKeys>>>,
    /// How long unwrapped keys are used before the keyring record is read and unwrapped
    /// again.
    ttl: Duration,
    clock: Arc<dyn Clock>,
}

/// How many threads' unwrapped data keys a [`SealedStore`] keeps by default.
pub const KEY_CACHE: usize = 4096;

/// How long a [`SealedStore`] uses a thread's unwrapped data keys, by default, before it reads
/// the thread's keyring record and unwraps its keys again ([`SealedStore::with_key_ttl`]).
pub const KEY_TTL: Duration = Duration::from_secs(300);

fn cache_size(threads: usize) -> NonZeroUsize {
    NonZeroUsize::new(threads).unwrap_or(NonZeroUsize::MIN)
}

/// Whether `key` holds a value of the store's own (a fence), never sealed.
pub(crate) fn store_owned(key: &str) -> bool {
    key.starts_with("run:")
}

impl SealedStore {
    /// `inner` sealed with data keys from `ring`, wrapped by `source`, in [`Mode::Sealed`].
    pub fn new(inner: Arc<dyn Store>, source: Arc<dyn KeySource>, ring: Arc<dyn Keyring>) -> Self {
        SealedStore {
            inner,
            source,
            ring,
            mode: Mode::Sealed,
            cache: Mutex::new(LruCache::new(cache_size(KEY_CACHE))),
            ttl: KEY_TTL,
            clock: Arc::new(SystemClock),
        }
    }

    /// The same store using a thread's unwrapped data keys for at most `ttl` ([`KEY_TTL`] by
    /// default): then its keyring record is read and its keys unwrapped again (with KMS, a
    /// `Decrypt` call), so a key-encryption key revoked or disabled in the key source, or the
    /// thread erased by another process, stops this process's reads and writes of the thread
    /// within `ttl`. A zero `ttl` unwraps on every read and write.
    #[must_use]
    pub fn with_key_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same store reading the age of its unwrapped keys from `clock` (the system clock by
    /// default).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The same store keeping the unwrapped data keys of at most `threads` threads in memory
    /// (at least one; [`KEY_CACHE`] by default). A thread whose keys were dropped has its
    /// keyring record read and unwrapped again on its next read or write (with KMS, a
    /// `Decrypt` call).
    #[must_use]
    pub fn with_key_cache(self, threads: usize) -> Self {
        SealedStore {
            cache: Mutex::new(LruCache::new(cache_size(threads))),
            ..self
        }
    }

    /// The same store in `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The mode it is in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The store underneath (sealed values as stored).
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// The thread's unwrapped keys held in memory, unless they are older than the time to
    /// live (or the clock went back since they were unwrapped): those are dropped.
    fn cached(&self, thread: &ThreadId) -> Option<Arc<ThreadKeys>> {
        let now = self.clock.now_ms();
        let ttl = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let keys = cache.get(thread)?;
        if now < keys.loaded_ms || now - keys.loaded_ms >= ttl {
            cache.pop(thread);
            return None;
        }
        Some(Arc::clone(keys))
    }

    /// How many threads' keys are held in memory now.
    pub fn cached_threads(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Forget the thread's keys held in memory if its keyring record is no longer the one
    /// they were unwrapped from (a rotation or an erasure since), or cannot be read now: a
    /// run starts or resumes with the record as it is, and an unchanged record is not
    /// unwrapped again (with KMS, no `Decrypt` call per claim).
    async fn forget_if_changed(&self, thread: &ThreadId) {
        let Some(held) = self.cached(thread) else {
            return;
        };
        match self.ring.load(thread).await {
            Ok(Some(bytes)) if bytes == held.record => {}
            _ => self.forget(thread),
        }
    }

    /// Forget the thread's keys held in memory: the next read or write loads its keyring
    /// record again (after a rotation).
    pub(crate) fn forget(&self, thread: &ThreadId) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop(thread);
    }

    /// Destroy the thread's data keys (crypto-shredding): every value of the thread, in this
    /// store and in every copy of it, can no longer be opened; other threads are untouched.
    /// Returns whether the thread had keys. Other processes forget the keys they hold in
    /// memory only when they drop their `SealedStore` or claim a run of the thread.
    pub async fn erase(&self, thread: &ThreadId) -> Result<bool> {
        let had = self.ring.erase(thread).await?;
        self.forget(thread);
        Ok(had)
    }

    /// The thread's keyring record, parsed and checked to be this thread's.
    pub(crate) fn parse_record(thread: &ThreadId, bytes: &[u8]) -> Result<Record> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::Corrupt,
                format!("keyring record of thread {thread} {why}"),
            )
        };
        let record: Record =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("is not readable: {e}")))?;
        if record.thread != thread.as_str() {
            return Err(bad(format!("names thread {}", record.thread)));
        }
        Ok(record)
    }

    /// Unwrap the keys of the thread's record and keep them in memory.
    pub(crate) async fn unwrap_record(
        &self,
        thread: &ThreadId,
        bytes: &[u8],
    ) -> Result<Arc<ThreadKeys>> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::Corrupt,
                format!("keyring record of thread {thread} {why}"),
            )
        };
        let record = Self::parse_record(thread, bytes)?;
        let mut keys = HashMap::with_capacity(record.keys.len());
        for (id, wrapped) in &record.keys {
            let wrapped = hex::decode(wrapped).map_err(|_| bad(format!("key {id} is not hex")))?;
            keys.insert(id.clone(), self.source.unwrap(thread, id, &wrapped).await?);
        }
        if !keys.contains_key(&record.active) {
            return Err(bad(format!("names no key {} as active", record.active)));
        }
        let hash = match &record.hash {
            Some(sealed) => Some(open_hash_key(thread, sealed, &keys)?),
            None => None,
        };
        let tk = Arc::new(ThreadKeys {
            active: record.active,
            keys,
            hash,
            record: bytes.to_vec(),
            loaded_ms: self.clock.now_ms(),
        });
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(thread.clone(), Arc::clone(&tk));
        Ok(tk)
    }

    /// The thread's keys to read with; `NotFound` when it has none (erased, or another
    /// keyring's).
    pub(crate) async fn keys_to_read(
        &self,
        thread: &ThreadId,
        key: &str,
    ) -> Result<Arc<ThreadKeys>> {
        if let Some(k) = self.cached(thread) {
            return Ok(k);
        }
        match self.ring.load(thread).await? {
            Some(bytes) => self.unwrap_record(thread, &bytes).await,
            None => Err(Error::not_found(format!(
                "thread {thread} has no data key in the keyring (erased, or sealed with another \
                 keyring): {key} cannot be opened"
            ))
            .with_key(key.to_owned())),
        }
    }

    /// The thread's keys to write with, created on its first write (or its first claim's
    /// question for its effect hashes).
    pub(crate) async fn keys_to_write(&self, thread: &ThreadId) -> Result<Arc<ThreadKeys>> {
        if let Some(k) = self.cached(thread) {
            return Ok(k);
        }
        if let Some(bytes) = self.ring.load(thread).await? {
            return self.unwrap_record(thread, &bytes).await;
        }
        let id = "d1";
        let dek = Key::generate();
        let wrapped = self.source.wrap(thread, id, &dek).await?;
        let record = Record {
            version: 1,
            thread: thread.to_string(),
            active: id.to_owned(),
            keys: [(id.to_owned(), hex::encode(wrapped))].into(),
            hash: Some(seal_hash_key(thread, id, &dek, &crate::hashes::generate())?),
        };
        let bytes = serde_json::to_vec(&record)
            .map_err(|e| Error::unexpected(format!("keyring record: {e}")))?;
        let stored = self.ring.create(thread, &bytes).await?;
        self.unwrap_record(thread, &stored).await
    }

    /// Open (or, in a mode that allows it, pass) a stored value.
    async fn open_value(&self, thread: &ThreadId, key: &str, bytes: Vec<u8>) -> Result<Vec<u8>> {
        if store_owned(key) {
            return Ok(bytes);
        }
        if !looks_sealed(&bytes) {
            return match self.mode {
                Mode::Sealed => Err(Error::corrupt_record(
                    key,
                    "plaintext value in an encrypted store (open it in migration mode to read \
                     values written before encryption)",
                )),
                Mode::Migrate | Mode::DecryptOnly => Ok(bytes),
            };
        }
        let parsed = parse(&bytes, key)?;
        let mut keys = self.keys_to_read(thread, key).await?;
        if !keys.keys.contains_key(parsed.key_id) {
            // Sealed after a rotation this process has not seen yet: load the record again.
            self.forget(thread);
            keys = self.keys_to_read(thread, key).await?;
        }
        let dek = keys.keys.get(parsed.key_id).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{key} of thread {thread} was sealed with data key {}, which the thread's \
                     keyring record does not hold",
                    parsed.key_id
                ),
            )
            .with_key(key.to_owned())
        })?;
        open(thread, key, dek, &parsed)
    }

    /// Whether a commit is written as it is (decrypt-only, or nothing to seal).
    fn passes(&self, c: &Commit) -> bool {
        self.mode == Mode::DecryptOnly || (c.puts.is_empty() && c.latest.is_none())
    }

    /// The commit as stored: its values sealed (unless decrypt-only). Plaintext values are
    /// sealed straight into the new commit, not copied first.
    async fn seal_commit(&self, c: &Commit) -> Result<Commit> {
        if self.passes(c) {
            return Ok(c.clone());
        }
        let keys = self.keys_to_write(&c.thread).await?;
        let id = keys.active.as_str();
        let dek = &keys.keys[id];
        let mut puts = Vec::with_capacity(c.puts.len());
        for (k, v) in &c.puts {
            let v = if store_owned(k) {
                v.clone()
            } else {
                seal(&c.thread, k, id, dek, v)?
            };
            puts.push((k.clone(), v));
        }
        let latest = match &c.latest {
            Some(v) => Some(seal(&c.thread, &latest_key(&c.run), id, dek, v)?),
            None => None,
        };
        Ok(Commit {
            thread: c.thread.clone(),
            run: c.run.clone(),
            epoch: c.epoch,
            puts,
            latest,
            attention: c.attention.clone(),
        })
    }

    /// Seal the values of a commit in place, all or none: on an error the commit is as it
    /// was. Returns the keys they were sealed with (to open them again if the commit is
    /// refused).
    async fn seal_in_place(&self, c: &mut Commit) -> Result<Option<Arc<ThreadKeys>>> {
        if self.passes(c) {
            return Ok(None);
        }
        let keys = self.keys_to_write(&c.thread).await?;
        let id = keys.active.as_str();
        let dek = &keys.keys[id];
        let lk = latest_key(&c.run);
        let mut done = 0;
        let mut sealed = Ok(());
        for (k, v) in c.puts.iter_mut().filter(|(k, _)| !store_owned(k)) {
            match seal(&c.thread, k, id, dek, v) {
                Ok(s) => *v = s,
                Err(e) => {
                    sealed = Err(e);
                    break;
                }
            }
            done += 1;
        }
        if sealed.is_ok()
            && let Some(v) = &mut c.latest
        {
            match seal(&c.thread, &lk, id, dek, v) {
                Ok(s) => *v = s,
                Err(e) => sealed = Err(e),
            }
        }
        if let Err(e) = sealed {
            unseal(c, &keys, done, false)?;
            return Err(e);
        }
        Ok(Some(keys))
    }
}

/// Open again the first `count` sealed puts of `c` and, if `latest`, its latest pointer: the
/// commit as it was before [`SealedStore::seal_in_place`]. Cannot fail for values just sealed
/// with `keys`; `Unexpected` if it does.
fn unseal(c: &mut Commit, keys: &ThreadKeys, count: usize, latest: bool) -> Result<()> {
    let opened = |key: &str, v: &[u8]| {
        let parsed = parse(v, key)?;
        let dek = keys.keys.get(parsed.key_id).ok_or_else(|| {
            Error::unexpected(format!("{key}: sealed with a key no longer in memory"))
        })?;
        open(&c.thread, key, dek, &parsed)
    };
    let mut restored = Vec::new();
    for (k, v) in c.puts.iter().filter(|(k, _)| !store_owned(k)).take(count) {
        restored.push(opened(k, v)?);
    }
    let latest = match &c.latest {
        Some(v) if latest => Some(opened(&latest_key(&c.run), v)?),
        _ => None,
    };
    let puts = c.puts.iter_mut().filter(|(k, _)| !store_owned(k));
    for ((_, v), plain) in puts.zip(restored) {
        *v = plain;
    }
    if let Some(plain) = latest {
        c.latest = Some(plain);
    }
    Ok(())
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for SealedStore {
    /// The inner store's, with room for the seal taken off the value size limit.
    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.max_value_size = c.max_value_size.map(|m| m.saturating_sub(OVERHEAD));
        c
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        match self.inner.get(thread, key).await? {
            Some(v) => self.open_value(thread, key, v).await.map(Some),
            None => Ok(None),
        }
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        let got = self.inner.get_many(thread, keys).await?;
        let mut out = Vec::with_capacity(got.len());
        for (k, v) in keys.iter().zip(got) {
            out.push(match v {
                Some(v) => Some(self.open_value(thread, k, v).await?),
                None => None,
            });
        }
        Ok(out)
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

    /// Claiming also reads the thread's keyring record and forgets the keys held in memory
    /// if it changed, so that a run starts or resumes with the record as it is now (sealing
    /// with the data key a rotation made active, or finding the thread erased).
    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.forget_if_changed(thread).await;
        self.inner.claim(thread, run).await
    }

    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        self.forget_if_changed(thread).await;
        self.inner.claim_if_new(thread, run).await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        self.forget_if_changed(thread).await;
        self.inner.claim_if(thread, run, seen).await
    }

    /// Keyed with the thread's own hash key, kept in its keyring record (created with it):
    /// a stored hash confirms no guessed argument without the keyring and the key-encryption
    /// key, and none at all once the thread is erased. In [`Mode::DecryptOnly`], plain, with
    /// the keyed hashes written before still matching.
    async fn effect_hashes(&self, thread: &ThreadId) -> Result<EffectHashes> {
        self.thread_hashes(thread).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        afk_core::store::validate_commit(commit)?;
        let sealed = self.seal_commit(commit).await?;
        self.inner.commit(&sealed).await
    }

    /// Seals the values in place (no copy of the commit) and hands the inner store the
    /// result; a refused commit is opened again, so it comes back unchanged.
    async fn commit_owned(&self, mut commit: Commit) -> std::result::Result<(), CommitRejected> {
        let rejected = |error, commit| CommitRejected {
            error,
            commit: Box::new(commit),
        };
        if let Err(e) = afk_core::store::validate_commit(&commit) {
            return Err(rejected(e, commit));
        }
        let keys = match self.seal_in_place(&mut commit).await {
            Ok(keys) => keys,
            Err(e) => return Err(rejected(e, commit)),
        };
        let Err(mut refused) = self.inner.commit_owned(commit).await else {
            return Ok(());
        };
        if let Some(keys) = keys {
            let c = &mut refused.commit;
            let all = c.puts.iter().filter(|(k, _)| !store_owned(k)).count();
            if let Err(e) = unseal(c, &keys, all, true) {
                refused.error = e;
            }
        }
        Err(refused)
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        let mut sealed = Vec::with_capacity(commits.len());
        let mut early: Vec<Option<Error>> = Vec::with_capacity(commits.len());
        for c in commits {
            match afk_core::store::validate_commit(c) {
                Err(e) => {
                    early.push(Some(e));
                    continue;
                }
                Ok(()) => match self.seal_commit(c).await {
                    Ok(s) => {
                        sealed.push(s);
                        early.push(None);
                    }
                    Err(e) => early.push(Some(e)),
                },
            }
        }
        let mut results = self.inner.commit_batch(&sealed).await.into_iter();
        early
            .into_iter()
            .map(|e| match e {
                Some(e) => Err(e),
                None => results.next().unwrap_or_else(|| {
                    Err(Error::unexpected("a commit of the batch has no result"))
                }),
            })
            .collect()
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        self.inner.finish_run(thread, run, epoch).await
    }

    async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<ThreadPage> {
        self.inner.list_threads(cursor, limit).await
    }

    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        self.inner.list_attention(cursor, limit).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        self.inner.attention(thread, run).await
    }

    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<FinishedPage> {
        self.inner.list_finished(before_ms, cursor, limit).await
    }

    async fn forget_finished(&self, entries: &[FinishedRun]) -> Result<()> {
        self.inner.forget_finished(entries).await
    }
}
