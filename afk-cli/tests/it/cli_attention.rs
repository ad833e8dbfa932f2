//! `runs` and `show` with and without the store's index of runs that need attention: a store
//! without it prints exactly what it printed before the index existed (no `ENTRY OWNER LEASE`
//! columns, no `entry:` line, no `attention` field); one with it adds them for an unfinished
//! run. The binary opens RocksDB here; the display of entries themselves is tested in process
//! on the memory store (`afk-cli/src/entry_tests.rs`), since a memory store does not outlive
//! the process that opened it.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{afk_in, rocks};
use serde_json::Value;

const THREAD: &str = "afk-demo";
const RUN: &str = "demo-order-42";

fn has_index(url: &str) -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        afk::open_existing(url)
            .await
            .unwrap()
            .capabilities()
            .attention
    })
}

#[test]
fn an_unfinished_run_shows_its_entry_only_where_the_store_keeps_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    // Left uncertain: crashed after the charge's intent, the demo's resume refuses to guess.
    let demo = afk_in(
        dir.path(),
        &["demo", "--store", &url, "--crash-after", "10"],
    );
    assert_eq!(demo.code, Some(0), "{}", demo.stdout);
    let index = has_index(&url);
    let s = ["--store", url.as_str(), "--thread", THREAD];

    let runs = afk_in(dir.path(), &[&["runs"][..], &s[..]].concat());
    assert_eq!(runs.code, Some(0), "{}", runs.stderr);
    let headers: Vec<&str> = runs
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = runs
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[..2], [RUN, "uncertain"], "{}", runs.stdout);
    let json = afk_in(dir.path(), &[&["runs", "--json"][..], &s[..]].concat());
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    let run = &doc["runs"][0];
    let show = afk_in(
        dir.path(),
        &[&["show"][..], &s[..], &["--run", RUN]].concat(),
    );
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    let show_json = afk_in(
        dir.path(),
        &[&["show", "--json"][..], &s[..], &["--run", RUN]].concat(),
    );
    let show_doc: Value = serde_json::from_str(&show_json.stdout).unwrap();

    if index {
        let with = [
            "RUN",
            "STATE",
            "STEP",
            "PHASE",
            "VERSION",
            "LAST_ACTIVITY",
            "ENTRY",
            "OWNER",
            "LEASE",
            "NOTE",
        ];
        assert_eq!(headers, with, "{}", runs.stdout);
        assert!(run["attention"]["state"].is_string(), "{doc}");
        assert!(show.stdout.contains("\nentry:    "), "{}", show.stdout);
        assert!(show_doc["attention"]["state"].is_string(), "{show_doc}");
    } else {
        let without = [
            "RUN",
            "STATE",
            "STEP",
            "PHASE",
            "VERSION",
            "LAST_ACTIVITY",
            "NOTE",
        ];
        assert_eq!(headers, without, "{}", runs.stdout);
        let mut keys: Vec<&str> = run
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "phase",
                "run",
                "schema_version",
                "state",
                "step",
                "timestamp_ms",
                "uncertain_effects"
            ],
            "{doc}"
        );
        assert!(!show.stdout.contains("entry:"), "{}", show.stdout);
        assert!(show_doc.get("attention").is_none(), "{show_doc}");
    }
}
