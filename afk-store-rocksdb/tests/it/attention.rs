//! The index of runs that need attention on a real database: it survives reopening, a
//! database written before it existed opens and gains one, thread listings never see it, and
//! a process killed mid-stream never leaves an entry without its commit or a commit without
//! its entry.
//!
//! The crash test re-runs its own binary, filtered to itself, with
//! `AFK_ROCKSDB_ATTENTION_CHILD=<db path>` (as `durability.rs` does): that process streams sync
//! commits that each move the pointer and the run's entry to the same step (closing the run on
//! every third step), printing `ack <run> <step>` after each; the parent `kill -9`s it and
//! compares, run by run, the entry with the pointer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use afk_core::store::{Attention, AttentionRun, Commit, Epoch, Store};
use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

use crate::common::{self, r, t};

/// A commit of one record and the pointer at `step`, carrying `attention`.
fn step_commit(
    thread: &str,
    run: &str,
    epoch: Epoch,
    step: u64,
    attention: Option<Attention>,
) -> Commit {
    let key = format!("checkpoint:{run}:{step}:x");
    let value = step.to_string();
    let mut c = common::commit(
        thread,
        run,
        epoch,
        &[(key.as_str(), value.as_str())],
        Some(&value),
    );
    c.attention = attention;
    c
}

fn open_entry(s: &str) -> Option<Attention> {
    Some(Attention::Open(s.as_bytes().to_vec()))
}

/// Every run of a complete listing, in pages of `limit`, as `(thread/run, entry)`.
async fn listed(store: &RocksDbStore, limit: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_attention(cursor.as_deref(), limit)
            .await
            .expect("list_attention");
        assert!(page.runs.len() <= limit.max(1));
        out.extend(
            page.runs
                .into_iter()
                .map(|AttentionRun { thread, run, entry }| {
                    (
                        format!("{thread}/{run}"),
                        String::from_utf8(entry).expect("utf8 entry"),
                    )
                }),
        );
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Open, closed, finished and deleted runs, in threads and runs whose ids extend one another;
/// after the database is closed and opened again the index is the same, in `(thread, run)`
/// order, and moves on with new commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_survives_reopening_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let want = pairs(&[
        ("th/r1", "one"),
        ("th/r10", "ten"),
        ("th1/r1", "other thread"),
    ]);
    {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("open");
        assert!(store.capabilities().attention);
        for (th, run, entry) in [
            ("th", "r1", "one"),
            ("th", "r10", "ten"),
            ("th1", "r1", "other thread"),
            ("th", "closed", "x"),
            ("th", "finished", "x"),
            ("th", "deleted", "x"),
        ] {
            let e = store.claim(&t(th), &r(run)).await.expect("claim");
            let c = step_commit(th, run, e, 0, open_entry(entry));
            store.commit(&c).await.expect("open commit");
            if run == "closed" {
                let c = step_commit(th, run, e, 1, Some(Attention::Closed));
                store.commit(&c).await.expect("closing commit");
            }
            if run == "finished" {
                store.finish_run(&t(th), &r(run), e).await.expect("finish");
            }
        }
        store
            .delete_run(&t("th"), &r("deleted"))
            .await
            .expect("delete_run");
        assert_eq!(listed(&store, 1000).await, want);
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("reopen");
    for limit in [1000, 2, 1] {
        assert_eq!(listed(&store, limit).await, want, "limit {limit}");
    }
    let entry = store
        .attention(&t("th"), &r("r10"))
        .await
        .expect("attention");
    assert_eq!(entry.as_deref(), Some(&b"ten"[..]));
    for run in ["closed", "finished", "deleted"] {
        let entry = store.attention(&t("th"), &r(run)).await.expect("attention");
        assert_eq!(entry, None, "{run}");
    }
    let e = store.claim(&t("th"), &r("r1")).await.expect("claim");
    store
        .finish_run(&t("th"), &r("r1"), e)
        .await
        .expect("finish after reopen");
    assert_eq!(listed(&store, 1000).await, want[1..].to_vec());
}

/// A database written before the index existed (only thread keys, written here with RocksDB
/// directly) opens, has an empty index, lists its threads, and indexes its runs' next
/// commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_before_the_index_opens_and_gains_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let db = rocksdb::DB::open(&opts, &path).expect("raw open");
        db.put(b"th\0run:r", br#"{"epoch":1}"#).expect("put");
        db.put(b"th\0checkpoint:r:0:x", b"0").expect("put");
        db.put(b"th\0checkpoint:r:latest", b"0").expect("put");
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("open an old database");
    assert_eq!(listed(&store, 1000).await, Vec::new());
    assert_eq!(store.attention(&t("th"), &r("r")).await.expect("get"), None);
    let c = step_commit("th", "r", Epoch(1), 1, open_entry("resumed"));
    store.commit(&c).await.expect("commit under the old claim");
    assert_eq!(listed(&store, 1000).await, pairs(&[("th/r", "resumed")]));
    let threads = store.list_threads(None, 100).await.expect("list_threads");
    assert_eq!(threads.threads, vec![t("th")]);
}

