//! `afk sweep`: deletes the runs that finished more than an age ago and nothing else; and
//! `afk import` puts what it imports into the indexes a worker and a sweep read.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{afk_in, rocks};
use serde_json::Value;

fn sweep(dir: &std::path::Path, url: &str, age: &str) -> Value {
    let out = afk_in(
        dir,
        &["sweep", "--json", "--store", url, "--older-than", age],
    );
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn runs(dir: &std::path::Path, url: &str) -> Value {
    let out = afk_in(
        dir,
        &["runs", "--json", "--store", url, "--thread", "afk-demo"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn sweep_deletes_finished_runs_past_the_age_and_keeps_an_uncertain_one() {
    let dir = tempfile::tempdir().unwrap();
    let done = rocks(&dir.path().join("done"));
    let demo = afk_in(dir.path(), &["demo", "--store", &done]);
    assert_eq!(demo.code, Some(0), "{}", demo.stdout);
    assert_eq!(runs(dir.path(), &done)["runs"][0]["state"], "completed");

    let young = sweep(dir.path(), &done, "30d");
    assert_eq!(young["deleted"], 0, "{young}");
    assert_eq!(runs(dir.path(), &done)["runs"].as_array().unwrap().len(), 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let old = sweep(dir.path(), &done, "0s");
    assert_eq!(old["deleted"], 1, "{old}");
    assert!(old["keys"].as_u64().unwrap() > 0, "{old}");
    assert_eq!(runs(dir.path(), &done)["runs"].as_array().unwrap().len(), 0);

    // Left uncertain (crashed after the charge's intent): never swept.
    let open = rocks(&dir.path().join("open"));
    let demo = afk_in(
        dir.path(),
        &["demo", "--store", &open, "--crash-after", "10"],
    );
    assert_eq!(demo.code, Some(0), "{}", demo.stdout);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let kept = sweep(dir.path(), &open, "0s");
    assert_eq!(kept["deleted"], 0, "{kept}");
    assert_eq!(runs(dir.path(), &open)["runs"][0]["state"], "uncertain");

    let bad = afk_in(
        dir.path(),
        &["sweep", "--store", &open, "--older-than", "30 days"],
    );
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("not an age"), "{}", bad.stderr);
}

/// An imported run lands where it belongs in the target's indexes: an unfinished one with an
/// entry naming its state and agent (so a worker of the target finds it), a finished one
/// closed, in the index of finished runs (so the target's retention applies to it).
#[test]
fn an_import_puts_each_run_in_the_targets_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let (from, done, to) = (
        rocks(&dir.path().join("from")),
        rocks(&dir.path().join("done")),
        rocks(&dir.path().join("to")),
    );
    let file = dir.path().join("x.jsonl");
    let f = file.to_str().unwrap();
    for (url, crash) in [(&from, Some("10")), (&done, None)] {
        let mut args = vec!["demo", "--store", url.as_str()];
        args.extend(crash.map(|c| ["--crash-after", c]).into_iter().flatten());
        let demo = afk_in(dir.path(), &args);
        assert_eq!(demo.code, Some(0), "{}", demo.stdout);
    }
    let export = afk_in(
        dir.path(),
        &[
            "export", "--store", &from, "--thread", "afk-demo", "--out", f,
        ],
    );
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let import = afk_in(dir.path(), &["import", "--store", &to, f]);
    assert_eq!(import.code, Some(0), "{}{}", import.stdout, import.stderr);
    let doc = runs(dir.path(), &to);
    let run = &doc["runs"][0];
    assert_eq!(run["state"], "uncertain", "{doc}");
    assert_eq!(run["attention"]["state"], "uncertain", "{doc}");
    assert_eq!(run["attention"]["waiting_for_human"], "settlement", "{doc}");
    assert!(
        !run["attention"]["agent"].as_str().unwrap().is_empty(),
        "{doc}"
    );

    // A finished run: no entry, and the target's sweep finds it.
    let file2 = dir.path().join("y.jsonl");
    let f2 = file2.to_str().unwrap();
    let export = afk_in(
        dir.path(),
        &[
            "export", "--store", &done, "--thread", "afk-demo", "--out", f2,
        ],
    );
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let target = rocks(&dir.path().join("to2"));
    let import = afk_in(dir.path(), &["import", "--store", &target, f2]);
    assert_eq!(import.code, Some(0), "{}{}", import.stdout, import.stderr);
    assert!(runs(dir.path(), &target)["runs"][0]["attention"].is_null());
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(sweep(dir.path(), &target, "0s")["deleted"], 1);
}
