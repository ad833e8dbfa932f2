//! A store written outside the workspace's backends: [`LogStore`], an append-only log file.
//!
//! It is the worked example of the README: a third-party `afk_core::store::Store` that passes the
//! whole conformance suite from a one-line `tests/it/conformance.rs` (a module of its one test
//! binary; a crate of its own can use a plain `tests/conformance.rs`).
//!
//! Design, in one paragraph: every change (a commit, a claim, a deletion) is one *entry*
//! appended to a single file and synced before the call returns; the whole state is also kept
//! in memory (one sorted map per thread) for reads. An entry is `[u32 length][u64 checksum]
//! [payload]`; on open the file is replayed entry by entry, and a torn last entry (a crash in
//! the middle of an append: too short, or a checksum that does not match) is cut off. So a
//! commit is atomic (its puts and its latest pointer are one entry: all or nothing), and
//! durable once acknowledged. One `std::sync::Mutex` orders everything: fencing is checked and
//! the entry appended under it, so a stale epoch can never slip in between.
//!
//! Limits, on purpose: one process per file (`multi_process: false`); blocking file I/O inside
//! the async methods (a production store would hand it to `spawn_blocking`); the file only
//! grows (no compaction).

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use afk_core::store::{
    latest_key, run_key, run_of_key, validate_commit, validate_key, validate_list,
};
use afk_core::{
    Error, Result, RunId, ThreadId,
    store::{Capabilities, Commit, Epoch, ListPage, Store},
};
use async_trait::async_trait;

mod codec;

use codec::{Change, Entry};

type Keys = BTreeMap<String, Vec<u8>>;

#[derive(Debug)]
struct Inner {
    file: File,
    threads: HashMap<String, Keys>,
}

/// An append-only log-file store. See the crate docs for the design.
#[derive(Debug)]
pub struct LogStore {
    path: PathBuf,
    inner: Mutex<Inner>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::unavailable(format!("{what} {}", path.display())).with_source(e)
}

