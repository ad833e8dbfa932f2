//! `afk sweep`: deletes the runs that finished more than an age ago and nothing else.

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
