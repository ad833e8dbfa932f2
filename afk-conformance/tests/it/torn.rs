//! Torn commits are caught every time: a store that writes the pointer first, and one that
//! splits a commit in two writes, each fail the live-reader case and the crash level in 20 of
//! 20 runs; a correct durable store passes the crash level, and the in-memory store skips it
//! visibly.
//!
//! The crash-level tests re-execute this test binary as the writer process (see
//! `afk_conformance::cases::crash`), so each test here that calls the level names itself.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use afk_conformance::broken::{Breakage, BrokenStore};
use afk_conformance::cases::crash::{CrashConfig, killed_writer_leaves_whole_commits};
use afk_conformance::cases::torn::concurrent_reader_sees_no_torn_commit;
use afk_core::{MemoryStore, store::Store};
use common::filelog::FileLog;

const RUNS: usize = 20;

/// The crash level's config for the test `test` of this module: the child it spawns runs the
/// test by its libtest name, this module's path in the test binary (without the crate name)
/// and `test`.
fn config(test: &str, seed: u64) -> CrashConfig {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    CrashConfig {
        seed,
        test_name: Some(format!("{module}::{test}")),
        ..CrashConfig::from_env().expect("config")
    }
}

async fn open_log(dir: PathBuf, breakage: Option<Breakage>) -> Arc<dyn Store> {
    let log = FileLog::open(&dir).await.expect("open the log");
    match breakage {
        Some(b) => Arc::new(BrokenStore::new(log, b)),
        None => Arc::new(log),
    }
}

/// Run the live-reader case `RUNS` times on fresh in-memory stores with `breakage`; the
/// number of runs that caught it.
async fn reader_catches(breakage: Breakage) -> usize {
    let mut caught = 0;
    for run in 1..=RUNS {
        let store = Arc::new(BrokenStore::new(MemoryStore::new(), breakage));
        match concurrent_reader_sees_no_torn_commit(store).await {
            Err(msg) => {
                caught += 1;
                println!("run {run}: caught: {msg}");
            }
            Ok(()) => println!("run {run}: NOT caught"),
        }
    }
    caught
}

/// Run the crash level `RUNS` times (fresh directory, seeds 1..=RUNS) on the file log with
/// `breakage`; the number of runs that caught it.
async fn crash_catches(test: &str, breakage: Breakage) -> usize {
    let mut caught = 0;
    for seed in 1..=RUNS as u64 {
        let open = |dir| open_log(dir, Some(breakage));
        match killed_writer_leaves_whole_commits(open, config(test, seed)).await {
            Err(msg) => {
                caught += 1;
                println!("seed {seed}: caught: {}", msg.lines().next().unwrap_or(""));
                remove_kept_store(&msg);
            }
            Ok(()) => println!("seed {seed}: NOT caught"),
        }
    }
    caught
}

#[tokio::test(flavor = "multi_thread")]
async fn reader_catches_pointer_first_20_of_20() {
    assert_eq!(reader_catches(Breakage::PointerFirst).await, RUNS);
}

#[tokio::test(flavor = "multi_thread")]
async fn reader_catches_split_commit_20_of_20() {
    assert_eq!(reader_catches(Breakage::SplitCommit).await, RUNS);
}

#[tokio::test(flavor = "multi_thread")]
async fn reader_passes_correct_stores() {
    for _ in 0..3 {
        let r = concurrent_reader_sees_no_torn_commit(Arc::new(MemoryStore::new())).await;
        assert_eq!(r, Ok(()));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let log = open_log(dir.path().to_owned(), None).await;
    assert_eq!(concurrent_reader_sees_no_torn_commit(log).await, Ok(()));
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_level_catches_pointer_first_20_of_20() {
    let test = "crash_level_catches_pointer_first_20_of_20";
    assert_eq!(crash_catches(test, Breakage::PointerFirst).await, RUNS);
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_level_catches_split_commit_20_of_20() {
    let test = "crash_level_catches_split_commit_20_of_20";
    assert_eq!(crash_catches(test, Breakage::SplitCommit).await, RUNS);
}

/// A store that acknowledges commits it has not written is caught too (acknowledged commits
/// must survive).
#[tokio::test(flavor = "multi_thread")]
async fn crash_level_catches_lost_writes() {
    let test = "crash_level_catches_lost_writes";
    let open = |dir| open_log(dir, Some(Breakage::LosesWrites(7)));
    let result = killed_writer_leaves_whole_commits(open, config(test, 1)).await;
    let msg = result.expect_err("a store losing acknowledged commits passed the crash level");
    println!("{msg}");
    remove_kept_store(&msg);
}

/// A failing crash level keeps its store for a person to look at and names it in the message
/// ("the store is kept in DIR)"); here the failure is the expected outcome, so remove it
/// (otherwise every test run leaves ~40 directories in the temp dir).
fn remove_kept_store(msg: &str) {
    let kept = msg
        .rsplit_once("the store is kept in ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(dir, _)| std::path::PathBuf::from(dir));
    match kept {
        Some(dir) if dir.starts_with(std::env::temp_dir()) => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        _ => panic!("the crash level's failure names no kept store: {msg}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_level_passes_a_correct_durable_store() {
    let test = "crash_level_passes_a_correct_durable_store";
    let open = |dir| open_log(dir, None);
    let seed = rand::random();
    let result = killed_writer_leaves_whole_commits(open, config(test, seed)).await;
    assert_eq!(result, Ok(()), "seed {seed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_level_skips_the_memory_store_visibly() {
    let test = "crash_level_skips_the_memory_store_visibly";
    let open = |_dir| async { Arc::new(MemoryStore::new()) };
    let result = killed_writer_leaves_whole_commits(open, config(test, 1)).await;
    assert_eq!(result, Ok(()));
    let skipped = afk_conformance::skipped();
    assert!(
        skipped
            .iter()
            .any(|(case, why)| case.starts_with("crash::") && why.contains("durable = false")),
        "{skipped:?}"
    );
}
