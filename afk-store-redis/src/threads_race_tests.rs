//! The two interleavings of a claim and a removal that the removal protocol of `threads.rs`
//! exists for, driven step by step against the real servers (`AFK_TEST_REDIS_URL`,
//! `AFK_TEST_REDIS_CLUSTER_URLS`): the claim's `ZADD` and its claim script are separate round
//! trips, and a whole removal (or a removal whose process died half way) falls between them.

#![allow(clippy::unwrap_used)]

use afk_core::{RunId, ThreadId, store::Store};

use super::*;
use crate::RedisStore;

fn stores_env() -> Vec<String> {
    let mut out = Vec::new();
    for var in ["AFK_TEST_REDIS_URL", "AFK_TEST_REDIS_CLUSTER_URLS"] {
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => out.push(v),
            _ if std::env::var("AFK_REQUIRE_INTEGRATION").as_deref() == Ok("1") => {
                panic!("AFK_REQUIRE_INTEGRATION=1 but {var} is not set")
            }
            _ => println!("skipped: set {var} to run this test"),
        }
    }
    out
}

async fn store(url: &str, tag: &str) -> RedisStore {
    let mut cfg = RedisConfig::from_url(url).unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    cfg.prefix = format!("race{tag}{}x{nanos}", std::process::id());
    RedisStore::open(cfg).await.unwrap()
}

async fn indexed(s: &RedisStore, t: &ThreadId) -> bool {
    let mut cmd = redis::cmd("ZSCORE");
    cmd.arg(threads_key(s.config())).arg(t.as_str());
    let score: Option<f64> = s.client().query(&cmd, "zscore").await.unwrap();
    score.is_some()
}

/// Step 1 of a removal, as a delete that emptied the thread does it.
async fn mark(s: &RedisStore, t: &ThreadId) -> i64 {
    s.client()
        .eval(
            &s.scripts().index_mark_empty,
            &[
                thread_index(s.config(), t.as_str()),
                marker_key(s.config(), t.as_str()),
            ],
            &[],
            Repeat::Safe,
            "mark",
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_whole_removal_between_a_claims_zadd_and_its_script_is_undone() {
    for url in stores_env() {
        let s = store(&url, "whole").await;
        let t = ThreadId::new("t").unwrap();
        let r = RunId::new("r1").unwrap();
        // The claim's first round trip: the thread goes into the index.
        let seen = remember(s.client(), s.scripts(), s.config(), &t)
            .await
            .unwrap();
        assert!(indexed(&s, &t).await);
        // A removal runs whole: the thread holds nothing yet.
        assert_eq!(mark(&s, &t).await, 1);
        assert!(
            forget(s.client(), s.scripts(), s.config(), t.as_str())
                .await
                .unwrap()
        );
        assert!(!indexed(&s, &t).await);
        // The claim's script runs now: it learns of the removal and adds the thread again.
        s.claim_after_remember(&t, &r, seen).await.unwrap();
        assert!(
            indexed(&s, &t).await,
            "{url}: a thread holding a fence is not indexed"
        );
        assert_eq!(s.list_threads(None, 10).await.unwrap().threads, vec![t]);
    }
}

#[tokio::test]
async fn a_removal_that_died_after_its_zrem_does_not_lose_a_racing_claim() {
    for url in stores_env() {
        let s = store(&url, "died").await;
        let t = ThreadId::new("t").unwrap();
        let r = RunId::new("r1").unwrap();
        let seen = remember(s.client(), s.scripts(), s.config(), &t)
            .await
            .unwrap();
        assert_eq!(mark(&s, &t).await, 1);
        // Step 2 only: the remover is killed before step 3.
        let _: u64 = s
            .client()
            .eval(
                &s.scripts().index_forget,
                &[threads_key(s.config()), removals_key(s.config())],
                &[t.as_str().as_bytes().to_vec()],
                Repeat::Never,
                "forget",
            )
            .await
            .unwrap();
        assert!(!indexed(&s, &t).await);
        s.claim_after_remember(&t, &r, seen).await.unwrap();
        assert!(
            indexed(&s, &t).await,
            "{url}: the marker did not bring the thread back"
        );
        // A rebuild clears what the dead remover left (the thread holds keys: it stays).
        s.rebuild_thread_index().await.unwrap();
        assert!(indexed(&s, &t).await);
    }
}
