//! Torn commits seen by a live reader: a reader running beside a writer never finds a commit
//! half applied, and provably watched the pointer move.
//!
//! The writer makes [`COMMITS`] commits of three records each (a checkpoint record, a message
//! entry, an effect row) plus the latest pointer naming the checkpoint record. A reader task,
//! spawned on another worker thread, loops over the store while the writer works. After each
//! commit the writer waits until the reader has started and finished a full look after it,
//! so the reader sees every pointer value (the case fails when it did not see the pointer
//! move), and reads also overlap every commit. In each look the reader checks:
//!
//! * the commit the pointer names is whole: its three records are there (pointer first is
//!   caught here);
//! * if any record of the *next* commit is visible, all three are, and a pointer read after
//!   them has moved to it (records first, or a commit split in parts, is caught here).
//!
//! The case is timing-sensitive: `store_suite!` runs it alone in its test process, with a
//! store of its own from the factory, and repeats it `AFK_CONFORMANCE_REPEAT` times.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use afk_core::{RunId, ThreadId, store::Store};

use crate::support::{CaseResult, Ctx, commit, ensure, fail, unique_run, unique_thread};

/// Commits the writer makes.
pub const COMMITS: u64 = 40;

/// The record keys of commit `n` of run `r`: checkpoint record (the pointer's target), message
/// entry, effect row.
fn parts(r: &RunId, n: u64) -> [String; 3] {
    [
        format!("checkpoint:{r}:{n}:runtime_state"),
        format!("messages:{r}:{n:020}"),
        format!("effect:{r}:{n}:call_{n}"),
    ]
}

fn value(n: u64, part: usize) -> Vec<u8> {
    let mut v = format!("commit {n} part {part} ").into_bytes();
    v.resize(512, b'.');
    v
}

/// The commit number a pointer value names, or why it is not one of ours.
fn pointed(r: &RunId, pointer: &[u8]) -> Result<u64, String> {
    let key = std::str::from_utf8(pointer).map_err(|_| "the pointer is not the UTF-8 written")?;
    key.strip_prefix(&format!("checkpoint:{r}:"))
        .and_then(|rest| rest.strip_suffix(":runtime_state"))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the pointer reads {key:?}, which no commit wrote"))
}

/// A reader beside a writer never sees a pointer without its records, records without their
/// pointer, or part of a commit; and it saw the pointer move at every commit.
pub async fn concurrent_reader_sees_no_torn_commit(store: Arc<dyn Store>) -> CaseResult {
    let t = unique_thread("torn");
    let r = unique_run();
    let epoch = store.claim(&t, &r).await.ctx("claim")?;
    let looks = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(read_loop(
        store.clone(),
        t.clone(),
        r.clone(),
        looks.clone(),
        done.clone(),
    ));
    let written = write_loop(store.as_ref(), &t, &r, epoch, &looks, &reader).await;
    done.store(true, Ordering::SeqCst);
    let seen = reader
        .await
        .map_err(|e| fail!("the reader task panicked: {e}"))?;
    written?;
    let moves = seen?;
    ensure!(
        moves >= COMMITS,
        "the reader saw the pointer move {moves} times in {COMMITS} commits, so it proves nothing"
    );
    Ok(())
}

async fn write_loop(
    store: &dyn Store,
    t: &ThreadId,
    r: &RunId,
    epoch: afk_core::store::Epoch,
    looks: &AtomicU64,
    reader: &tokio::task::JoinHandle<Result<u64, String>>,
) -> CaseResult {
    for n in 1..=COMMITS {
        let keys = parts(r, n);
        let puts = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), value(n, i)))
            .collect();
        store
            .commit(&commit(
                t,
                r,
                epoch,
                puts,
                Some(keys[0].clone().into_bytes()),
            ))
            .await
            .ctx(format!("commit {n}"))?;
        // Wait for one whole look that started after this commit returned.
        let start = looks.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(30);
        while looks.load(Ordering::SeqCst) < start + 2 {
            if reader.is_finished() {
                return Ok(()); // it found a problem: its answer says which
            }
            if Instant::now() > deadline {
                return Err(fail!(
                    "the reader made no progress for 30 s after commit {n}"
                ));
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    Ok(())
}

/// Look until `done`; the number of distinct pointer values seen.
async fn read_loop(
    store: Arc<dyn Store>,
    t: ThreadId,
    r: RunId,
    looks: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
) -> Result<u64, String> {
    let latest = afk_core::store::latest_key(&r);
    let mut last_seen = 0;
    let mut moves = 0;
    loop {
        let finished = done.load(Ordering::SeqCst);
        let pointer = store.get(&t, &latest).await.ctx("get latest")?;
        let n = match pointer {
            Some(p) => pointed(&r, &p)?,
            None => 0,
        };
        if n != last_seen {
            moves += 1;
            last_seen = n;
        }
        if n > 0 {
            for (i, key) in parts(&r, n).iter().enumerate() {
                let got = store.get(&t, key).await.ctx(format!("get {key}"))?;
                ensure!(
                    got.as_deref() == Some(value(n, i).as_slice()),
                    "torn commit: the pointer names commit {n}, but its record {key} reads {}",
                    crate::support::show(&got)
                );
            }
        }
        // The next commit: all of it or none of it, and never ahead of the pointer.
        let next = parts(&r, n + 1);
        let first = store.get(&t, &next[0]).await.ctx("get")?;
        let others = [
            store.get(&t, &next[1]).await.ctx("get")?,
            store.get(&t, &next[2]).await.ctx("get")?,
        ];
        // Read in order: once one record is there, the ones read after it must be too.
        let visible = [first.is_some(), others[0].is_some(), others[1].is_some()];
        if visible.iter().any(|v| *v) {
            ensure!(
                !visible.windows(2).any(|w| w[0] && !w[1]),
                "torn commit: part of commit {} is visible (records {:?} read in this order: {visible:?})",
                n + 1,
                next
            );
            let again = store.get(&t, &latest).await.ctx("get latest")?;
            let m = match again {
                Some(p) => pointed(&r, &p)?,
                None => 0,
            };
            ensure!(
                m > n,
                "torn commit: records of commit {} are visible, but the pointer still names \
                 commit {m}",
                n + 1
            );
        }
        looks.fetch_add(1, Ordering::SeqCst);
        if finished {
            return Ok(moves);
        }
        tokio::task::yield_now().await;
    }
}
