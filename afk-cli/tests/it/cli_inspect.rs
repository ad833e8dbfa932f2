//! `runs`, `show`, `timeline`, `verify` on a demo state and on a fixture loaded into RocksDB;
//! `verify` catching broken states.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use afk::backend::rocksdb::{RocksDbConfig, RocksDbStore};
use afk::{
    RunId, ThreadId,
    store::{Commit, Store},
};
use common::{afk_in, corpus, line, numbers, rocks};

const THREAD: &str = "afk-demo";
const RUN: &str = "demo-order-42";

fn demo_state(dir: &std::path::Path, crash_after: &str) -> String {
    let store = rocks(&dir.join("db"));
    let out = afk_in(
        dir,
        &["demo", "--store", &store, "--crash-after", crash_after],
    );
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    store
}

fn with_db<T>(dir: &std::path::Path, f: impl AsyncFnOnce(&RocksDbStore) -> T) -> T {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).unwrap();
    rt.block_on(f(&db))
}

#[test]
fn inspect_a_demo_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo_state(dir.path(), "12");
    let s = ["--store", store.as_str(), "--thread", THREAD];

    let runs = afk_in(dir.path(), &[&["runs"][..], &s[..]].concat());
    assert_eq!(runs.code, Some(0), "{}", runs.stderr);
    assert_eq!(runs.stdout.lines().count(), 2, "{}", runs.stdout);
    let row: Vec<&str> = runs
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..5],
        [RUN, "completed", "3", "run_terminal", "v2"],
        "{}",
        runs.stdout
    );

    let show = afk_in(
        dir.path(),
        &[&["show"][..], &s[..], &["--run", RUN]].concat(),
    );
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(line(&show.stdout, "result:").contains("Order 42 is confirmed"));
    assert_eq!(numbers(line(&show.stdout, "counters:")), [3, 3, 2]);
    assert_eq!(numbers(line(&show.stdout, "transcript:"))[..2], [7, 3]);

    let json = afk_in(
        dir.path(),
        &[&["show"][..], &s[..], &["--run", RUN, "--json"]].concat(),
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["latest"]["phase"], "run_terminal");
    assert_eq!(v["snapshot"]["payload"]["llm_calls"], 3);

    let tl = afk_in(
        dir.path(),
        &[&["timeline"][..], &s[..], &["--run", RUN]].concat(),
    );
    assert_eq!(tl.code, Some(0), "{}", tl.stderr);
    let lines: Vec<&str> = tl.stdout.lines().collect();
    assert!(lines[0].contains("run_started"), "{}", tl.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("effect call_charge  charge_card  result ok"))
    );
    let pos = |n: &str| lines.iter().position(|l| l.contains(n)).unwrap();
    assert!(pos("pre_tool_batch") < pos("effect call_charge"));
    assert!(pos("effect call_charge") < pos("post_tool_batch"));
    assert!(lines.iter().filter(|l| l.contains("run_terminal")).count() == 1);

    let verify = afk_in(dir.path(), &[&["verify"][..], &s[..]].concat());
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
    assert!(verify.stdout.contains(&format!("ok {RUN}")));
}

#[test]
fn inspect_a_fixture_loaded_into_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let store = rocks(&dir.path().join("db"));
    let file = corpus().join("b-crash-k33-effect-s2-call_b_3.json");
    let load = afk_in(
        dir.path(),
        &[
            "fixtures",
            "load",
            "--store",
            &store,
            "--thread",
            "fx",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(load.code, Some(0), "{}", load.stderr);
    let s = ["--store", store.as_str(), "--thread", "fx"];
    let runs = afk_in(dir.path(), &[&["runs"][..], &s[..]].concat());
    let row: Vec<&str> = runs
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..3],
        ["run_scenario_b", "in_progress", "2"],
        "{}",
        runs.stdout
    );
    assert!(runs.stdout.contains("  v1  "), "{}", runs.stdout);
    let show = afk_in(
        dir.path(),
        &[&["show"][..], &s[..], &["--run", "run_scenario_b"]].concat(),
    );
    assert!(
        show.stdout.contains("messages inline (v1)"),
        "{}",
        show.stdout
    );
    let tl = afk_in(
        dir.path(),
        &[&["timeline"][..], &s[..], &["--run", "run_scenario_b"]].concat(),
    );
    assert!(tl.stdout.contains("effect call_b_3"), "{}", tl.stdout);
    let verify = afk_in(dir.path(), &[&["verify"][..], &s[..]].concat());
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
}

