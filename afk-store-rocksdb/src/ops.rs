//! The blocking operations on an open database. Called from `spawn_blocking`, or from the
//! commit thread (`group.rs`), by [`RocksDbStore`](crate::RocksDbStore); every fenced operation
//! holds the run's stripe lock.
//!
//! Each stripe also keeps the epochs of its runs' fences that it has read or written. Only this
//! process can open the database (RocksDB's `LOCK`), and only [`Inner::claim`] and its
//! variants write a fence, [`Inner::delete_run`] and [`Inner::delete`] remove one, all under the
//! run's stripe lock and keeping its cache in step: a commit's fence check then reads no key.
//! Before, that read was a point lookup per commit, often in a table file on disk.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use afk_core::store::{latest_key, run_key, validate_commit, validate_list};
use afk_core::{
    Error, Result, RunId, ThreadId,
    store::{Commit, Epoch, ListPage},
};
use rocksdb::{DB, ReadOptions, WriteBatch, WriteOptions};

use crate::error::{Op, map};
use crate::layout::{logical, physical, prefix_end, run_prefixes};

/// The value of the fence key `run:<run>`: `{"epoch":n}`, as the reference store writes it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Fence {
    epoch: u64,
}

/// Runs closed in the index between two compactions of its key range.
const COMPACT_EVERY: u64 = 4096;

/// Number of lock stripes. Commits of runs in different stripes never wait for each other.
const STRIPES: usize = 64;

/// Most fence epochs one stripe keeps; a full stripe forgets them all and reads them again.
const FENCES_PER_STRIPE: usize = 1024;

/// A stripe's cache of fence epochs, by the fence's physical key.
#[derive(Default)]
pub(crate) struct Fences {
    epochs: HashMap<Vec<u8>, u64>,
}

impl Fences {
    fn remember(&mut self, key: Vec<u8>, epoch: u64) {
        if self.epochs.len() >= FENCES_PER_STRIPE && !self.epochs.contains_key(&key) {
            self.epochs.clear();
        }
        self.epochs.insert(key, epoch);
    }
}

/// The locked stripes of a call, by stripe index.
struct Locked<'a> {
    guards: Vec<(usize, MutexGuard<'a, Fences>)>,
}

impl Locked<'_> {
    fn fences(&mut self, thread: &ThreadId, run: &RunId) -> &mut Fences {
        let i = Inner::stripe(thread, run);
        let at = self
            .guards
            .binary_search_by_key(&i, |(s, _)| *s)
            .unwrap_or_else(|_| unreachable!("the stripe of every run of the call is locked"));
        &mut self.guards[at].1
    }
}

/// An open database plus the locks that serialize fence checks.
pub(crate) struct Inner {
    pub(crate) db: DB,
    pub(crate) path: PathBuf,
    pub(crate) sync: bool,
    stripes: Vec<Mutex<Fences>>,
    /// Runs closed in the index since the database was opened (see [`Inner::count_closed`]).
    closed: std::sync::atomic::AtomicU64,
    /// Entries dropped from the index of finished runs since the database was opened (see
    /// [`Inner::count_forgotten`]).
    forgotten: std::sync::atomic::AtomicU64,
    /// Write batches written since the database was opened.
    pub(crate) writes: std::sync::atomic::AtomicU64,
}

impl Inner {
    pub(crate) fn new(db: DB, path: PathBuf, sync: bool) -> Self {
        Inner {
            db,
            path,
            sync,
            stripes: (0..STRIPES)
                .map(|_| Mutex::new(Fences::default()))
                .collect(),
            closed: std::sync::atomic::AtomicU64::new(0),
            forgotten: std::sync::atomic::AtomicU64::new(0),
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Count `n` runs closed in the index; after every [`COMPACT_EVERY`] of them, compact the
    /// index's key range. A closed run's key is deleted, and an iterator steps over deleted
    /// keys until a compaction drops them: without this, listing the runs that need attention
    /// would slow down with the number of runs that ever finished (measured: 8 ms for 100
    /// entries after 10,000 closes, 35 ms after 100,000).
    fn count_closed(&self, n: u64) {
        self.count_and_compact(&self.closed, n, crate::attention::range());
    }

    /// Count `n` entries dropped from the index of finished runs; after every
    /// [`COMPACT_EVERY`] of them, compact that index's key range, for the same reason: a sweep
    /// lists from the oldest entry, over the keys the sweeps before it deleted.
    pub(crate) fn count_forgotten(&self, n: u64) {
        self.count_and_compact(&self.forgotten, n, crate::finished::range());
    }

    fn count_and_compact(
        &self,
        counter: &std::sync::atomic::AtomicU64,
        n: u64,
        (start, end): (Vec<u8>, Vec<u8>),
    ) {
        use std::sync::atomic::Ordering;
        if n == 0 {
            return;
        }
        let before = counter.fetch_add(n, Ordering::Relaxed);
        if (before + n) / COMPACT_EVERY > before / COMPACT_EVERY {
            self.db.compact_range(Some(start), Some(end));
        }
    }

    /// Hold every stripe (a test stops fenced writes with it).
    #[cfg(test)]
    pub(crate) fn lock_all(&self) -> Vec<MutexGuard<'_, Fences>> {
        self.stripes
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }

    fn stripe(thread: &ThreadId, run: &RunId) -> usize {
        let mut h = DefaultHasher::new();
        (thread.as_str(), run.as_str()).hash(&mut h);
        (h.finish() % STRIPES as u64) as usize
    }

    /// Lock the stripes of all `(thread, run)` pairs, in index order (no deadlock).
    fn lock<'a>(&self, runs: impl IntoIterator<Item = (&'a ThreadId, &'a RunId)>) -> Locked<'_> {
        let mut idx: Vec<usize> = runs.into_iter().map(|(t, r)| Self::stripe(t, r)).collect();
        idx.sort_unstable();
        idx.dedup();
        let guards = idx
            .into_iter()
            .map(|i| {
                // A panic while a stripe was held may have left its cache behind the database:
                // forget it, the fences are read again.
                let guard = self.stripes[i].lock().unwrap_or_else(|p| {
                    let mut g = p.into_inner();
                    g.epochs.clear();
                    g
                });
                (i, guard)
            })
            .collect();
        Locked { guards }
    }

    fn write_opts(&self) -> WriteOptions {
        let mut o = WriteOptions::default();
        o.set_sync(self.sync);
        o
    }

    pub(crate) fn write(&self, batch: WriteBatch) -> Result<()> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.db
            .write_opt(batch, &self.write_opts())
            .map_err(|e| map(e, Op::Write, &self.path))
    }

