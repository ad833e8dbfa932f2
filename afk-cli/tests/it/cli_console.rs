//! The operator's console against RocksDB (and, behind the features, Redis and S3): `threads`
//! finds the stuck runs, `runs`, `show` and `verify --all` describe them, in tables and as
//! `--json`; `export` / `import` move a thread between stores byte for byte; `prune` spares
//! live runs; errors name the store and never its password.

#![allow(clippy::unwrap_used)]

use crate::cli_ops;
use crate::common;

use std::path::Path;

use cli_ops::{contents, paused_run, uncertain_run};
use common::{Out, afk_in};
use serde_json::{Value, json};

fn afk(dir: &Path, url: &str, args: &[&str]) -> Out {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    afk_in(dir, &all)
}

fn doc(out: &Out) -> Value {
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", out.stdout))
}

/// A completed run in `thread`.
fn completed_run(url: &str, thread: &str, run: &str) {
    uncertain_run(url, thread, run);
    let out = afk_in(
        Path::new("."),
        &[
            "--store", url, "settle", "--thread", thread, "--run", run, "--call", "c1", "--ran",
            "{}",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    cli_ops::completed(cli_ops::resume(url, thread, run, false).0);
}

/// `threads` lists the threads with the right counts, newest first; `runs`, `show` and
/// `verify --all` agree with them.
fn find_and_inspect(dir: &Path, url: &str, tag: &str) {
    let (t_stuck, t_done) = (format!("{tag}_stuck"), format!("{tag}_done"));
    completed_run(url, &t_done, "r_done");
    uncertain_run(url, &t_stuck, "r_unc");
    paused_run(url, &t_stuck, "r_paused");

    let d = doc(&afk(dir, url, &["threads", "--json"]));
    let rows = d["threads"].as_array().unwrap();
    let row = |t: &str| rows.iter().find(|r| r["thread"] == json!(t)).cloned();
    let stuck = row(&t_stuck).unwrap_or_else(|| panic!("{t_stuck} not listed: {d}"));
    assert_eq!(
        (
            &stuck["runs"],
            &stuck["paused"],
            &stuck["uncertain"],
            &stuck["failed"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(0)),
        "{stuck}"
    );
    let done = row(&t_done).unwrap_or_else(|| panic!("{t_done} not listed: {d}"));
    assert_eq!((&done["runs"], &done["paused"]), (&json!(1), &json!(0)));
    let pos = |t: &str| rows.iter().position(|r| r["thread"] == json!(t)).unwrap();
    assert!(pos(&t_stuck) < pos(&t_done), "newest activity first: {d}");
    let ts: Vec<u64> = rows
        .iter()
        .filter_map(|r| r["last_activity_ms"].as_u64())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]), "{ts:?}");

    let table = afk(dir, url, &["threads"]);
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    let header = table.stdout.lines().next().unwrap();
    assert!(header.starts_with("THREAD"), "{}", table.stdout);
    let line = common::line(&table.stdout, &t_stuck);
    let col = header.find("UNCERTAIN").unwrap();
    assert_eq!(
        &line[col..col + 1],
        "1",
        "aligned columns:\n{}",
        table.stdout
    );

    let runs = doc(&afk(dir, url, &["runs", "--thread", &t_stuck, "--json"]));
    let states: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["paused", "uncertain"], "{runs}");

    let show = afk(dir, url, &["show", "--thread", &t_stuck, "--run", "r_unc"]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(
        show.stdout.contains(&format!(
            "afk settle --thread {t_stuck} --run r_unc --call c1"
        )),
        "{}",
        show.stdout
    );
    let show = doc(&afk(
        dir,
        url,
        &["show", "--thread", &t_stuck, "--run", "r_unc", "--json"],
    ));
    assert_eq!(show["uncertain_calls"], json!(["c1"]), "{show}");

    let verify = doc(&afk(dir, url, &["verify", "--all", "--json"]));
    let mine: Vec<&Value> = verify["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["thread"] == json!(t_stuck) || r["thread"] == json!(t_done))
        .collect();
    assert_eq!(mine.len(), 3, "{verify}");
    assert!(mine.iter().all(|r| r["ok"] == json!(true)), "{verify}");
}

/// Export a thread from `from`, import it into `to`: the same bytes under the same keys, the
/// fence left out; the import verifies; a second import is refused and writes nothing.
fn export_import(dir: &Path, from: &str, to: &str, thread: &str) {
    completed_run(from, thread, "x_done");
    uncertain_run(from, thread, "x_unc");
    let file = dir.join(format!("{thread}.jsonl"));
    let f = file.to_str().unwrap();
    let out = afk(dir, from, &["export", "--thread", thread, "--out", f]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let imp = doc(&afk(dir, to, &["import", f, "--json"]));
    assert_eq!(imp["ok"], json!(true), "{imp}");
    let strip = |m: std::collections::BTreeMap<String, Vec<u8>>| {
        m.into_iter()
            .filter(|(k, _)| !k.starts_with("run:"))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (a, b) = (strip(contents(from, thread)), strip(contents(to, thread)));
    assert!(a.len() > 10, "{} keys only", a.len());
    assert_eq!(a, b, "the round trip changed a record");
    // And back out of the target: the same file.
    let again = dir.join(format!("{thread}-again.jsonl"));
    let out = afk(
        dir,
        to,
        &[
            "export",
            "--thread",
            thread,
            "--out",
            again.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        std::fs::read(&again).unwrap()
    );

    let before = contents(to, thread);
    let twice = afk(dir, to, &["import", f]);
    assert_eq!(twice.code, Some(1), "{}", twice.stdout);
    assert!(
        twice.stderr.contains("already has keys"),
        "{}",
        twice.stderr
    );
    assert_eq!(contents(to, thread), before);

    // A truncated file is refused before anything is written.
    let text = std::fs::read_to_string(&file).unwrap();
    let cut = dir.join("cut.jsonl");
    let keep: Vec<&str> = text.lines().take(4).collect();
    std::fs::write(&cut, keep.join("\n")).unwrap();
    let out = afk(dir, from, &["import", cut.to_str().unwrap()]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("truncated"), "{}", out.stderr);
}

/// `prune` keeps live runs without `--force`; `--dry-run` deletes nothing.
fn prune_spares_live_runs(dir: &Path, url: &str, thread: &str) {
    completed_run(url, thread, "p_done");
    uncertain_run(url, thread, "p_unc");
    paused_run(url, thread, "p_paused");
    let before = contents(url, thread);
    let dry = doc(&afk(
        dir,
        url,
        &[
            "prune",
            "--thread",
            thread,
            "--keep-last",
            "0",
            "--dry-run",
            "--json",
        ],
    ));
    assert_eq!(dry["deleted"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(dry["deleted"][0]["run"], json!("p_done"), "{dry}");
    assert_eq!(dry["skipped"].as_array().unwrap().len(), 2, "{dry}");
    assert_eq!(contents(url, thread), before, "a dry run deleted");
    let refused = afk(
        dir,
        url,
        &["prune", "--thread", thread, "--run", "p_paused"],
    );
    assert_eq!(refused.code, Some(1));
    assert!(refused.stderr.contains("paused"), "{}", refused.stderr);
    assert_eq!(contents(url, thread), before);
    let done = doc(&afk(
        dir,
        url,
        &["prune", "--thread", thread, "--keep-last", "0", "--json"],
    ));
    assert_eq!(done["deleted"][0]["run"], json!("p_done"), "{done}");
    let left = contents(url, thread);
    assert!(
        left.keys().all(|k| !k.contains("p_done")),
        "{:?}",
        left.keys()
    );
    assert!(left.keys().any(|k| k.contains("p_unc")));
    let forced = doc(&afk(
        dir,
        url,
        &[
            "prune",
            "--thread",
            thread,
            "--keep-last",
            "0",
            "--force",
            "--json",
        ],
    ));
    assert_eq!(forced["deleted"].as_array().unwrap().len(), 2, "{forced}");
    assert!(contents(url, thread).is_empty());
}

fn console(url: &str, tag: &str) {
    let dir = tempfile::tempdir().unwrap();
    find_and_inspect(dir.path(), url, tag);
    prune_spares_live_runs(dir.path(), url, &format!("{tag}_prune"));
}

#[test]
fn console_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    console(&common::rocks(&dir.path().join("db")), "c");
}

#[test]
fn export_import_rocksdb_to_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        common::rocks(&dir.path().join("a")),
        common::rocks(&dir.path().join("b")),
    );
    export_import(dir.path(), &a, &b, "moved");
}

#[test]
fn errors_name_the_store_and_hide_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?password=hunter2", common::rocks(&dir.path().join("db")));
    let out = afk(
        dir.path(),
        &url,
        &["show", "--thread", "t", "--run", "r", "--json"],
    );
    assert_eq!(out.code, Some(1));
    assert!(!out.stderr.contains("hunter2") && !out.stdout.contains("hunter2"));
    let url = common::rocks(&dir.path().join("db"));
    // An empty store (inspecting commands do not create one).
    drop(afk::backend::rocksdb::RocksDbStore::from_url(&url).unwrap());
    let out = afk(
        dir.path(),
        &url,
        &["show", "--thread", "t", "--run", "r", "--json"],
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], json!("not_found"), "{v}");
    assert_eq!(v["error"]["key"], json!("checkpoint:r:latest"), "{v}");
    assert_eq!(v["error"]["store"], json!(url), "{v}");
    assert!(out.stderr.contains("what to do:"), "{}", out.stderr);
    let usage = afk(dir.path(), &url, &["threads", "--bogus"]);
    assert_eq!(usage.code, Some(2));
    // The memory store of a fresh process holds nothing: a clean, empty answer.
    let d = doc(&afk(dir.path(), "memory://", &["threads", "--json"]));
    assert_eq!(d["threads"], json!([]));
}

#[cfg(feature = "redis")]
#[test]
fn console_on_redis() {
    if let Some(url) = cli_ops::require_env("AFK_TEST_REDIS_URL") {
        let url = format!("{url}?prefix={}", cli_ops::unique("cons"));
        console(&url, "c");
    }
}

#[cfg(feature = "redis")]
#[test]
fn console_on_redis_cluster() {
    if let Some(urls) = cli_ops::require_env("AFK_TEST_REDIS_CLUSTER_URLS") {
        let url = cluster_url(&urls);
        console(&url, "c");
    }
}

/// `redis+cluster://h1:p1,h2:p2?prefix=…` from the test's comma-separated node URLs.
#[cfg(feature = "redis")]
fn cluster_url(urls: &str) -> String {
    let hosts: Vec<&str> = urls
        .split(',')
        .map(|u| u.trim().trim_start_matches("redis://"))
        .collect();
    format!(
        "redis+cluster://{}?prefix={}",
        hosts.join(","),
        cli_ops::unique("cons")
    )
}

#[cfg(feature = "s3")]
#[test]
fn console_on_s3() {
    if let Some(url) = cli_ops::s3_url() {
        console(&url, "c");
    }
}

#[cfg(feature = "s3")]
#[test]
fn export_from_rocksdb_import_into_s3() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(s3) = cli_ops::s3_url() {
        export_import(
            dir.path(),
            &common::rocks(&dir.path().join("a")),
            &s3,
            "moved",
        );
    }
}

#[cfg(all(feature = "s3", feature = "redis"))]
#[test]
fn export_from_s3_import_into_redis() {
    let dir = tempfile::tempdir().unwrap();
    if let (Some(s3), Some(redis)) = (
        cli_ops::s3_url(),
        cli_ops::require_env("AFK_TEST_REDIS_URL"),
    ) {
        let redis = format!("{redis}?prefix={}", cli_ops::unique("move"));
        export_import(dir.path(), &s3, &redis, "moved");
    }
}
