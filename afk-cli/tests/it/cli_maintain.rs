//! `migrate` (v1 fixture state to v2, resumed to the same result) and `prune`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::path::Path;
use std::sync::Arc;

use afk::backend::rocksdb::{RocksDbConfig, RocksDbStore};
use afk::runner::fixture_check::{resume_fixture, scripted_tools};
use afk::{ThreadId, store::Store};
use common::{afk_in, corpus, line, numbers, rocks};
use serde_json::{Value, json};

const FIXTURE: &str = "b-crash-k42-s3-pre_llm.json";

fn fixture(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(corpus().join(name)).unwrap()).unwrap()
}

fn load(dir: &Path, db: &str, thread: &str, name: &str) {
    let file = corpus().join(name);
    let out = afk_in(
        dir,
        &[
            "fixtures",
            "load",
            "--store",
            &rocks(&dir.join(db)),
            "--thread",
            thread,
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// Resume the fixture's run stored in `db` with the fixture's script: the essence of the
/// result, the model calls and tool executions of the resume (`FixtureResume::summary`).
fn resume(db: &Path, f: &Value) -> Value {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store: Arc<dyn Store> = Arc::new(RocksDbStore::open(RocksDbConfig::new(db)).unwrap());
        let thread = ThreadId::new("fx").unwrap();
        let summary = resume_fixture(f, store, &thread, &scripted_tools())
            .await
            .unwrap()
            .summary();
        assert_eq!(summary["outcome"], "completed", "{summary}");
        summary
    })
}

#[test]
fn migrate_turns_a_v1_state_into_v2_that_resumes_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    load(dir.path(), "v1", "fx", FIXTURE);
    load(dir.path(), "v2", "fx", FIXTURE);
    let s = rocks(&dir.path().join("v2"));
    let dry = afk_in(
        dir.path(),
        &["migrate", "--store", &s, "--thread", "fx", "--dry-run"],
    );
    assert!(dry.stdout.contains("would migrate"), "{}", dry.stdout);
    let runs = afk_in(dir.path(), &["runs", "--store", &s, "--thread", "fx"]);
    assert!(
        runs.stdout.contains("  v1  "),
        "dry run wrote nothing: {}",
        runs.stdout
    );

    let out = afk_in(dir.path(), &["migrate", "--store", &s, "--thread", "fx"]);
    assert_eq!(out.code, Some(0), "{}", out.stdout);
    let n = numbers(line(&out.stdout, "migrated"));
    let f = fixture(FIXTURE);
    let records = f["state"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("checkpoint:"))
        .count() as u64;
    assert_eq!(
        n[0], records,
        "every checkpoint record rewritten: {}",
        out.stdout
    );
    assert!(
        n[3] >= 2,
        "several snapshots share a chained log: {}",
        out.stdout
    );
    assert_eq!(n[4], 0, "{}", out.stdout);
    let runs = afk_in(dir.path(), &["runs", "--store", &s, "--thread", "fx"]);
    assert!(runs.stdout.contains("  v2  "), "{}", runs.stdout);
    let show = afk_in(
        dir.path(),
        &[
            "show",
            "--store",
            &s,
            "--thread",
            "fx",
            "--run",
            "run_scenario_b",
        ],
    );
    assert!(
        line(&show.stdout, "transcript:").contains("log entries"),
        "{}",
        show.stdout
    );
    // The tool records moved into the log; `show` finds the same ones there.
    let v1 = rocks(&dir.path().join("v1"));
    let args = |s: &str| {
        [
            "show".to_owned(),
            "--store".into(),
            s.to_owned(),
            "--thread".into(),
            "fx".into(),
            "--run".into(),
            "run_scenario_b".into(),
        ]
    };
    let show_v1 = afk_in(dir.path(), &args(&v1).each_ref().map(String::as_str));
    let tools = |out: &str| out[out.find("tool records:").unwrap()..].to_owned();
    assert!(
        !line(&show.stdout, "tool records:").ends_with(" 0"),
        "{}",
        show.stdout
    );
    assert_eq!(
        tools(&show.stdout)
            .lines()
            .take_while(|l| !l.starts_with("final"))
            .collect::<Vec<_>>(),
        tools(&show_v1.stdout)
            .lines()
            .take_while(|l| !l.starts_with("final"))
            .collect::<Vec<_>>()
    );
    let verify = afk_in(dir.path(), &["verify", "--store", &s, "--thread", "fx"]);
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
    let again = afk_in(dir.path(), &["migrate", "--store", &s, "--thread", "fx"]);
    assert!(
        again.stdout.contains("nothing to do"),
        "idempotent: {}",
        again.stdout
    );

    let from_v1 = resume(&dir.path().join("v1"), &f);
    let from_v2 = resume(&dir.path().join("v2"), &f);
    assert_eq!(from_v1, from_v2);
    assert_eq!(from_v2["result"]["text"], f["expect"]["final_text"]);
    assert_eq!(
        from_v2["resume_llm_calls"],
        f["expect"]["llm_calls_during_resume"]
    );
}

