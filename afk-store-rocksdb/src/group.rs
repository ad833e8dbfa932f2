//! Group commit: one thread writes the commits of every caller, many at a time.
//!
//! A commit handed to the blocking pool costs a pool thread's wake-up, a write of its own and,
//! with sync writes, an `fdatasync` of its own; thousands of runs committing at once then keep
//! hundreds of pool threads waking, contending for the fence stripes and syncing the WAL. Here
//! a caller sends its commits to one thread and awaits the answer. The thread takes every
//! commit waiting when it is free (up to [`MAX_GROUP`]), checks each one's fence and writes all
//! that pass in one `WriteBatch` and one sync: alone, a commit costs what it did; under load,
//! the cost of a write and a sync is shared by the group. Each commit keeps its own answer: one
//! that fails its fence check is refused on its own, and a write that fails fails every commit
//! it carried (none of them is applied).
//!
//! The caller awaits a channel, not a thread, so a timeout around the call still fires while
//! RocksDB waits (a write stall, a disk that stopped answering). The thread ends when the store
//! is dropped, after the commits already sent; the drop waits for it, so the database is
//! closed (its `LOCK` released) when the last handle is gone.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;

use afk_core::store::Commit;
use afk_core::{Error, Result};
use tokio::sync::oneshot;

use crate::ops::Inner;

/// Most commits one group writes: a bound on one `WriteBatch` and on how long the callers at
/// its end wait behind its start.
pub(crate) const MAX_GROUP: usize = 512;

/// One answer per commit, in order, and the commits themselves, handed back (a rejected commit
/// goes back to its caller unchanged, see [`afk_core::store::CommitRejected`]).
pub(crate) type Answer = (Vec<Result<()>>, Vec<Commit>);

/// Commits of one caller and where their answers go.
struct Job {
    commits: Vec<Commit>,
    reply: oneshot::Sender<Answer>,
}

/// The sending side of the commit thread; dropping it ends the thread and waits for it.
pub(crate) struct Group {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Group {
    /// Start the commit thread over `inner`.
    ///
    /// Errors: `Unavailable` when the thread cannot be started.
    pub(crate) fn start(inner: Arc<Inner>) -> Result<Self> {
        let (tx, rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("afk-rocksdb-commit".to_owned())
            .spawn(move || run(&inner, &rx))
            .map_err(|e| {
                Error::unavailable("cannot start the RocksDB store's commit thread").with_source(e)
            })?;
        Ok(Group {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Write `commits` with the group they join; one answer per commit, in order, and the
    /// commits back. When the thread is gone the answers are `Unavailable` and the commits are
    /// lost to the caller only if the thread died holding them.
    pub(crate) async fn commit(&self, commits: Vec<Commit>) -> Answer {
        let n = commits.len();
        let (reply, answer) = oneshot::channel();
        let Some(tx) = self.tx.as_ref() else {
            return (stopped(n), commits);
        };
        if let Err(std::sync::mpsc::SendError(job)) = tx.send(Job { commits, reply }) {
            return (stopped(n), job.commits);
        }
        answer.await.unwrap_or_else(|_| (stopped(n), Vec::new()))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            // The thread ends after the commits already sent; a panic there was answered to
            // its callers already.
            let _ = thread.join();
        }
    }
}

/// The answers when the commit thread is gone: nothing was written.
fn stopped(n: usize) -> Vec<Result<()>> {
    (0..n)
        .map(|_| {
            Err(Error::unavailable(
                "the RocksDB store's commit thread stopped; nothing of this commit was written",
            )
            .with_retryable(false))
        })
        .collect()
}

/// The thread: take the waiting jobs, write their commits as one batch, answer each job.
fn run(inner: &Inner, rx: &Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut count = jobs[0].commits.len();
        while count < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => {
                    count += job.commits.len();
                    jobs.push(job);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut commits = Vec::with_capacity(count);
        for job in jobs {
            sizes.push(job.commits.len());
            replies.push(job.reply);
            commits.extend(job.commits);
        }
        let results = std::panic::catch_unwind(AssertUnwindSafe(|| inner.commit_batch(&commits)))
            .unwrap_or_else(|_| {
                (0..commits.len())
                    .map(|_| {
                        Err(Error::unexpected(
                            "the RocksDB store panicked during a commit",
                        ))
                    })
                    .collect()
            });
        let (mut results, mut commits) = (results.into_iter(), commits.into_iter());
        for (size, reply) in sizes.into_iter().zip(replies) {
            let answer: Vec<Result<()>> = results.by_ref().take(size).collect();
            let back: Vec<Commit> = commits.by_ref().take(size).collect();
            // A caller that stopped waiting (a timeout, an aborted run) drops its answer.
            let _ = reply.send((answer, back));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use afk_core::store::{Commit, Epoch, Store};
    use afk_core::{RunId, ThreadId};

    use crate::{RocksDbConfig, RocksDbStore};

    fn ids(run: usize) -> (ThreadId, RunId) {
        let thread = ThreadId::new("th").unwrap_or_else(|e| panic!("{e}"));
        let run = RunId::new(format!("r{run}")).unwrap_or_else(|e| panic!("{e}"));
        (thread, run)
    }

    /// Commits that wait while the thread writes are written together: one write batch for
    /// many callers, and each gets its own answer (the stale one is fenced alone).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_waiting_together_share_one_write_and_keep_their_own_answers() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store =
            RocksDbStore::open(RocksDbConfig::new(dir.path())).unwrap_or_else(|e| panic!("{e}"));
        let mut epochs = Vec::new();
        for run in 0..100 {
            let (thread, run) = ids(run);
            epochs.push(
                store
                    .claim(&thread, &run)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        let commit = |run: usize, epoch: Epoch| {
            let (thread, id) = ids(run);
            Commit {
                puts: vec![(format!("checkpoint:{id}:0:pre_llm"), b"v".to_vec())],
                latest: Some(b"v".to_vec()),
                attention: None,
                thread,
                run: id,
                epoch,
            }
        };
        // Hold every stripe: the thread's first group stops at its fence check, and the rest
        // of the commits queue behind it.
        let inner = Arc::clone(&store.inner);
        let held = inner.lock_all();
        let before = inner.writes.load(Ordering::Relaxed);
        let mut tasks = Vec::new();
        for (run, &epoch) in epochs.iter().enumerate() {
            // Run 7's commit carries a stale epoch.
            let epoch = if run == 7 { Epoch(epoch.0 + 1) } else { epoch };
            let (store, c) = (store.clone(), commit(run, epoch));
            tasks.push(tokio::spawn(async move { store.commit(&c).await }));
        }
        // Give every task time to send its commit.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            tasks.iter().all(|t| !t.is_finished()),
            "no commit can finish while the stripes are held"
        );
        drop(held);
        for (run, task) in tasks.into_iter().enumerate() {
            let result = task.await.unwrap_or_else(|e| panic!("{e}"));
            if run == 7 {
                let err = result.expect_err("a stale epoch is fenced");
                assert_eq!(err.kind(), afk_core::ErrorKind::Fenced);
            } else {
                result.unwrap_or_else(|e| panic!("run {run}: {e}"));
            }
        }
        let writes = inner.writes.load(Ordering::Relaxed) - before;
        assert!(
            writes <= 3,
            "99 commits waiting together took {writes} write batches; a group should carry them"
        );
        for run in 0..100 {
            let (thread, id) = ids(run);
            let got = store
                .get(&thread, &format!("checkpoint:{id}:0:pre_llm"))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got.is_some(), run != 7, "run {run}");
        }
    }
}
