//! The binary's tracing subscriber: `-v` / `RUST_LOG` bring the libraries' events to stderr,
//! and stdout stays the command's answer alone (one JSON document with `--json`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{afk_env, afk_in, rocks};
use serde_json::Value;

/// A store with a run stopped on an uncertain at-most-once call (the demo's charge).
fn stuck_store(dir: &std::path::Path) -> String {
    let url = rocks(&dir.join("db"));
    let out = afk_in(dir, &["--store", &url, "demo", "--crash-after", "10"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    url
}

/// An empty RocksDB store (the inspecting commands do not create one).
fn empty_store(dir: &std::path::Path) -> String {
    let url = rocks(&dir.join("db"));
    drop(afk::backend::rocksdb::RocksDbStore::from_url(&url).unwrap());
    url
}

#[test]
fn verbose_json_logs_on_stderr_and_prints_one_document_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let url = empty_store(dir.path());
    let out = afk_in(dir.path(), &["--store", &url, "--json", "-v", "threads"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("store opened"), "{}", out.stderr);
    assert!(out.stderr.contains("INFO"), "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).expect("stdout is one JSON document");
    assert!(doc["threads"].is_array(), "{doc}");
    // Without -v: warnings only, so no info line.
    let quiet = afk_in(dir.path(), &["--store", &url, "--json", "threads"]);
    assert_eq!(quiet.code, Some(0));
    assert!(!quiet.stderr.contains("store opened"), "{}", quiet.stderr);
    assert_eq!(quiet.stdout, out.stdout);
}

#[test]
fn verbosity_reaches_the_library_events() {
    let dir = tempfile::tempdir().unwrap();
    let url = stuck_store(dir.path());
    let settle = [
        "--store",
        &url,
        "--json",
        "settle",
        "--thread",
        "afk-demo",
        "--run",
        "demo-order-42",
        "--call",
        "call_charge",
        "--did-not-run",
    ];
    // `Runner::settle` (afk-core) logs the settlement at info level.
    let mut args = vec!["-v"];
    args.extend(settle);
    let out = afk_in(dir.path(), &args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("settling an uncertain effect") && out.stderr.contains("afk_core"),
        "{}",
        out.stderr
    );
    let _: Value = serde_json::from_str(&out.stdout).expect("stdout is one JSON document");
    // -vv: debug lines too (the store's capabilities, logged by the command line).
    let out = afk_in(dir.path(), &["--store", &url, "-vv", "threads"]);
    assert!(out.stderr.contains("DEBUG"), "{}", out.stderr);
    assert!(out.stderr.contains("store capabilities"), "{}", out.stderr);
    assert!(!out.stdout.contains("DEBUG"), "{}", out.stdout);
}

#[test]
fn rust_log_is_honoured_without_v() {
    let dir = tempfile::tempdir().unwrap();
    let url = empty_store(dir.path());
    let args = ["--store", &url, "threads"];
    let out = afk_env(dir.path(), &args, &[("RUST_LOG", "debug")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("store capabilities"), "{}", out.stderr);
    // Directives for one target only: the command line's own events are then filtered out.
    let out = afk_env(dir.path(), &args, &[("RUST_LOG", "afk_core=debug")]);
    assert!(!out.stderr.contains("store opened"), "{}", out.stderr);
    // A RUST_LOG that does not parse is reported, and the command still runs.
    let out = afk_env(dir.path(), &args, &[("RUST_LOG", "afk_core=loud")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("ignoring RUST_LOG"), "{}", out.stderr);
}
