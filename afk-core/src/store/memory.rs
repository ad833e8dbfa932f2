//! [`MemoryStore`]: the reference implementation of [`Store`], kept in process memory.
//!
//! It is the executable definition of the store contract: the conformance suite
//! (`afk-conformance`) replays random operation sequences against a backend and against a fresh
//! `MemoryStore` and requires the same answers. Every rule of the contract is therefore spelled
//! out here in plain code, in one lock, without cleverness.
//!
//! Layout: one `BTreeMap<String, Vec<u8>>` per thread (sorted, so prefix listing is a range
//! scan); the fence of a run is the key `run:<run>` holding `{"epoch": n}`, visible to
//! [`Store::get`] and [`Store::list`] like any other key. Values are copied in and out; no
//! caller ever shares a buffer with the store. The index of runs that need attention is one
//! `BTreeMap` by `(thread, run)` beside the threads, and the index of finished runs one sorted
//! set of entries, both under the same lock as the commits that move runs in and out of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::{
    Attention, AttentionPage, AttentionRun, Capabilities, Commit, CommitRejected, Epoch,
    FinishedPage, FinishedRun, ListPage, Store, attention_list_limit, finished_cursor,
    finished_list_limit, latest_key, parse_attention_cursor, parse_finished_cursor, run_key,
    store_now_ms, validate_commit, validate_list,
};
use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId, validate_key};

/// The families of keys that belong to a run, as `<family>:<run>:…`.
const RUN_FAMILIES: [&str; 4] = ["checkpoint", "effect", "messages", "bgtool"];

type Keys = BTreeMap<String, Vec<u8>>;

/// Everything the store holds, under its one lock: the keys of each thread, the index of runs
/// that need attention and the index of finished runs. Dereferences to the threads, which
/// nearly every method works on.
#[derive(Debug, Default)]
struct Inner {
    threads: HashMap<ThreadId, Keys>,
    attention: BTreeMap<(ThreadId, RunId), Vec<u8>>,
    finished: BTreeSet<FinishedRun>,
}

impl std::ops::Deref for Inner {
    type Target = HashMap<ThreadId, Keys>;
    fn deref(&self) -> &Self::Target {
        &self.threads
    }
}

impl std::ops::DerefMut for Inner {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.threads
    }
}

/// An in-memory [`Store`]: thread-safe, not durable, one process.
///
/// Cheap to create; share it as `Arc<MemoryStore>` (or `Arc<dyn Store>`). Its state is lost
/// when it is dropped. [`MemoryStore::snapshot`] and [`MemoryStore::dump`] expose the raw
/// contents for tests.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// Every key and value of `thread` (including the fence keys `run:<run>`), in key order.
    /// Empty when the thread has no keys.
    pub fn snapshot(&self, thread: &ThreadId) -> BTreeMap<String, Vec<u8>> {
        self.lock().get(thread).cloned().unwrap_or_default()
    }

    /// Every key and value of every thread that has at least one key.
    pub fn dump(&self) -> BTreeMap<ThreadId, BTreeMap<String, Vec<u8>>> {
        self.lock()
            .iter()
            .map(|(t, keys)| (t.clone(), keys.clone()))
            .collect()
    }

    /// Total number of keys over all threads.
    pub fn len(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }

    /// Whether the store holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No code path panics while holding the lock, and every mutation is applied after all
        // checks, so a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The epoch stored in a fence value. `Corrupt` when the bytes are not `{"epoch": n}`.
fn decode_epoch(key: &str, bytes: &[u8]) -> Result<Epoch> {
    #[derive(serde::Deserialize)]
    struct Fence {
        epoch: u64,
    }
    serde_json::from_slice::<Fence>(bytes)
        .map(|f| Epoch(f.epoch))
        .map_err(|e| Error::corrupt_record(key, "fence value is not {\"epoch\": n}").with_source(e))
}

fn encode_epoch(epoch: Epoch) -> Vec<u8> {
    serde_json::json!({ "epoch": epoch.0 })
        .to_string()
        .into_bytes()
}

fn current_epoch(keys: Option<&Keys>, run: &RunId) -> Result<Epoch> {
    let key = run_key(run);
    match keys.and_then(|k| k.get(&key)) {
        Some(bytes) => decode_epoch(&key, bytes),
        None => Ok(Epoch(0)),
    }
}

