//! `afk settle` and `afk decide` against RocksDB (and, behind the features, Redis and S3): the
//! CLI writes the answer without resuming, and the application's next *plain* library resume
//! continues from it: `ran` is replayed without running the call, `did_not_run` runs it once
//! with the first attempt's idempotency key, `failed` is a failed call; an approval runs the
//! paused call, a denial records it as failed. Refusals exit 1 and leave every key (the claim
//! fence included) as it was.

#![allow(clippy::unwrap_used)]

use crate::cli_ops;
use crate::common;

use std::path::Path;
use std::sync::atomic::Ordering;

use cli_ops::{completed, contents, paused_run, resume, uncertain_run};
use common::{Out, afk_in};
use serde_json::{Value, json};

fn afk(dir: &Path, url: &str, args: &[&str]) -> Out {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    afk_in(dir, &all)
}

fn settle(dir: &Path, url: &str, thread: &str, run: &str, what: &[&str]) -> Out {
    let mut args = vec!["settle", "--thread", thread, "--run", run, "--call", "c1"];
    args.extend_from_slice(what);
    afk(dir, url, &args)
}

fn charge_record(r: &afk::schema::AgentResult) -> Value {
    let t = r
        .tool_executions
        .iter()
        .find(|t| t.tool_call_id.as_deref() == Some("c1"))
        .unwrap();
    json!({"success": t.success, "output": t.output, "error": t.error})
}

/// `settle --ran`: the plain resume replays the given output and never runs `charge`.
fn ran_is_replayed(dir: &Path, url: &str, thread: &str) {
    uncertain_run(url, thread, "r_ran");
    let (out, charge) = resume(url, thread, "r_ran", false);
    let e = out.unwrap_err();
    assert_eq!(e.kind(), afk::ErrorKind::EffectUncertain, "{e}");
    assert_eq!(charge.calls.load(Ordering::SeqCst), 0);

    let out = settle(
        dir,
        url,
        thread,
        "r_ran",
        &["--ran", r#"{"charged": 5, "receipt": "x1"}"#],
    );
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("settled tool call c1"),
        "{}",
        out.stdout
    );

    let (out, charge) = resume(url, thread, "r_ran", false);
    let r = completed(out);
    assert_eq!(
        charge.calls.load(Ordering::SeqCst),
        0,
        "the settled call ran again"
    );
    assert_eq!(r.final_text, "charged");
    let rec = charge_record(&r);
    assert_eq!(rec["success"], json!(true));
    assert_eq!(rec["output"], json!({"charged": 5, "receipt": "x1"}));
}

/// `settle --did-not-run`: the plain resume runs `charge` once, with the first key.
fn did_not_run_runs_once(dir: &Path, url: &str, thread: &str) {
    let key = uncertain_run(url, thread, "r_dnr");
    let out = settle(dir, url, thread, "r_dnr", &["--did-not-run", "--json"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["settlement"], json!("did_not_run"));
    assert_eq!(doc["written"], json!(true));

    let (out, charge) = resume(url, thread, "r_dnr", false);
    let r = completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 1);
    assert_eq!(*charge.keys.lock().unwrap(), vec![key]);
    assert_eq!(charge_record(&r)["output"], json!({"charged": 5}));
}

/// `settle --failed`: the plain resume records a failed call and does not run it.
fn failed_is_a_failed_call(dir: &Path, url: &str, thread: &str) {
    uncertain_run(url, thread, "r_fail");
    let out = settle(dir, url, thread, "r_fail", &["--failed", "card declined"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let (out, charge) = resume(url, thread, "r_fail", false);
    let r = completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 0);
    let rec = charge_record(&r);
    assert_eq!(rec["success"], json!(false));
    assert!(
        rec["error"].as_str().unwrap().contains("card declined"),
        "{rec}"
    );
}

/// Wrong call, a different second settlement, a terminal run, a paused run: exit 1, nothing
/// written (not even a claim); the same settlement again: exit 0, nothing written.
fn refusals_write_nothing(dir: &Path, url: &str, thread: &str) {
    uncertain_run(url, thread, "r_ref");
    let before = contents(url, thread);
    let mut args = vec![
        "settle", "--thread", thread, "--run", "r_ref", "--call", "nope",
    ];
    args.push("--did-not-run");
    let out = afk(dir, url, &args);
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("not in the pending batch"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("store:"), "{}", out.stderr);
    assert_eq!(contents(url, thread), before, "a refused settlement wrote");

    assert_eq!(
        settle(dir, url, thread, "r_ref", &["--did-not-run"]).code,
        Some(0)
    );
    let after = contents(url, thread);
    let again = settle(dir, url, thread, "r_ref", &["--did-not-run"]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(again.stdout.contains("already settled"), "{}", again.stdout);
    let other = settle(dir, url, thread, "r_ref", &["--failed", "x", "--json"]);
    assert_eq!(other.code, Some(1), "{}", other.stderr);
    let doc: Value = serde_json::from_str(&other.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], json!("conflict"), "{doc}");
    assert!(
        doc["error"]["key"].as_str().unwrap().contains(":c1"),
        "{doc}"
    );
    assert_eq!(contents(url, thread), after, "a refused settlement wrote");

    completed(resume(url, thread, "r_ref", false).0);
    let done = contents(url, thread);
    let out = settle(dir, url, thread, "r_ref", &["--did-not-run"]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("is terminal"), "{}", out.stderr);
    assert_eq!(contents(url, thread), done);

    paused_run(url, thread, "r_paused");
    let paused = contents(url, thread);
    let out = settle(dir, url, thread, "r_paused", &["--did-not-run"]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("paused for approval"), "{}", out.stderr);
    assert_eq!(contents(url, thread), paused);
}

/// `decide --approve` then a plain resume runs the call; `--deny` records it as failed;
/// deciding a run that is not paused, or differently, is refused and writes nothing.
fn decisions_are_applied_by_a_plain_resume(dir: &Path, url: &str, thread: &str) {
    let decide = |run: &str, what: &[&str]| {
        let mut args = vec!["decide", "--thread", thread, "--run", run];
        args.extend_from_slice(what);
        afk(dir, url, &args)
    };
    paused_run(url, thread, "d_yes");
    let out = decide("d_yes", &["--approve"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let again = decide("d_yes", &["--approve"]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stdout.contains("already has this decision"),
        "{}",
        again.stdout
    );
    let before = contents(url, thread);
    let other = decide("d_yes", &["--deny", "no"]);
    assert_eq!(other.code, Some(1), "{}", other.stdout);
    assert!(other.stderr.contains("already decided"), "{}", other.stderr);
    assert_eq!(contents(url, thread), before);
    let (out, charge) = resume(url, thread, "d_yes", true);
    let r = completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 1);
    assert_eq!(charge_record(&r)["output"], json!({"charged": 5}));

    let done = contents(url, thread);
    let out = decide("d_yes", &["--approve"]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("not paused"), "{}", out.stderr);
    assert_eq!(contents(url, thread), done);

    paused_run(url, thread, "d_no");
    let out = decide("d_no", &["--deny", "too expensive", "--json"]);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["decision"], json!("deny"));
    let (out, charge) = resume(url, thread, "d_no", true);
    let r = completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 0);
    let rec = charge_record(&r);
    assert_eq!(rec["success"], json!(false));
    assert!(
        rec["error"].as_str().unwrap().contains("too expensive"),
        "{rec}"
    );
}