fn latest_ts(name: &str) -> u64 {
    let f = fixture(name);
    let key = format!("checkpoint:{}:latest", f["run_id"].as_str().unwrap());
    f["state"][key]["timestamp_ms"].as_u64().unwrap()
}

#[test]
fn prune_deletes_what_it_says_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        "a-crash-k15-effect-s1-call_a_1.json",
        "b-crash-k33-effect-s2-call_b_3.json",
    );
    load(dir.path(), "db", "p", a);
    load(dir.path(), "db", "p", b);
    load(dir.path(), "db", "other", a);
    let s = rocks(&dir.path().join("db"));
    let (older, newer) = if latest_ts(a) < latest_ts(b) {
        ("run_scenario_a", "run_scenario_b")
    } else {
        ("run_scenario_b", "run_scenario_a")
    };
    let runs = |t: &str| afk_in(dir.path(), &["runs", "--store", &s, "--thread", t]).stdout;
    assert_eq!(runs("p").lines().count(), 3, "a header and two runs");

    // Both runs crashed part way (uncertain or in progress): nothing without --force.
    let prune = |args: &[&str]| {
        let mut all = vec!["prune", "--store", &s, "--thread", "p"];
        all.extend_from_slice(args);
        afk_in(dir.path(), &all)
    };
    let unforced = prune(&["--keep-last", "1"]);
    assert_eq!(unforced.code, Some(0), "{}", unforced.stderr);
    assert!(
        unforced.stdout.contains(&format!("skipped {older}")),
        "{}",
        unforced.stdout
    );
    assert!(
        !unforced.stdout.contains("deleted run_"),
        "{}",
        unforced.stdout
    );
    let refused = prune(&["--run", older]);
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(
        runs("p").lines().count(),
        3,
        "nothing deleted without --force"
    );

    let dry = prune(&["--keep-last", "1", "--dry-run", "--force"]);
    assert!(
        dry.stdout.contains(&format!("would delete {older}")),
        "{}",
        dry.stdout
    );
    assert_eq!(runs("p").lines().count(), 3, "dry run deletes nothing");

    let out = prune(&["--keep-last", "1", "--force", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["kept"][0]["run"], json!(newer), "{doc}");
    assert_eq!(doc["deleted"][0]["run"], json!(older), "{doc}");
    let f = fixture(if older == "run_scenario_a" { a } else { b });
    // Every loaded key plus the fence.
    assert_eq!(
        doc["deleted"][0]["keys"],
        json!(f["state"].as_object().unwrap().len() as u64 + 1)
    );
    let left = runs("p");
    assert!(left.lines().nth(1).unwrap().starts_with(newer), "{left}");
    assert_eq!(left.lines().count(), 2);
    assert!(
        runs("other")
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("run_scenario_a"),
        "other threads untouched"
    );

    let out = prune(&["--run", newer, "--force"]);
    assert!(
        out.stdout.contains(&format!("deleted {newer}")),
        "{}",
        out.stdout
    );
    assert!(runs("p").contains("no runs"), "{}", runs("p"));
    let missing = prune(&["--run", newer, "--force"]);
    assert_eq!(missing.code, Some(1));
    let verify = afk_in(dir.path(), &["verify", "--store", &s, "--thread", "other"]);
    assert_eq!(verify.code, Some(0), "{}", verify.stdout);
}