/// Thread listings stop before the index: threads with open runs are listed once each, with
/// no thread made from an index key, at every page size; a thread whose runs were all deleted
/// is gone, index entry and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_listings_do_not_see_the_index() {
    let (_dir, store) = common::open();
    for th in ["a", "b", "c"] {
        let e = store.claim(&t(th), &r("r")).await.expect("claim");
        let c = step_commit(th, "r", e, 0, open_entry("open"));
        store.commit(&c).await.expect("commit");
    }
    for limit in [100, 1] {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = store
                .list_threads(cursor.as_deref(), limit)
                .await
                .expect("list_threads");
            all.extend(page.threads.into_iter().map(|t| t.to_string()));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(all, ["a", "b", "c"], "limit {limit}");
    }
    store
        .delete_run(&t("c"), &r("r"))
        .await
        .expect("delete_run");
    let page = store.list_threads(None, 100).await.expect("list_threads");
    assert_eq!(page.threads, vec![t("a"), t("b")]);
    assert_eq!(
        listed(&store, 1000).await,
        pairs(&[("a/r", "open"), ("b/r", "open")])
    );
}

const CHILD_ENV: &str = "AFK_ROCKSDB_ATTENTION_CHILD";
const RUNS: usize = 4;
const ACKS_BEFORE_KILL: usize = 150;

/// What the commit of `step` does to the index: every third step closes the run, the others
/// open it with the step as entry.
fn attention_at(step: u64) -> Option<Attention> {
    if step % 3 == 2 {
        Some(Attention::Closed)
    } else {
        open_entry(&step.to_string())
    }
}

/// The libtest name of the crash test, for the child to run it alone.
fn crash_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::a_killed_writer_leaves_each_entry_with_its_commit")
}

#[test]
fn a_killed_writer_leaves_each_entry_with_its_commit() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        crash_child(Path::new(&path));
        std::process::exit(0);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let acked = run_and_kill_child(&path);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(check_after_crash(&path, &acked));
}

fn crash_child(path: &Path) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = RocksDbStore::open(RocksDbConfig::new(path)).expect("child opens");
        assert!(store.capabilities().durable);
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready").expect("stdout");
        out.flush().expect("stdout");
        drop(out);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tasks = Vec::new();
        for i in 0..RUNS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let run = format!("run_{i}");
                let epoch = store.claim(&t("crash"), &r(&run)).await.expect("claim");
                let mut step = 0u64;
                while Instant::now() < deadline {
                    let c = step_commit("crash", &run, epoch, step, attention_at(step));
                    store.commit(&c).await.expect("commit");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {run} {step}").expect("stdout");
                    out.flush().expect("stdout");
                    step += 1;
                }
            }));
        }
        for task in tasks {
            task.await.expect("writer task");
        }
    });
}

/// Start the writer child, kill it with SIGKILL after [`ACKS_BEFORE_KILL`] acknowledged
/// commits, and return the highest acknowledged step of each run.
fn run_and_kill_child(path: &Path) -> BTreeMap<String, u64> {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            &crash_test_name(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn writer child");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    while !lines
        .next()
        .expect("child output")
        .expect("read child")
        .ends_with("ready")
    {}
    let mut acked = BTreeMap::new();
    let mut record = |line: &str| {
        let mut parts = line.split(' ');
        if let (Some("ack"), Some(run), Some(step), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
            && let Ok(step) = step.parse::<u64>()
        {
            let top = acked.entry(run.to_owned()).or_insert(step);
            *top = (*top).max(step);
            return true;
        }
        false
    };
    for _ in 0..ACKS_BEFORE_KILL {
        let line = lines.next().expect("child stopped early").expect("read");
        assert!(record(&line), "unexpected child output {line:?}");
    }
    child.kill().expect("kill -9 the child");
    assert!(
        !child.wait().expect("wait").success(),
        "the child was killed"
    );
    for line in lines.map_while(Result::ok) {
        record(&line);
    }
    assert_eq!(
        acked.len(),
        RUNS,
        "every run acknowledged commits: {acked:?}"
    );
    acked
}

/// After the crash, each run's entry is the one its pointer's commit carried (none for a
/// closing step), and the listing agrees with the point reads.
async fn check_after_crash(path: &Path, acked: &BTreeMap<String, u64>) {
    let store = RocksDbStore::open(RocksDbConfig::new(path)).expect("reopen after kill -9");
    let mut want = Vec::new();
    for (run, top) in acked {
        let latest = common::get(&store, "crash", &format!("checkpoint:{run}:latest"))
            .await
            .expect("pointer");
        let latest: u64 = latest.parse().expect("decimal step");
        assert!(latest >= *top, "{run}: pointer {latest} behind ack {top}");
        let entry = store.attention(&t("crash"), &r(run)).await.expect("get");
        let entry = entry.map(|e| String::from_utf8(e).expect("utf8"));
        let expected = match attention_at(latest) {
            Some(Attention::Open(e)) => Some(String::from_utf8(e).expect("utf8")),
            _ => None,
        };
        assert_eq!(
            entry, expected,
            "{run}: the entry does not match the commit of the pointer (step {latest})"
        );
        if let Some(e) = expected {
            want.push((format!("crash/{run}"), e));
        }
    }
    assert_eq!(listed(&store, 1000).await, want);
    eprintln!("attention crash: entries of {RUNS} runs match their pointers after kill -9");
}
