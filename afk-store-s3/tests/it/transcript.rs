//! Transcript-log entries (`messages:<run>:<index>`) travel inside the index segments: a flush
//! puts the entries this store wrote into its segment as values, so a cold reader gets the log
//! with the segments. Checked here on the objects themselves: the entries are in the segments,
//! no object is left that no slot names, a log written before (entries as pointers into packs)
//! still reads and grows, and a flush whose head swap never lands loses nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;
use crate::proxy::{Fault, Proxy};

use std::collections::BTreeSet;

use afk_core::store::StoreExt;
use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use afk_store_s3::{S3Config, S3Store};
use aws_sdk_s3::Client;
use serde_json::Value;

/// A step's commit: three records and one log entry in one pack, the pointer inline.
fn step(r: &RunId, epoch: Epoch, i: u32) -> Commit {
    let mut puts: Vec<(String, Vec<u8>)> = ["step_started", "pre_llm", "post_llm"]
        .iter()
        .map(|p| {
            (
                format!("checkpoint:{r}:{i}:{p}"),
                format!("{p} {i}").into_bytes(),
            )
        })
        .collect();
    puts.push((message_key(r, i), message(i)));
    Commit {
        thread: ThreadId::new("t").unwrap(),
        run: r.clone(),
        epoch,
        puts,
        latest: Some(format!("{{\"step\":{i}}}").into_bytes()),
        attention: None,
    }
}

fn message_key(r: &RunId, i: u32) -> String {
    format!("messages:{r}:{i:020}")
}