/// Whether `key` belongs to `run` (see [`super::run_of_key`]).
fn belongs_to(key: &str, run: &str) -> bool {
    super::run_of_key(key) == Some(run)
}

/// [`Store::claim`] on the locked map.
fn claim_locked(
    threads: &mut HashMap<ThreadId, Keys>,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Epoch> {
    let current = current_epoch(threads.get(thread), run)?;
    let next = Epoch(current.0.checked_add(1).ok_or_else(|| {
        Error::corrupt_record(run_key(run), "fence epoch is at u64::MAX and cannot grow")
    })?);
    threads
        .entry(thread.clone())
        .or_default()
        .insert(run_key(run), encode_epoch(next));
    Ok(next)
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::new("memory");
        c.list_threads = true;
        c.attention = true;
        c.claim_if = true;
        c.finished = true;
        c
    }

    /// Entries in their own order; the cursor names the last entry of the previous page.
    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<FinishedPage> {
        let limit = finished_list_limit(limit);
        let after = cursor.map(parse_finished_cursor).transpose()?;
        let inner = self.lock();
        let start = match &after {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        let mut rest = inner
            .finished
            .range((start, Bound::Unbounded))
            .take_while(|e| e.finished_ms < before_ms);
        let runs: Vec<FinishedRun> = rest.by_ref().take(limit).cloned().collect();
        let next_cursor = match (rest.next(), runs.last()) {
            (Some(_), Some(last)) => Some(finished_cursor(last)),
            _ => None,
        };
        Ok(FinishedPage { runs, next_cursor })
    }

    async fn forget_finished(&self, entries: &[FinishedRun]) -> Result<()> {
        let mut inner = self.lock();
        for e in entries {
            inner.finished.remove(e);
        }
        Ok(())
    }

    /// The look at the epoch and the claim under one lock: atomic.
    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        let mut threads = self.lock();
        if current_epoch(threads.get(thread), run)? != seen {
            return Ok(None);
        }
        claim_locked(&mut threads, thread, run).map(Some)
    }

    /// Runs in `(thread, run)` order; the cursor names the last run of the previous page.
    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        let limit = attention_list_limit(limit);
        let after = cursor.map(parse_attention_cursor).transpose()?;
        let inner = self.lock();
        let start = match &after {
            Some(pair) => Bound::Excluded(pair),
            None => Bound::Unbounded,
        };
        let mut rest = inner.attention.range((start, Bound::Unbounded));
        let runs: Vec<AttentionRun> = rest
            .by_ref()
            .take(limit)
            .map(|((thread, run), entry)| AttentionRun {
                thread: thread.clone(),
                run: run.clone(),
                entry: entry.clone(),
            })
            .collect();
        let next_cursor = match (rest.next(), runs.last()) {
            (Some(_), Some(last)) => Some(super::attention_cursor(&last.thread, &last.run)),
            _ => None,
        };
        Ok(AttentionPage { runs, next_cursor })
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        let key = (thread.clone(), run.clone());
        Ok(self.lock().attention.get(&key).cloned())
    }

    /// Threads holding a key, sorted by id; the cursor is the last id of the previous page.
    async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<super::ThreadPage> {
        let limit = super::thread_list_limit(limit);
        if let Some(c) = cursor {
            ThreadId::new(c)
                .map_err(|e| Error::invalid_input(format!("bad thread cursor: {e}")))?;
        }
        let mut ids: Vec<ThreadId> = self
            .lock()
            .iter()
            .filter(|(t, keys)| !keys.is_empty() && cursor.is_none_or(|c| t.as_str() > c))
            .map(|(t, _)| t.clone())
            .collect();
        ids.sort();
        let more = ids.len() > limit;
        ids.truncate(limit);
        let next_cursor = more
            .then(|| ids.last().map(|t| t.as_str().to_owned()))
            .flatten();
        Ok(super::ThreadPage {
            threads: ids,
            next_cursor,
        })
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        Ok(self
            .lock()
            .get(thread)
            .and_then(|keys| keys.get(key))
            .cloned())
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        for key in keys {
            validate_key(key)?;
        }
        let threads = self.lock();
        let map = threads.get(thread);
        Ok(keys
            .iter()
            .map(|k| map.and_then(|m| m.get(k)).cloned())
            .collect())
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = validate_list(prefix, cursor, limit)?;
        let threads = self.lock();
        let Some(keys) = threads.get(thread) else {
            return Ok(ListPage::default());
        };
        // Start strictly after the cursor, but never before the prefix.
        let start = match cursor {
            Some(c) if c >= prefix => Bound::Excluded(c),
            _ => Bound::Included(prefix),
        };
        let mut matching = keys
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix));
        let page: Vec<String> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        let next_cursor = if more { page.last().cloned() } else { None };
        Ok(ListPage {
            keys: page,
            next_cursor,
        })
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        for key in keys {
            validate_key(key)?;
        }
        let mut threads = self.lock();
        if let Some(map) = threads.get_mut(thread) {
            for key in keys {
                map.remove(key);
            }
            if map.is_empty() {
                threads.remove(thread);
            }
        }
        Ok(())
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let mut threads = self.lock();
        let Some(map) = threads.get_mut(thread) else {
            return Ok(0);
        };
        let mut doomed: Vec<String> = Vec::new();
        for family in RUN_FAMILIES {
            let prefix = format!("{family}:{run}:");
            doomed.extend(
                map.range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                    .map(|(k, _)| k)
                    .take_while(|k| k.starts_with(&prefix))
                    .filter(|k| belongs_to(k, run.as_str()))
                    .cloned(),
            );
        }
        let fence = run_key(run);
        if map.contains_key(&fence) {
            doomed.push(fence);
        }
        for key in &doomed {
            map.remove(key);
        }
        if map.is_empty() {
            threads.remove(thread);
        }
        threads.attention.remove(&(thread.clone(), run.clone()));
        Ok(doomed.len() as u64)
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        claim_locked(&mut self.lock(), thread, run)
    }

    /// The look and the claim under one lock: atomic.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        let mut threads = self.lock();
        let latest = super::latest_key(run);
        if threads
            .get(thread)
            .is_some_and(|keys| keys.contains_key(&latest))
        {
            return Ok(None);
        }
        claim_locked(&mut threads, thread, run).map(Some)
    }

    /// One apply path: a copy of the commit, handed over as [`Store::commit_owned`] takes it.
    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.commit_owned(commit.clone()).await.map_err(Error::from)
    }

    /// [`Store::commit`] that moves the commit's keys and values into the map (the runner's
    /// writer hands its commits over this way: no copy of a step's records).
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        let mut threads = self.lock();
        if let Err(error) = admit(&threads, &commit) {
            return Err(CommitRejected {
                error,
                commit: Box::new(commit),
            });
        }
        let Commit {
            thread,
            run,
            puts,
            latest,
            attention,
            ..
        } = commit;
        match attention {
            Some(Attention::Open(entry)) => {
                threads
                    .attention
                    .insert((thread.clone(), run.clone()), entry);
            }
            Some(Attention::Closed) => {
                threads.attention.remove(&(thread.clone(), run.clone()));
                threads.finished.insert(FinishedRun {
                    finished_ms: store_now_ms(),
                    thread: thread.clone(),
                    run: run.clone(),
                });
            }
            None => {}
        }
        let map = threads.entry(thread).or_default();
        // Kept for good: without the room a writer reserved for them (a shrink in place).
        map.extend(puts.into_iter().map(|(mut key, mut value)| {
            key.shrink_to_fit();
            value.shrink_to_fit();
            (key, value)
        }));
        if let Some(mut latest) = latest {
            latest.shrink_to_fit();
            map.insert(latest_key(&run), latest);
        }
        Ok(())
    }
}

/// Whether `commit` may be applied: valid, and under the run's current epoch.
fn admit(threads: &HashMap<ThreadId, Keys>, commit: &Commit) -> Result<()> {
    validate_commit(commit)?;
    let current = current_epoch(threads.get(&commit.thread), &commit.run)?;
    if current == Epoch(0) {
        return Err(Error::fenced(format!(
            "run {} of thread {} was never claimed; claim it before committing",
            commit.run, commit.thread
        )));
    }
    if commit.epoch != current {
        return Err(Error::fenced(format!(
            "run {} of thread {} is claimed at epoch {current}; this commit carries epoch {}",
            commit.run, commit.thread, commit.epoch
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
