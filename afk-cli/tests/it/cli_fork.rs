//! `afk fork` against RocksDB (and, behind the features, Redis and S3): the CLI writes the new
//! run ready to go, and the application's next *plain* library resume runs it from the chosen
//! step. The payer agent charged once (step 1) and answered (step 2): forked at step 2, the
//! new run answers without charging; forked at step 1, it stops for a human before charging
//! again. Refusals exit 1 and leave every key as it was.

#![allow(clippy::unwrap_used)]

use crate::cli_ops;
use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use afk::runner::{Outcome, Runner};
use cli_ops::{Charge, agent, completed, contents, ids, resume, with_store};
use common::{Out, afk_in};
use serde_json::{Value, json};

fn afk(dir: &Path, url: &str, args: &[&str]) -> Out {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    afk_in(dir, &all)
}

/// The payer's run, completed: it charged once.
fn charged_run(url: &str, thread: &str, run: &str) {
    with_store(url, async |store| {
        let (t, r) = ids(thread, run);
        let charge = Arc::new(Charge::default());
        let out = Runner::new(store, Default::default())
            .run_with_id(&agent(charge.clone(), false), &t, r, "pay")
            .result()
            .await;
        assert_eq!(completed(out).final_text, "charged");
        assert_eq!(charge.calls.load(Ordering::SeqCst), 1);
    });
}

fn all(url: &str, thread: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    charged_run(url, thread, "paid");
    let before = contents(url, thread);

    // Refused: a step the run never began, the run itself as the target, a missing run.
    for (args, what) in [
        (vec!["--run", "paid", "--step", "7"], "has not begun step 7"),
        (
            vec!["--run", "paid", "--step", "1", "--new-run", "paid"],
            "new run id",
        ),
        (
            vec!["--run", "nothing", "--step", "1"],
            "No checkpoint found",
        ),
    ] {
        let mut all = vec!["fork", "--thread", thread];
        all.extend(args);
        let out = afk(dir, url, &all);
        assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains(what), "{what}: {}", out.stderr);
        assert_eq!(
            contents(url, thread),
            before,
            "a refused fork wrote something"
        );
    }

    // At step 2: the new run answers from the transcript, the charge is not made again.
    let out = afk(
        dir,
        url,
        &[
            "fork", "--thread", thread, "--run", "paid", "--step", "2", "--json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["new_run"], json!("paid-fork-2"), "{doc}");
    let after = contents(url, thread);
    let source_keys = |c: &std::collections::BTreeMap<String, Vec<u8>>| {
        c.iter()
            .filter(|(k, _)| k.split(':').nth(1) == Some("paid"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        source_keys(&after),
        source_keys(&before),
        "the fork changed its source"
    );
    let (out, charge) = resume(url, thread, "paid-fork-2", false);
    assert_eq!(completed(out).final_text, "charged");
    assert_eq!(
        charge.calls.load(Ordering::SeqCst),
        0,
        "the fork charged again"
    );
    // The same fork again: refused (the run exists).
    let again = afk(
        dir,
        url,
        &["fork", "--thread", thread, "--run", "paid", "--step", "2"],
    );
    assert_eq!(again.code, Some(1), "{}", again.stderr);

    // At step 1: the charge the source made is not made again without a human.
    let out = afk(
        dir,
        url,
        &[
            "fork",
            "--thread",
            thread,
            "--run",
            "paid",
            "--step",
            "1",
            "--new-run",
            "redo",
            "--message",
            "pay the invoice once more",
            "--json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["message_replaced"], json!(true), "{doc}");
    // The new run's transcript asks the replaced question (the value may be sealed or not: the
    // test stores write it in the clear).
    let first = contents(url, thread)
        .remove("messages:redo:00000000000000000000")
        .expect("the fork's first transcript entry");
    let first: Value = serde_json::from_slice(&first).unwrap();
    let users: Vec<&Value> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == json!("user"))
        .collect();
    assert_eq!(users.len(), 1, "{first}");
    assert_eq!(
        users[0]["content"],
        json!("pay the invoice once more"),
        "{first}"
    );
    let (out, charge) = resume(url, thread, "redo", false);
    assert!(
        matches!(&out, Ok(Outcome::Paused { request }) if request.tool_call_id.as_deref() == Some("c1")),
        "{out:?}"
    );
    assert_eq!(
        charge.calls.load(Ordering::SeqCst),
        0,
        "the fork charged again"
    );
}

#[test]
fn fork_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    all(&common::rocks(&dir.path().join("db")), "forks");
}

#[cfg(feature = "redis")]
#[test]
fn fork_on_redis() {
    if let Some(url) = cli_ops::require_env("AFK_TEST_REDIS_URL") {
        all(&url, &cli_ops::unique("forks"));
    }
}

#[cfg(feature = "s3")]
#[test]
fn fork_on_s3() {
    if let Some(url) = cli_ops::s3_url() {
        all(&url, "forks");
    }
}