    pub(crate) fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        afk_core::store::validate_key(key)?;
        self.db
            .get(physical(thread, key))
            .map_err(|e| map(e, Op::Read, &self.path))
    }

    pub(crate) fn get_many(
        &self,
        thread: &ThreadId,
        keys: &[String],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        for k in keys {
            afk_core::store::validate_key(k)?;
        }
        self.db
            .multi_get(keys.iter().map(|k| physical(thread, k)))
            .into_iter()
            .map(|r| r.map_err(|e| map(e, Op::Read, &self.path)))
            .collect()
    }

    /// The run's current epoch (0 when never claimed), from the stripe's cache or the
    /// database; the caller holds the run's stripe.
    fn epoch(&self, fences: &mut Fences, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let physical_key = physical(thread, &run_key(run));
        if let Some(&epoch) = fences.epochs.get(&physical_key) {
            return Ok(Epoch(epoch));
        }
        let raw = self
            .db
            .get_pinned(&physical_key)
            .map_err(|e| map(e, Op::Read, &self.path))?;
        let epoch = match raw {
            None => 0,
            Some(raw) => serde_json::from_slice::<Fence>(&raw)
                .map(|f| f.epoch)
                .map_err(|e| {
                    Error::corrupt_record(run_key(run), "fence value is not {\"epoch\": n}")
                        .with_source(e)
                })?,
        };
        fences.remember(physical_key, epoch);
        Ok(Epoch(epoch))
    }

    pub(crate) fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let mut locked = self.lock([(thread, run)]);
        self.claim_locked(locked.fences(thread, run), thread, run)
    }

    /// The look at the pointer and the claim under the run's lock: atomic.
    pub(crate) fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        let mut locked = self.lock([(thread, run)]);
        let pointer = self
            .db
            .get_pinned(physical(thread, &latest_key(run)))
            .map_err(|e| map(e, Op::Read, &self.path))?;
        if pointer.is_some() {
            return Ok(None);
        }
        self.claim_locked(locked.fences(thread, run), thread, run)
            .map(Some)
    }

    /// The look at the epoch and the claim under the run's lock: atomic.
    pub(crate) fn claim_if(
        &self,
        thread: &ThreadId,
        run: &RunId,
        seen: Epoch,
    ) -> Result<Option<Epoch>> {
        let mut locked = self.lock([(thread, run)]);
        let fences = locked.fences(thread, run);
        if self.epoch(fences, thread, run)? != seen {
            return Ok(None);
        }
        self.claim_locked(fences, thread, run).map(Some)
    }

    /// [`Self::claim`] under the run's lock, which the caller holds (`fences` is its stripe's).
    fn claim_locked(&self, fences: &mut Fences, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let current = self.epoch(fences, thread, run)?;
        let next = current
            .0
            .checked_add(1)
            .ok_or_else(|| Error::corrupt_record(run_key(run), "fence epoch is at u64::MAX"))?;
        let key = physical(thread, &run_key(run));
        let mut batch = WriteBatch::default();
        batch.put(
            &key,
            serde_json::to_vec(&Fence { epoch: next })
                .map_err(|e| Error::unexpected("cannot encode the fence").with_source(e))?,
        );
        // A failed write may or may not have reached the log: read the fence again next time.
        fences.epochs.remove(&key);
        self.write(batch)?;
        fences.remember(key, next);
        Ok(Epoch(next))
    }

    pub(crate) fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        let mut results: Vec<Result<()>> = commits.iter().map(validate_commit).collect();
        let mut locked = self.lock(commits.iter().map(|c| (&c.thread, &c.run)));
        let mut batch = WriteBatch::default();
        let mut staged = Vec::new();
        for (i, c) in commits.iter().enumerate() {
            if results[i].is_err() {
                continue;
            }
            match self.epoch(locked.fences(&c.thread, &c.run), &c.thread, &c.run) {
                Ok(Epoch(0)) => {
                    results[i] = Err(Error::fenced(format!(
                        "run {} of thread {} was never claimed; claim it before committing",
                        c.run, c.thread
                    )));
                }
                Ok(current) if current == c.epoch => {
                    for (k, v) in &c.puts {
                        batch.put(physical(&c.thread, k), v);
                    }
                    if let Some(latest) = &c.latest {
                        batch.put(physical(&c.thread, &latest_key(&c.run)), latest);
                    }
                    crate::attention::stage(&mut batch, c);
                    staged.push(i);
                }
                Ok(current) => {
                    results[i] = Err(Error::fenced(format!(
                        "run {} of thread {} is at epoch {current}; this commit carries epoch {}",
                        c.run, c.thread, c.epoch
                    )));
                }
                Err(e) => results[i] = Err(e),
            }
        }
        if staged.is_empty() {
            return results;
        }
        if let Err(e) = self.write(batch) {
            let (kind, msg) = (e.kind(), e.to_string());
            for i in staged {
                results[i] = Err(Error::new(kind, msg.clone()));
            }
            return results;
        }
        let closed = staged
            .iter()
            .filter(|&&i| commits[i].attention == Some(afk_core::store::Attention::Closed))
            .count();
        self.count_closed(closed as u64);
        results
    }

    pub(crate) fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = validate_list(prefix, cursor, limit)?;
        let lower = physical(thread, prefix);
        let upper = prefix_end(&lower)
            .ok_or_else(|| Error::unexpected("thread prefix has no upper bound"))?;
        // A cursor is a key; the page starts strictly after it. One that sorts before the
        // prefix starts at the prefix; one after every key of the prefix gives nothing.
        let start = match cursor {
            Some(c) if c.starts_with(prefix) => Some(physical(thread, c)),
            Some(c) if c < prefix => None,
            Some(_) => return Ok(ListPage::default()),
            None => None,
        };
        let mut opts = ReadOptions::default();
        opts.set_iterate_lower_bound(lower.clone());
        opts.set_iterate_upper_bound(upper);
        let mut it = self.db.raw_iterator_opt(opts);
        it.seek(start.as_deref().unwrap_or(&lower));
        let mut keys = Vec::with_capacity(limit.min(64));
        let mut more = false;
        while let Some(k) = it.key() {
            if start.as_deref() == Some(k) {
                it.next();
                continue;
            }
            if keys.len() == limit {
                more = true;
                break;
            }
            keys.push(logical(thread, k)?);
            it.next();
        }
        it.status().map_err(|e| map(e, Op::Read, &self.path))?;
        let next_cursor = if more { keys.last().cloned() } else { None };
        Ok(ListPage { keys, next_cursor })
    }

    /// Delete `keys` in one batch. A fence among them is deleted under its run's lock, and
    /// forgotten by the stripe's cache.
    pub(crate) fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        let mut batch = WriteBatch::default();
        let mut fenced = Vec::new();
        for k in keys {
            afk_core::store::validate_key(k)?;
            if let Some(run) = k.strip_prefix("run:").and_then(|r| RunId::new(r).ok()) {
                fenced.push(run);
            }
            batch.delete(physical(thread, k));
        }
        let mut locked = self.lock(fenced.iter().map(|r| (thread, r)));
        for run in &fenced {
            let key = physical(thread, &run_key(run));
            locked.fences(thread, run).epochs.remove(&key);
        }
        self.write(batch)
    }

    /// Count the run's keys, then delete them with one range delete per family plus the fence,
    /// and the run's entry in the index of runs that need attention, in one batch.
    pub(crate) fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let mut locked = self.lock([(thread, run)]);
        let mut batch = WriteBatch::default();
        let mut count = 0u64;
        for p in run_prefixes(run) {
            let lower = physical(thread, &p);
            let upper = prefix_end(&lower)
                .ok_or_else(|| Error::unexpected("run prefix has no upper bound"))?;
            let mut opts = ReadOptions::default();
            opts.set_iterate_lower_bound(lower.clone());
            opts.set_iterate_upper_bound(upper.clone());
            let mut it = self.db.raw_iterator_opt(opts);
            it.seek(&lower);
            while it.valid() {
                count += 1;
                it.next();
            }
            it.status().map_err(|e| map(e, Op::Read, &self.path))?;
            batch.delete_range(lower, upper);
        }
        let fence = physical(thread, &run_key(run));
        if self
            .db
            .get_pinned(&fence)
            .map_err(|e| map(e, Op::Read, &self.path))?
            .is_some()
        {
            count += 1;
        }
        locked.fences(thread, run).epochs.remove(&fence);
        batch.delete(fence);
        batch.delete(crate::attention::key(thread, run));
        self.write(batch)?;
        Ok(count)
    }
}