/// A log entry as the runner writes one: JSON, with quotes to escape inside a segment.
fn message(i: u32) -> Vec<u8> {
    format!(r#"{{"messages":[{{"role":"user","content":"entry \"{i}\""}}]}}"#).into_bytes()
}

/// Every object of the run on the server, by kind: (record objects `o/…`, segments `i/…`).
async fn objects(raw: &Client, cfg: &S3Config, run: &str) -> (BTreeSet<String>, Vec<String>) {
    let dir = format!("{}/t/{run}/", cfg.prefix);
    let all = common::objects(raw, &cfg.bucket, &dir).await;
    let records = all
        .iter()
        .filter_map(|k| k.strip_prefix(&format!("{dir}o/")))
        .map(str::to_owned)
        .collect();
    let segments = all
        .iter()
        .filter_map(|k| k.strip_prefix(&format!("{dir}i/")))
        .map(str::to_owned)
        .collect();
    (records, segments)
}

/// The slots of the head and of every segment it lists, as raw JSON (key, slot).
async fn slots(raw: &Client, cfg: &S3Config, run: &str) -> Vec<(String, Value)> {
    let head = common::raw_head(raw, cfg, "t", run).await;
    let mut out: Vec<(String, Value)> = head["keys"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for seg in head["segs"].as_array().cloned().unwrap_or_default() {
        let id = seg["id"].as_str().unwrap();
        let body =
            common::raw_json(raw, &cfg.bucket, &format!("{}/t/{run}/i/{id}", cfg.prefix)).await;
        out.extend(
            body["keys"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    out
}

/// The object a raw slot names (`<seq>-<nonce>/<i>` or a pack), if any.
fn named(slot: &Value) -> Option<String> {
    slot.as_str()
        .or_else(|| slot["p"].as_str())
        .map(str::to_owned)
}

/// Log entries of `slots` kept inline, and kept as pointers into objects.
fn log_slots(slots: &[(String, Value)]) -> (usize, usize) {
    let log = slots.iter().filter(|(k, _)| k.starts_with("messages:"));
    let inline = log
        .clone()
        .filter(|(_, s)| s.get("inline").is_some())
        .count();
    (inline, log.count() - inline)
}

/// A store with a cold cache reads the `n` steps' log entries and records back, by `list` +
/// `get_many` (as a resume does) and one by one.
async fn assert_reads_back(cfg: &S3Config, r: &RunId, n: u32) {
    let cold = S3Store::open(cfg.clone()).await.unwrap();
    let t = ThreadId::new("t").unwrap();
    let keys = cold.list_all(&t, &format!("messages:{r}:")).await.unwrap();
    let want: Vec<String> = (0..n).map(|i| message_key(r, i)).collect();
    assert_eq!(keys, want);
    let values = cold.get_many(&t, &keys).await.unwrap();
    for (i, v) in values.into_iter().enumerate() {
        assert_eq!(v, Some(message(i as u32)), "entry {i}");
    }
    for i in [0, n / 2, n - 1] {
        let key = format!("checkpoint:{r}:{i}:post_llm");
        let want = format!("post_llm {i}").into_bytes();
        assert_eq!(cold.get(&t, &key).await.unwrap(), Some(want));
    }
}

#[tokio::test]
async fn log_entries_travel_in_the_segments_and_no_object_is_left_unnamed() {
    let Some((store, cfg)) = common::store("logseg").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = common::ids("run_log");
    let epoch = store.claim(&t, &r).await.unwrap();
    let n = 120;
    for i in 0..n {
        store.commit(&step(&r, epoch, i)).await.unwrap();
    }
    let slots = slots(&raw, &cfg, "run_log").await;
    let (inline, pointers) = log_slots(&slots);
    // Only the entries still among the head's recent keys point into packs.
    assert!(
        inline >= n as usize - 8 && pointers <= 8,
        "{inline} entries inline, {pointers} pointers"
    );
    // Every record object is named by a slot (a pack whose entries all went inline is gone).
    let (records, _) = objects(&raw, &cfg, "run_log").await;
    let names: BTreeSet<String> = slots.iter().filter_map(|(_, s)| named(s)).collect();
    let unnamed: Vec<&String> = records.difference(&names).collect();
    assert!(unnamed.is_empty(), "objects no slot names: {unnamed:?}");
    assert_reads_back(&cfg, &r, n).await;
}

#[tokio::test]
async fn a_log_written_as_pointers_into_packs_still_reads_and_grows() {
    let Some(cfg) = common::config("", "logold") else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = common::ids("run_old");
    let first = S3Store::open(cfg.clone()).await.unwrap();
    let epoch = first.claim(&t, &r).await.unwrap();
    // A store per commit remembers no earlier log entry when a commit flushes: the segments
    // hold pointers into the packs (the layout written before entries went into segments),
    // all but the flushing commit's own entry.
    for i in 0..60 {
        let once = S3Store::open(cfg.clone()).await.unwrap();
        once.commit(&step(&r, epoch, i)).await.unwrap();
    }
    let (inline, pointers) = log_slots(&slots(&raw, &cfg, "run_old").await);
    assert!(
        inline <= 8 && pointers >= 52,
        "{inline} inline, {pointers} pointers"
    );
    assert_reads_back(&cfg, &r, 60).await;
    // The same run carried on by one store: both kinds in one log, merged together.
    let store = S3Store::open(cfg.clone()).await.unwrap();
    for i in 60..140 {
        store.commit(&step(&r, epoch, i)).await.unwrap();
    }
    let (inline, pointers) = log_slots(&slots(&raw, &cfg, "run_old").await);
    assert!(
        inline >= 72 && pointers >= 52,
        "{inline} inline, {pointers} pointers"
    );
    assert_reads_back(&cfg, &r, 140).await;
}

#[tokio::test]
async fn a_flush_whose_head_swap_never_lands_loses_nothing() {
    let Some((endpoint, ..)) = common::server() else {
        return;
    };
    let proxy = Proxy::start(&endpoint).await;
    let cfg = common::config(&proxy.endpoint(), "logcut")
        .unwrap()
        .with_attempt_timeout_ms(1_000)
        .with_max_attempts(1);
    let store = S3Store::open(cfg.clone()).await.unwrap();
    let mut direct = cfg.clone();
    direct.endpoint = Some(endpoint);
    let raw = common::raw_client(&direct).await;
    let (t, r) = common::ids("run_cut");
    let epoch = store.claim(&t, &r).await.unwrap();
    // Four keys a commit: the head holds 32 after eight, so the ninth flushes.
    for i in 0..8 {
        store.commit(&step(&r, epoch, i)).await.unwrap();
    }
    proxy.arm(Fault::DropBeforeForward, 1);
    let err = store.commit(&step(&r, epoch, 8)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // The segment with the entries inline was written; no head names it.
    let (_, segments) = objects(&raw, &direct, "run_cut").await;
    let head = common::raw_head(&raw, &direct, "t", "run_cut").await;
    assert_eq!(segments.len(), 1, "the flush's segment: {segments:?}");
    assert!(head.get("segs").is_none(), "the head did not move: {head}");
    assert_reads_back(&direct, &r, 8).await;
    // The commit again: applied whole, the entries inline.
    store.commit(&step(&r, epoch, 8)).await.unwrap();
    let (inline, pointers) = log_slots(&slots(&raw, &direct, "run_cut").await);
    assert_eq!((inline, pointers), (9, 0));
    assert_reads_back(&direct, &r, 9).await;
    store.delete_run(&t, &r).await.unwrap();
    let (records, segments) = objects(&raw, &direct, "run_cut").await;
    assert!(
        records.is_empty() && segments.is_empty(),
        "{records:?} {segments:?}"
    );
}