#[test]
fn verify_catches_a_missing_record_and_a_corrupt_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo_state(dir.path(), "12");
    let s = ["verify", "--store", store.as_str(), "--thread", THREAD];
    let (thread, run) = (ThreadId::new(THREAD).unwrap(), RunId::new(RUN).unwrap());

    // Corrupt one transcript entry (a message edited, digest left as it was).
    with_db(dir.path(), async |db| {
        let key = afk::keys::messages_key(&run, 0);
        let raw = db.get(&thread, &key).await.unwrap().unwrap();
        let edited = String::from_utf8(raw)
            .unwrap()
            .replacen("BOOK-42", "BOOK-99", 1);
        assert!(edited.contains("BOOK-99"));
        let epoch = db.claim(&thread, &run).await.unwrap();
        db.commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: vec![(key, edited.into_bytes())],
            latest: None,
            attention: None,
        })
        .await
        .unwrap();
    });
    let out = afk_in(dir.path(), &s);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        line(&out.stdout, "PROBLEM").contains("digest"),
        "{}",
        out.stdout
    );

    // Delete the record the latest pointer copies.
    with_db(dir.path(), async |db| {
        db.delete(&thread, &[format!("checkpoint:{RUN}:3:run_terminal")])
            .await
            .unwrap();
    });
    let out = afk_in(dir.path(), &s);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "latest points to checkpoint:demo-order-42:3:run_terminal, which does not exist"
        ),
        "{}",
        out.stdout
    );
    assert_eq!(numbers(line(&out.stdout, "run(s) checked")), [1, 2, 0]);
}

#[test]
fn verify_reports_an_intent_without_result_as_uncertain() {
    let dir = tempfile::tempdir().unwrap();
    // Crash after the charge's intent, before its result: resume stops with EffectUncertain.
    let store = demo_state(dir.path(), "10");
    let out = afk_in(
        dir.path(),
        &["verify", "--store", &store, "--thread", THREAD],
    );
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    assert!(
        line(&out.stdout, "uncertain").contains("call_charge"),
        "{}",
        out.stdout
    );
    let counts = numbers(line(&out.stdout, "run(s) checked"));
    assert_eq!(counts[..2], [1, 0], "{}", out.stdout);
    assert!(counts[2] >= 1, "{}", out.stdout);
}

/// A mistyped RocksDB path is an error for every command that only inspects or changes what is
/// there, and nothing is created at it; the default store (`./.afk-data`) is not created by
/// looking either. `import` still creates the store it fills.
#[test]
fn commands_on_a_path_without_a_database_fail_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-db");
    let store = rocks(&missing);
    let t = ["--thread", THREAD];
    let r = ["--run", RUN];
    let commands: Vec<Vec<&str>> = vec![
        vec!["threads"],
        [&["runs"][..], &t[..]].concat(),
        [&["show"][..], &t[..], &r[..]].concat(),
        [&["timeline"][..], &t[..], &r[..]].concat(),
        [&["verify"][..], &t[..]].concat(),
        [&["export"][..], &t[..]].concat(),
        [&["migrate"][..], &t[..]].concat(),
        [&["prune"][..], &t[..], &r[..]].concat(),
        [&["demo", "--resume"][..]].concat(),
    ];
    for cmd in &commands {
        let args = [&cmd[..], &["--store", store.as_str()][..]].concat();
        let out = afk_in(dir.path(), &args);
        assert_eq!(out.code, Some(1), "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("invalid_config") && out.stderr.contains("no RocksDB database"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
    let out = afk_in(dir.path(), &["runs", "--thread", THREAD]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("no RocksDB database"), "{}", out.stderr);
    assert!(!dir.path().join(".afk-data").exists());

    // An export of a demo run imports into a store that does not exist yet.
    let src = demo_state(dir.path(), "12");
    let file = dir.path().join("run.jsonl");
    let file = file.to_str().unwrap();
    let out = afk_in(
        dir.path(),
        &[
            &["export", "--store", &src, "--out", file][..],
            &t[..],
            &r[..],
        ]
        .concat(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = afk_in(dir.path(), &["import", "--store", &store, file]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let out = afk_in(
        dir.path(),
        &[&["runs", "--store", &store][..], &t[..]].concat(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains(RUN), "{}", out.stdout);
}

/// A file `export` cannot write or `import` cannot read or parse is the command's argument
/// (`invalid_input`, "check the command's arguments"), not the store ("did not answer"); a
/// file that cannot be imported creates no store.
#[test]
fn unusable_export_and_import_files_are_argument_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = demo_state(dir.path(), "12");
    let t = ["--thread", THREAD];
    let into_dir = dir.path().to_str().unwrap();
    let out = afk_in(
        dir.path(),
        &[&["export", "--store", &src, "--out", into_dir][..], &t[..]].concat(),
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("invalid_input"), "{}", out.stderr);
    assert!(
        out.stderr.contains("check the command's arguments"),
        "{}",
        out.stderr
    );

    let target = dir.path().join("new-db");
    let store = rocks(&target);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "not json\n").unwrap();
    let missing = dir.path().join("missing.jsonl");
    for file in [&bad, &missing] {
        let out = afk_in(
            dir.path(),
            &["import", "--store", &store, file.to_str().unwrap()],
        );
        assert_eq!(out.code, Some(1), "{}", out.stderr);
        assert!(out.stderr.contains("invalid_input"), "{}", out.stderr);
        assert!(
            !target.exists(),
            "a failed import created {}",
            target.display()
        );
    }
}
