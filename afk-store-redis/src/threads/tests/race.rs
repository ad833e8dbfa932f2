//! The interleavings of claims and removals that the removal protocol of `threads.rs` exists
//! for, driven step by step against the real servers (`AFK_TEST_REDIS_URL`,
//! `AFK_TEST_REDIS_CLUSTER_URLS`): the claim's `ZADD` and its claim script are separate round
//! trips, and a whole removal (or a removal whose process died half way) falls between them; a
//! remover's add back (or a claim's stamped add) is decided in the thread's slot and lands in
//! the index's slot later, after another emptying and its removal.

#![allow(clippy::unwrap_used)]

use afk_core::{RunId, ThreadId, store::Store};

use crate::RedisStore;
use crate::config::RedisConfig;
use crate::conn::Repeat;
use crate::stamped::{Set, Update, forget, held, mark_empty, remember, update};

fn stores_env() -> Vec<String> {
    let mut out = Vec::new();
    for var in ["AFK_TEST_REDIS_URL", "AFK_TEST_REDIS_CLUSTER_URLS"] {
        out.extend(afk_conformance::require_env(var));
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
    cmd.arg(Set::Threads.key(s.config())).arg(t.as_str());
    let score: Option<f64> = s.client().query(&cmd, "zscore").await.unwrap();
    score.is_some()
}

/// The emptying, as a delete that emptied the thread does it: the new generation.
async fn mark(s: &RedisStore, t: &ThreadId) -> u64 {
    mark_empty(
        s.client(),
        s.scripts(),
        s.config(),
        Set::Threads,
        t.as_str(),
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
        let g = mark(&s, &t).await;
        assert!(g > 0);
        assert!(
            forget(
                s.client(),
                s.scripts(),
                s.config(),
                Set::Threads,
                t.as_str(),
                g
            )
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
        let g = mark(&s, &t).await;
        // The stamped removal only: the remover is killed before its add back.
        let up = update(
            s.client(),
            s.scripts(),
            s.config(),
            Set::Threads,
            t.as_str(),
            Update::Remove(g),
        );
        assert_eq!(up.await.unwrap(), Some(true));
        assert!(!indexed(&s, &t).await);
        s.claim_after_remember(&t, &r, seen).await.unwrap();
        assert!(
            indexed(&s, &t).await,
            "{url}: the claim did not bring the thread back"
        );
        // A rebuild clears what the dead remover left (the thread holds keys: it stays).
        s.rebuild_thread_index().await.unwrap();
        assert!(indexed(&s, &t).await);
    }
}

/// The interleaving that left an empty thread indexed: remover 1 sees the thread holding keys
/// again (a claim ran after its emptying) and decides to add it back; before its add back lands,
/// the run is deleted and a second removal runs whole.
#[tokio::test]
async fn a_removers_late_add_back_does_not_list_a_thread_emptied_again() {
    for url in stores_env() {
        let s = store(&url, "late").await;
        let t = ThreadId::new("t").unwrap();
        let r = RunId::new("r1").unwrap();
        let (cfg, c, sc) = (s.config(), s.client(), s.scripts());
        // Remover 1: the thread is empty, the index drops it.
        let g = mark(&s, &t).await;
        update(c, sc, cfg, Set::Threads, t.as_str(), Update::Remove(g))
            .await
            .unwrap();
        // A claim runs whole.
        s.claim(&t, &r).await.unwrap();
        // Remover 1 sees the thread holding a key: it will add it back...
        let h = held(c, sc, cfg, Set::Threads, t.as_str()).await.unwrap();
        assert!(h.is_some());
        // ...but first the run is deleted and a second removal runs whole.
        s.delete_run(&t, &r).await.unwrap();
        assert!(!indexed(&s, &t).await);
        // Remover 1's add back lands last.
        let late = update(
            c,
            sc,
            cfg,
            Set::Threads,
            t.as_str(),
            Update::Add(h.unwrap()),
        );
        assert_eq!(late.await.unwrap(), None, "{url}: a stale add was applied");
        assert!(
            !indexed(&s, &t).await,
            "{url}: an empty thread is indexed after every operation finished"
        );
    }
}

/// The same for a claim's own add: a claim whose script ran right after an emptying sends the
/// add stamped with that generation; it lands after its run was deleted and removed again.
#[tokio::test]
async fn a_claims_late_add_does_not_list_a_thread_emptied_after_it() {
    for url in stores_env() {
        let s = store(&url, "claimlate").await;
        let t = ThreadId::new("t").unwrap();
        let r = RunId::new("r1").unwrap();
        let (cfg, c, sc) = (s.config(), s.client(), s.scripts());
        let g = mark(&s, &t).await;
        let seen = remember(c, sc, cfg, &t).await.unwrap();
        // The claim script learns of the pending removal and adds stamped `g`.
        s.claim_after_remember(&t, &r, seen).await.unwrap();
        // The removal of that emptying lands after it and is refused.
        let stale = update(c, sc, cfg, Set::Threads, t.as_str(), Update::Remove(g));
        assert_eq!(stale.await.unwrap(), None, "{url}");
        assert!(
            indexed(&s, &t).await,
            "{url}: a thread holding a fence is not indexed"
        );
        s.delete_run(&t, &r).await.unwrap();
        assert!(!indexed(&s, &t).await, "{url}");
        // A second copy of the claim's add, landing now, is refused.
        let late = update(c, sc, cfg, Set::Threads, t.as_str(), Update::Add(g));
        assert_eq!(late.await.unwrap(), None, "{url}");
        assert!(!indexed(&s, &t).await, "{url}: an empty thread is indexed");
    }
}

/// The remover's add back: a claim's script ran between an emptying and its removal, and the
/// claimer died before its own stamped add; the removal's `ZREM` would leave the thread (which
/// holds the claim's fence) unlisted, so the remover adds it back.
#[tokio::test]
async fn a_remover_adds_back_a_thread_whose_claimer_died_before_its_add() {
    for url in stores_env() {
        let s = store(&url, "addback").await;
        let t = ThreadId::new("t").unwrap();
        let (cfg, c, sc) = (s.config(), s.client(), s.scripts());
        let g = mark(&s, &t).await;
        let seen = remember(c, sc, cfg, &t).await.unwrap();
        // The claim script alone: the claimer is killed before it sends its stamped add.
        let kp = format!("{{{}:{}}}:", cfg.prefix, t);
        let (_, at, _): (u64, u64, u64) = c
            .eval(
                &sc.claim,
                &[
                    Set::Threads.held_key(cfg, t.as_str()),
                    format!("{kp}run:r1").into_bytes(),
                    Set::Threads.gen_key(cfg, t.as_str()),
                    Set::Attention.gen_key(cfg, t.as_str()),
                    format!("{kp}checkpoint:r1:latest").into_bytes(),
                ],
                &[
                    kp.into_bytes(),
                    b"r1".to_vec(),
                    b"0".to_vec(),
                    b"0".to_vec(),
                ],
                Repeat::Never,
                "claim",
            )
            .await
            .unwrap();
        assert_eq!(at, g, "{url}: the claim did not see the generation");
        assert!(
            crate::store::must_add_again(seen.threads, at),
            "{url}: the claim did not learn of the removal"
        );
        assert!(
            !forget(c, sc, cfg, Set::Threads, t.as_str(), g)
                .await
                .unwrap(),
            "{url}: the remover says the thread stayed removed"
        );
        assert!(
            indexed(&s, &t).await,
            "{url}: a thread holding a fence is not indexed"
        );
    }
}