impl LogStore {
    /// Open (or create) the log at `path` and replay it. A torn last entry is cut off.
    ///
    /// Errors: `Unavailable` when the file cannot be read or written; `Corrupt` when an entry
    /// before the last one is damaged (that is not a torn append but a damaged file).
    pub fn open(path: impl AsRef<Path>) -> Result<LogStore> {
        let path = path.as_ref().to_path_buf();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io("cannot open", &path, e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io("cannot read", &path, e))?;
        let (entries, good) = codec::read_log(&bytes)
            .map_err(|msg| Error::corrupt(format!("{}: {msg}", path.display())))?;
        if good < bytes.len() {
            file.set_len(good as u64)
                .map_err(|e| io("cannot cut the torn tail of", &path, e))?;
        }
        let mut threads: HashMap<String, Keys> = HashMap::new();
        for entry in entries {
            apply(&mut threads, entry);
        }
        Ok(LogStore {
            path,
            inner: Mutex::new(Inner { file, threads }),
        })
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Changes reach the map only after their entry is durable, and nothing panics in
        // between: a poisoned lock still guards a consistent state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Append `entry` (synced), then apply it to the map: the map never runs ahead of the file.
    fn write(&self, inner: &mut Inner, entry: Entry) -> Result<()> {
        let bytes = codec::encode(&entry);
        inner
            .file
            .write_all(&bytes)
            .and_then(|()| inner.file.sync_data())
            .map_err(|e| io("cannot append to", &self.path, e))?;
        apply(&mut inner.threads, entry);
        Ok(())
    }
}

fn apply(threads: &mut HashMap<String, Keys>, entry: Entry) {
    let map = threads.entry(entry.thread.clone()).or_default();
    for change in entry.changes {
        match change {
            Change::Put(k, v) => {
                map.insert(k, v);
            }
            Change::Delete(k) => {
                map.remove(&k);
            }
        }
    }
    if map.is_empty() {
        threads.remove(&entry.thread);
    }
}

fn epoch_of(map: Option<&Keys>, run: &RunId) -> Result<Epoch> {
    let key = run_key(run);
    match map.and_then(|m| m.get(&key)) {
        None => Ok(Epoch(0)),
        Some(b) => <[u8; 8]>::try_from(b.as_slice())
            .map(|b| Epoch(u64::from_be_bytes(b)))
            .map_err(|_| Error::corrupt_record(key, "fence value is not 8 bytes")),
    }
}

#[async_trait]
impl Store for LogStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("log-file");
        caps.durable = true;
        caps.list_threads = true;
        caps
    }

    /// The threads in memory (a thread with no keys left is dropped by `apply`), sorted by id;
    /// the cursor is the last id of the previous page.
    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::ThreadPage> {
        let limit = afk_core::store::thread_list_limit(limit);
        let inner = self.lock();
        let mut ids: Vec<&String> = inner
            .threads
            .keys()
            .filter(|t| cursor.is_none_or(|c| t.as_str() > c))
            .collect();
        ids.sort();
        let more = ids.len() > limit;
        let threads = ids
            .into_iter()
            .take(limit)
            .map(|t| ThreadId::new(t.as_str()))
            .collect::<Result<Vec<_>>>()?;
        let next_cursor = if more {
            threads.last().map(|t| t.as_str().to_owned())
        } else {
            None
        };
        Ok(afk_core::store::ThreadPage {
            threads,
            next_cursor,
        })
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let inner = self.lock();
        Ok(inner
            .threads
            .get(thread.as_str())
            .and_then(|m| m.get(key))
            .cloned())
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = validate_list(prefix, cursor, limit)?;
        let inner = self.lock();
        let Some(map) = inner.threads.get(thread.as_str()) else {
            return Ok(ListPage::default());
        };
        let start = match cursor {
            Some(c) if c >= prefix => Bound::Excluded(c),
            _ => Bound::Included(prefix),
        };
        let mut keys = map
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix));
        let page: Vec<String> = keys.by_ref().take(limit).cloned().collect();
        let next_cursor = keys.next().and(page.last().cloned());
        Ok(ListPage {
            keys: page,
            next_cursor,
        })
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        for key in keys {
            validate_key(key)?;
        }
        let mut inner = self.lock();
        let Some(map) = inner.threads.get(thread.as_str()) else {
            return Ok(());
        };
        let changes: Vec<Change> = keys
            .iter()
            .filter(|k| map.contains_key(*k))
            .map(|k| Change::Delete(k.clone()))
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        let entry = Entry {
            thread: thread.to_string(),
            changes,
        };
        self.write(&mut inner, entry)
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let mut inner = self.lock();
        let Some(map) = inner.threads.get(thread.as_str()) else {
            return Ok(0);
        };
        let changes: Vec<Change> = map
            .keys()
            .filter(|k| run_of_key(k) == Some(run.as_str()))
            .map(|k| Change::Delete(k.clone()))
            .collect();
        let n = changes.len() as u64;
        if n > 0 {
            let entry = Entry {
                thread: thread.to_string(),
                changes,
            };
            self.write(&mut inner, entry)?;
        }
        Ok(n)
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let mut inner = self.lock();
        let current = epoch_of(inner.threads.get(thread.as_str()), run)?;
        let next = current
            .0
            .checked_add(1)
            .ok_or_else(|| Error::corrupt_record(run_key(run), "fence epoch cannot grow"))?;
        let entry = Entry {
            thread: thread.to_string(),
            changes: vec![Change::Put(run_key(run), next.to_be_bytes().to_vec())],
        };
        self.write(&mut inner, entry)?;
        Ok(Epoch(next))
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        validate_commit(commit)?;
        let mut inner = self.lock();
        let current = epoch_of(inner.threads.get(commit.thread.as_str()), &commit.run)?;
        if current == Epoch(0) || commit.epoch != current {
            return Err(Error::fenced(format!(
                "run {} is at epoch {current}; the commit carries epoch {}",
                commit.run, commit.epoch
            )));
        }
        let mut changes: Vec<Change> = commit
            .puts
            .iter()
            .map(|(k, v)| Change::Put(k.clone(), v.clone()))
            .collect();
        if let Some(latest) = &commit.latest {
            changes.push(Change::Put(latest_key(&commit.run), latest.clone()));
        }
        let entry = Entry {
            thread: commit.thread.to_string(),
            changes,
        };
        self.write(&mut inner, entry)
    }
}

#[cfg(test)]
mod tests;
