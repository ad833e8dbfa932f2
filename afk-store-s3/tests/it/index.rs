//! The head stays small as a run grows: older keys move into immutable index segments, merged
//! level by level. Every key stays readable (also by a store with a cold segment cache), listed
//! and deletable; racing committers that each try to flush lose nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use afk_core::store::StoreExt;
use afk_core::{
    RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use afk_store_s3::S3Store;

const COMMITS: u64 = 300;

fn commit(run: &RunId, epoch: Epoch, keys: &[String], tag: &str) -> Commit {
    Commit {
        thread: ThreadId::new("t").unwrap(),
        run: run.clone(),
        epoch,
        puts: keys
            .iter()
            .map(|k| (k.clone(), format!("{tag} {k}").into_bytes()))
            .collect(),
        latest: Some(format!("latest {tag}").into_bytes()),
        attention: None,
    }
}

fn key(run: &str, i: u64) -> String {
    format!("checkpoint:{run}:{i}:pre_llm")
}

async fn head_bytes(raw: &aws_sdk_s3::Client, cfg: &afk_store_s3::S3Config, run: &str) -> usize {
    common::raw_head(raw, cfg, "t", run).await.to_string().len()
}

#[tokio::test]
async fn a_long_run_keeps_its_head_small_and_every_key_readable() {
    let Some((store, cfg)) = common::store("index").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_long").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let mut sizes = Vec::new();
    for i in 0..COMMITS {
        store
            .commit(&commit(&r, epoch, &[key("run_long", i)], "v1"))
            .await
            .unwrap();
        if i % 10 == 9 {
            sizes.push(head_bytes(&raw, &cfg, "run_long").await);
        }
    }
    // Keys now in segments, written again: the newer value wins.
    let again: Vec<String> = [3u64, 40, 41].iter().map(|&i| key("run_long", i)).collect();
    store
        .commit(&commit(&r, epoch, &again, "v2"))
        .await
        .unwrap();

    let head = common::raw_head(&raw, &cfg, "t", "run_long").await;
    let segs = head["segs"].as_array().expect("segments listed").clone();
    assert!(
        segs.iter().any(|s| s["l"].as_u64() >= Some(1)),
        "no merged segment: {head}"
    );
    let largest = *sizes.iter().max().unwrap();
    // One key map of every key would be over 60 bytes a key: 18 KB here.
    assert!(largest < 4096, "head grew to {largest} bytes: {sizes:?}");

    // A second store: a cold segment cache, everything read from the bucket.
    let cold = S3Store::open(cfg.clone()).await.unwrap();
    for s in [&store, &cold] {
        for i in 0..COMMITS {
            let tag = if [3, 40, 41].contains(&i) { "v2" } else { "v1" };
            let k = key("run_long", i);
            let want = format!("{tag} {k}").into_bytes();
            assert_eq!(s.get(&t, &k).await.unwrap(), Some(want), "{k}");
        }
        let many = s.get_many(&t, &again).await.unwrap();
        assert!(
            many.iter()
                .all(|v| v.as_deref().is_some_and(|v| v.starts_with(b"v2")))
        );
    }
    let listed = cold.list_all(&t, "checkpoint:run_long:").await.unwrap();
    let mut want: Vec<String> = (0..COMMITS).map(|i| key("run_long", i)).collect();
    want.push("checkpoint:run_long:latest".into());
    want.sort();
    assert_eq!(listed, want);

    // Deleting keys that live in segments hides them; the rest stays.
    let doomed = vec![key("run_long", 7), key("run_long", 40)];
    store.delete(&t, &doomed).await.unwrap();
    for s in [&store, &cold] {
        assert_eq!(s.get(&t, &doomed[0]).await.unwrap(), None);
        assert_eq!(s.get(&t, &doomed[1]).await.unwrap(), None);
        assert!(s.get(&t, &key("run_long", 8)).await.unwrap().is_some());
    }
    let page = cold
        .list(&t, "checkpoint:run_long:", None, 1000)
        .await
        .unwrap();
    assert_eq!(page.keys.len(), COMMITS as usize - 1);
    // More commits after the delete flush the tombstones down; the keys stay deleted.
    for i in COMMITS..COMMITS + 70 {
        store
            .commit(&commit(&r, epoch, &[key("run_long", i)], "v1"))
            .await
            .unwrap();
    }
    assert_eq!(cold.get(&t, &doomed[0]).await.unwrap(), None);
    assert_eq!(cold.get(&t, &doomed[1]).await.unwrap(), None);

    // Segments merged away were deleted: every segment object left is listed by the head.
    let head = common::raw_head(&raw, &cfg, "t", "run_long").await;
    let listed_segs: BTreeSet<String> = head["segs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("afk/test/t/run_long/i/{}", s["id"].as_str().unwrap()))
        .collect();
    let stored: BTreeSet<String> = common::objects(&raw, &cfg.bucket, "afk/test/t/run_long/i/")
        .await
        .into_iter()
        .collect();
    assert_eq!(stored, listed_segs);

    let removed = store.delete_run(&t, &r).await.unwrap();
    assert_eq!(removed, COMMITS + 70 - 2 + 1 + 1, "keys, latest and fence");
    assert!(
        common::objects(&raw, &cfg.bucket, "afk/test/t/run_long/")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn racing_committers_that_each_flush_lose_nothing() {
    let Some((store, cfg)) = common::store("index-race").await else {
        return;
    };
    let store = Arc::new(store);
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_ir").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    // 31 recent keys: the next commit of two keys flushes, whoever makes it.
    let first: Vec<String> = (0..31).map(|i| key("run_ir", i)).collect();
    store
        .commit(&commit(&r, epoch, &first, "v1"))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for n in 0..8u64 {
        let (store, r) = (store.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            let keys = [key("run_ir", 100 + 2 * n), key("run_ir", 101 + 2 * n)];
            store.commit(&commit(&r, epoch, &keys, "v1")).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let cold = S3Store::open(cfg.clone()).await.unwrap();
    let all: Vec<String> = (0..31)
        .chain((0..8).flat_map(|n| [100 + 2 * n, 101 + 2 * n]))
        .map(|i| key("run_ir", i))
        .collect();
    for k in &all {
        let want = format!("v1 {k}").into_bytes();
        assert_eq!(cold.get(&t, k).await.unwrap(), Some(want), "{k}");
    }
    let raw = common::raw_client(&cfg).await;
    let head = common::raw_head(&raw, &cfg, "t", "run_ir").await;
    assert_eq!(head["seq"], 2 + 8, "one swap per commit: {head}");
    let listed: BTreeSet<String> = head["segs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| format!("afk/test/t/run_ir/i/{}", s["id"].as_str().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    assert!(!listed.is_empty(), "nobody flushed: {head}");
    let stored: BTreeSet<String> = common::objects(&raw, &cfg.bucket, "afk/test/t/run_ir/i/")
        .await
        .into_iter()
        .collect();
    assert_eq!(stored, listed, "the losers' segments were removed");
}
