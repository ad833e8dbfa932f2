//! Crash durability and the one-process rule, with real processes.
//!
//! The test re-runs its own binary, filtered to this one test, with
//! `AFK_ROCKSDB_WRITER_CHILD=<db path>`: in that process the test is the writer child, which
//! streams sync commits on several runs and prints `ack <run> <step>` after each acknowledged
//! one, and exits without returning to the harness.
//!
//! The parent checks that a second process cannot open the database while the child holds it
//! (`Unavailable` naming the `LOCK` file), `kill -9`s the child mid-stream, reopens, and checks
//! that every acknowledged commit is there and that no latest pointer refers to a missing
//! record.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use afk_core::store::StoreExt;
use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Store},
};
use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

const CHILD_ENV: &str = "AFK_ROCKSDB_WRITER_CHILD";
const RUNS: usize = 4;
const ACKS_BEFORE_KILL: usize = 200;

fn run_name(i: usize) -> String {
    format!("run_{i}")
}

fn thread() -> ThreadId {
    ThreadId::new("thread_durability").expect("valid thread id")
}

fn record_key(run: &str, step: u64) -> String {
    format!("checkpoint:{run}:{step}:post_tool")
}

/// A value that names its run and step, padded so each commit carries a few KiB.
fn record_value(run: &str, step: u64) -> Vec<u8> {
    let mut v = format!("{run}:{step}:").into_bytes();
    v.resize(4096, b'a' + (step % 26) as u8);
    v
}

/// The libtest name of the test the child runs: its path in the test binary, without the
/// binary's crate name (`durability::kill_9_…`).
fn test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::kill_9_keeps_every_acknowledged_commit_and_a_second_process_is_refused")
}

#[test]
fn kill_9_keeps_every_acknowledged_commit_and_a_second_process_is_refused() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        writer_child(Path::new(&path));
        // The child is killed by the parent; should it ever get here, leave without the
        // harness printing anything more on the parent's pipe.
        std::process::exit(0);
    }
    parent();
}

fn writer_child(path: &Path) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = RocksDbStore::open(RocksDbConfig::new(path)).expect("child opens the database");
        assert!(store.capabilities().durable);
        // Written to the real stdout (not `println!`, which the harness may capture).
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready").expect("stdout");
        out.flush().expect("stdout");
        drop(out);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tasks = Vec::new();
        for i in 0..RUNS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let run = RunId::new(run_name(i)).expect("valid run id");
                let epoch = store.claim(&thread(), &run).await.expect("claim");
                let mut step = 0u64;
                // Bounded so an orphaned child cannot write forever.
                while Instant::now() < deadline {
                    let commit = Commit {
                        thread: thread(),
                        run: run.clone(),
                        epoch,
                        puts: vec![(
                            record_key(run.as_str(), step),
                            record_value(run.as_str(), step),
                        )],
                        latest: Some(step.to_string().into_bytes()),
                        attention: None,
                    };
                    store.commit(&commit).await.expect("commit");
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {run} {step}").expect("stdout");
                    out.flush().expect("stdout");
                    step += 1;
                }
            }));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
    });
}

fn parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(["--exact", &test_name(), "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn writer child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut lines = BufReader::new(stdout).lines();
    // The harness prints its own lines before the test body says "ready" (on the same line as
    // the harness's unterminated `test … ... `).
    loop {
        let line = lines.next().expect("child output").expect("read child");
        if line.ends_with("ready") {
            break;
        }
    }

    // A second process may not open the database while the child holds it.
    let err =
        RocksDbStore::open(RocksDbConfig::new(&path)).expect_err("second process must be refused");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    eprintln!("second process: {err}");
    let lock = path.join("LOCK").display().to_string();
    assert!(err.message().contains(&lock), "{}", err.message());
    assert!(err.message().contains("one process"), "{}", err.message());

    let mut acked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut count = 0;
    let record = |line: &str, acked: &mut BTreeMap<String, Vec<u64>>| {
        let mut parts = line.split(' ');
        if let (Some("ack"), Some(run), Some(step), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
            && let Ok(step) = step.parse::<u64>()
        {
            acked.entry(run.to_owned()).or_default().push(step);
            return true;
        }
        false
    };
    while count < ACKS_BEFORE_KILL {
        let line = lines
            .next()
            .expect("child stopped early")
            .expect("read child");
        assert!(
            record(&line, &mut acked),
            "unexpected child output {line:?}"
        );
        count += 1;
    }
    child.kill().expect("kill -9 the child"); // SIGKILL on Unix
    let status = child.wait().expect("wait for child");
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );
    // Acks already in the pipe were acknowledged before the kill; a torn last line is not one.
    for line in lines.map_while(Result::ok) {
        if record(&line, &mut acked) {
            count += 1;
        }
    }
    assert_eq!(
        acked.len(),
        RUNS,
        "every run acknowledged commits: {acked:?}"
    );

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("reopen after kill -9");
        let th = thread();
        for (run, steps) in &acked {
            let keys: Vec<String> = steps.iter().map(|s| record_key(run, *s)).collect();
            let got = store.get_many(&th, &keys).await.expect("get_many");
            for (step, value) in steps.iter().zip(got) {
                assert_eq!(
                    value,
                    Some(record_value(run, *step)),
                    "acknowledged {run} step {step} lost"
                );
            }
            let latest = store
                .get(&th, &format!("checkpoint:{run}:latest"))
                .await
                .expect("get latest")
                .expect("latest pointer exists");
            let latest: u64 = std::str::from_utf8(&latest)
                .expect("utf8")
                .parse()
                .expect("decimal step");
            let max_acked = steps.iter().copied().max().expect("some acks");
            assert!(
                latest >= max_acked,
                "{run}: pointer {latest} behind acknowledged {max_acked}"
            );
            let pointed = store
                .get(&th, &record_key(run, latest))
                .await
                .expect("get record");
            assert_eq!(
                pointed,
                Some(record_value(run, latest)),
                "{run}: pointer to a missing record"
            );
            // Every record on disk is whole, and none lies beyond the pointer.
            let prefix = format!("checkpoint:{run}:");
            let keys = store.list_all(&th, &prefix).await.expect("list");
            let mut records = 0;
            for key in keys.iter().filter(|k| !k.ends_with(":latest")) {
                let step: u64 = key
                    .split(':')
                    .nth(2)
                    .and_then(|s| s.parse().ok())
                    .expect("step in key");
                assert!(step <= latest, "{key} beyond the latest pointer {latest}");
                records += 1;
            }
            assert_eq!(
                records as u64,
                latest + 1,
                "{run}: records 0..={latest} all present"
            );
        }
    });
    eprintln!("durability: {count} acknowledged commits over {RUNS} runs survived kill -9");
}
