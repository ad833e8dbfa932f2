//! The background task: drains the queue, coalesces, batches, writes, resolves.
//!
//! Submissions arrive over a bounded channel in submission order. The task moves them into its
//! own queue (at most `queue_maxsize` entries, so backpressure still reaches `submit`), where
//! they may be coalesced, then hands batches to the store:
//! - **coalescing**: a coalescible commit merges into the newest queued entry of its run only if
//!   that entry is itself coalescible, has the same epoch, and has not been handed to the store.
//!   Because it is the *newest* entry of the run, nothing else of the run lies between them, so a
//!   run's phase records are never reordered. The merge keeps every put of both (the newer value
//!   wins for a key in both) and the newer latest pointer, so the pointer still ends as the newest
//!   and no record is lost;
//! - **batching**: consecutive entries, at most one per run claim and at most
//!   `max_batch_size`, go to one `commit_batch` call. One per run claim because a batch is not
//!   atomic as a whole: if a run's first commit failed and its second succeeded, the second
//!   would stand without the first. Two claims of one run may share a batch: once the newer
//!   claim exists, every commit of the older one is fenced, whatever the order;
//! - **failure**: a commit that still fails after the retry policy fails its run claim; the
//!   claim's queued entries are dropped with that error (a fenced claim's all fail with
//!   `Fenced`).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::config::CheckpointConfig;
use super::state::{AliveGuard, RunKey, Shared};
use crate::error::Error;
use crate::store::{Commit, RetryStore, Store};

/// A commit accepted by `submit`.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: RunKey,
    pub(crate) seq: u64,
    pub(crate) commit: Commit,
    pub(crate) coalescible: bool,
}

/// What travels over the channel.
#[derive(Debug)]
pub(crate) enum Msg {
    Commit(Entry),
    /// Drain what is queued, then stop.
    Shutdown,
}

pub(crate) struct Worker {
    shared: Arc<Shared>,
    store: Arc<RetryStore<dyn Store>>,
    config: CheckpointConfig,
    max_commit_keys: Option<usize>,
    queue: VecDeque<Entry>,
    closing: bool,
}

impl Worker {
    pub(crate) fn new(
        shared: Arc<Shared>,
        store: Arc<RetryStore<dyn Store>>,
        config: CheckpointConfig,
    ) -> Self {
        let max_commit_keys = store.capabilities().max_commit_keys;
        Worker {
            shared,
            store,
            config,
            max_commit_keys,
            queue: VecDeque::new(),
            closing: false,
        }
    }

    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut guard = AliveGuard {
            shared: self.shared.clone(),
            finished: false,
        };
        loop {
            if self.queue.is_empty() {
                if self.closing {
                    break;
                }
                match rx.recv().await {
                    Some(msg) => self.accept(msg),
                    None => break,
                }
            }
            while self.queue.len() < self.config.queue_maxsize {
                match rx.try_recv() {
                    Ok(msg) => self.accept(msg),
                    Err(_) => break,
                }
            }
            if !self.queue.is_empty() {
                self.write_batch().await;
            }
        }
        guard.finished = true;
    }

    fn accept(&mut self, msg: Msg) {
        let entry = match msg {
            Msg::Shutdown => {
                self.closing = true;
                return;
            }
            Msg::Commit(entry) => entry,
        };
        let mut st = self.shared.lock();
        if st.runs.get(&entry.key).is_some_and(|r| r.error.is_some()) {
            // The run already failed; its waiters already see that error.
            st.stats.failed += 1;
            return;
        }
        if entry.coalescible && self.config.coalesce_runtime_state {
            let max_keys = self.max_commit_keys;
            if let Some(last) = self.queue.iter_mut().rev().find(|q| q.key == entry.key)
                && last.coalescible
                && last.commit.epoch == entry.commit.epoch
                && merge(&mut last.commit, &entry.commit, max_keys)
            {
                last.seq = entry.seq;
                st.stats.coalesced += 1;
                return;
            }
        }
        drop(st);
        self.queue.push_back(entry);
    }

    async fn write_batch(&mut self) {
        let max = self.config.max_batch_size;
        let mut seen: HashSet<RunKey> = HashSet::new();
        let mut picked: Vec<(RunKey, u64)> = Vec::new();
        let mut commits: Vec<Commit> = Vec::new();
        let mut rest = VecDeque::with_capacity(self.queue.len());
        for e in self.queue.drain(..) {
            if picked.len() < max && !seen.contains(&e.key) {
                seen.insert(e.key.clone());
                picked.push((e.key, e.seq));
                commits.push(e.commit);
            } else {
                seen.insert(e.key.clone());
                rest.push_back(e);
            }
        }
        self.queue = rest;

        let mut results = self.store.commit_batch(&commits).await.into_iter();
        let mut failed_runs: HashSet<RunKey> = HashSet::new();
        {
            let mut st = self.shared.lock();
            st.stats.batches += 1;
            st.stats.max_batch_len = st.stats.max_batch_len.max(picked.len() as u64);
            for (key, seq) in picked {
                let result = results.next().unwrap_or_else(|| {
                    Err(Error::unexpected(
                        "store answered fewer results than commits in the batch",
                    ))
                });
                match result {
                    Ok(()) => {
                        st.stats.written += 1;
                        let run = st.runs.entry(key).or_default();
                        run.durable = run.durable.max(seq);
                    }
                    Err(e) => {
                        tracing::warn!(
                            thread = %key.0, run = %key.1, epoch = %key.2, error = %e,
                            "checkpoint write failed; failing the run"
                        );
                        st.fail_run(&key, e);
                        failed_runs.insert(key);
                    }
                }
            }
            if !failed_runs.is_empty() {
                let before = self.queue.len();
                self.queue.retain(|e| !failed_runs.contains(&e.key));
                st.stats.failed += (before - self.queue.len()) as u64;
            }
        }
        self.shared.notify();
    }
}

/// Merge `newer` into `older` (both of one run and epoch): every put of both, the newer value
/// for a key in both, the newer latest pointer if it has one. Returns `false` (and changes
/// nothing) if the merged commit would exceed `max_keys`.
fn merge(older: &mut Commit, newer: &Commit, max_keys: Option<usize>) -> bool {
    let added = newer
        .puts
        .iter()
        .filter(|(k, _)| !older.puts.iter().any(|(o, _)| o == k))
        .count();
    if max_keys.is_some_and(|m| older.puts.len() + added > m) {
        return false;
    }
    for (k, v) in &newer.puts {
        match older.puts.iter_mut().find(|(o, _)| o == k) {
            Some(slot) => slot.1 = v.clone(),
            None => older.puts.push((k.clone(), v.clone())),
        }
    }
    if newer.latest.is_some() {
        older.latest = newer.latest.clone();
    }
    true
}