fn all(url: &str, thread: &str) {
    let dir = tempfile::tempdir().unwrap();
    ran_is_replayed(dir.path(), url, thread);
    did_not_run_runs_once(dir.path(), url, thread);
    failed_is_a_failed_call(dir.path(), url, thread);
    refusals_write_nothing(dir.path(), url, &format!("{thread}_ref"));
    decisions_are_applied_by_a_plain_resume(dir.path(), url, &format!("{thread}_dec"));
}

#[test]
fn settle_and_decide_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    all(&common::rocks(&dir.path().join("db")), "ops");
}

#[cfg(feature = "redis")]
#[test]
fn settle_and_decide_on_redis() {
    if let Some(url) = cli_ops::require_env("AFK_TEST_REDIS_URL") {
        all(&url, &cli_ops::unique("ops"));
    }
}

#[cfg(feature = "s3")]
#[test]
fn settle_and_decide_on_s3() {
    if let Some(url) = cli_ops::s3_url() {
        all(&url, "ops");
    }
}

#[test]
fn settle_needs_exactly_one_answer() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::rocks(&dir.path().join("db"));
    let both = settle(
        dir.path(),
        &url,
        "t",
        "r",
        &["--did-not-run", "--failed", "x"],
    );
    assert_eq!(both.code, Some(2), "{}", both.stderr);
    let none = settle(dir.path(), &url, "t", "r", &[]);
    assert_eq!(none.code, Some(2), "{}", none.stderr);
    let bad = settle(dir.path(), &url, "t", "r", &["--ran", "{not json"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}

/// The README walk-through, end to end through the binary: the demo leaves the charge
/// uncertain, `afk settle --ran` records it, the demo application's plain resume completes
/// without charging again.
#[test]
fn the_operator_walk_through_settles_the_demo_charge() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::rocks(&dir.path().join("db"));
    let stuck = afk(dir.path(), &url, &["demo", "--crash-after", "10"]);
    assert_eq!(stuck.code, Some(0), "{}", stuck.stdout);
    let threads = afk(dir.path(), &url, &["threads", "--json"]);
    let doc: Value = serde_json::from_str(&threads.stdout).unwrap();
    assert_eq!(doc["threads"][0]["uncertain"], json!(1), "{doc}");
    let show = afk(
        dir.path(),
        &url,
        &["show", "--thread", "afk-demo", "--run", "demo-order-42"],
    );
    assert!(
        show.stdout.contains("--call call_charge"),
        "{}",
        show.stdout
    );
    let settle = afk(
        dir.path(),
        &url,
        &[
            "settle",
            "--thread",
            "afk-demo",
            "--run",
            "demo-order-42",
            "--call",
            "call_charge",
            "--ran",
            r#"{"charge_id": "ch_123"}"#,
        ],
    );
    assert_eq!(settle.code, Some(0), "{}", settle.stderr);
    let resumed = afk(dir.path(), &url, &["demo", "--resume"]);
    assert_eq!(
        resumed.code,
        Some(0),
        "{}{}",
        resumed.stdout,
        resumed.stderr
    );
    let executions = common::line(&resumed.stdout, "tool executions:");
    assert!(!executions.contains("call_charge"), "{executions}");
    assert!(common::line(&resumed.stdout, "run demo-order-42:").contains("completed"));
    let runs = afk(
        dir.path(),
        &url,
        &["runs", "--thread", "afk-demo", "--json"],
    );
    let doc: Value = serde_json::from_str(&runs.stdout).unwrap();
    assert_eq!(doc["runs"][0]["state"], json!("completed"), "{doc}");
}
