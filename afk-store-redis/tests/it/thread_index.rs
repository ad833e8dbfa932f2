//! The thread index `{<prefix>}#threads` on a real Redis and Redis Cluster: a thread leaves it
//! with its last run, a claim racing that removal keeps its thread listed, and
//! `rebuild_thread_index` repairs an index that misses threads (data written before it
//! existed) or holds dead ones. The index's members are read raw, not through `list_threads`
//! (which hides threads without keys anyway).

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use afk_core::store::Store;
use afk_store_redis::{IndexRebuild, RedisStore};
use common::{commit, connect, raw_query, run, thread, topologies};

/// The members of the raw thread index.
async fn members(s: &RedisStore) -> Vec<String> {
    let key = format!("{{{}}}#threads", s.config().prefix);
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(&key).arg(0).arg(-1);
    raw_query(s.config(), cmd).await
}

async fn listed(s: &RedisStore) -> Vec<String> {
    let page = s.list_threads(None, 10_000).await.unwrap();
    page.threads.iter().map(|t| t.to_string()).collect()
}

#[tokio::test]
async fn a_thread_leaves_the_index_with_its_last_run() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("gone");
        for id in ["r1", "r2"] {
            let r = run(id);
            let e = s.claim(&t, &r).await.unwrap();
            let key = format!("checkpoint:{id}:1:pre_llm");
            s.commit(&commit(&t, &r, e, &[(&key, b"v")], Some(b"p")))
                .await
                .unwrap();
        }
        assert_eq!(members(&s).await, [t.to_string()], "{topo}");
        s.delete_run(&t, &run("r1")).await.unwrap();
        assert_eq!(members(&s).await, [t.to_string()], "{topo}: r2 is left");
        s.delete_run(&t, &run("r2")).await.unwrap();
        assert!(
            members(&s).await.is_empty(),
            "{topo}: {:?}",
            members(&s).await
        );
        // `delete` of the last keys (the prune of single keys) too.
        let r = run("r3");
        let e = s.claim(&t, &r).await.unwrap();
        s.commit(&commit(
            &t,
            &r,
            e,
            &[("checkpoint:r3:1:pre_llm", b"v")],
            None,
        ))
        .await
        .unwrap();
        assert_eq!(members(&s).await, [t.to_string()], "{topo}");
        s.delete(
            &t,
            &["checkpoint:r3:1:pre_llm".to_owned(), "run:r3".to_owned()],
        )
        .await
        .unwrap();
        assert!(members(&s).await.is_empty(), "{topo}");
        // A new claim brings it back.
        s.claim(&t, &run("r4")).await.unwrap();
        assert_eq!(listed(&s).await, [t.to_string()], "{topo}");
    }
}

/// Claims (`claim` and `claim_if_new`) and last-run deletes of the same threads, interleaved
/// at random by the runtime, many times: at the end every thread that holds a key is in the index, and threads that hold
/// nothing are not. Counts the claims that learnt of a racing removal (the case the protocol
/// exists for) and requires some.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_racing_the_removal_of_its_thread_keeps_it_listed() {
    for (topo, cfg) in topologies() {
        let s = Arc::new(connect(cfg).await);
        let threads: Vec<_> = (0..8).map(|_| thread("race")).collect();
        let mut tasks = Vec::new();
        for (i, t) in threads.iter().enumerate() {
            for worker in 0..2 {
                let (s, t) = (s.clone(), t.clone());
                tasks.push(tokio::spawn(async move {
                    // Each worker claims and deletes its own run: the thread empties whenever
                    // both runs are deleted at once, while the other worker may be claiming.
                    // Every other claim is a `claim_if_new` (its own pipeline on a single
                    // node): both make the thread hold a key after adding it to the index.
                    let r = run(&format!("w{worker}"));
                    for k in 0..40 {
                        if (k + worker) % 2 == 0 {
                            s.claim(&t, &r).await.unwrap();
                        } else {
                            let e = s.claim_if_new(&t, &r).await.unwrap();
                            assert!(e.is_some(), "a deleted run has no pointer");
                        }
                        s.delete_run(&t, &r).await.unwrap();
                    }
                    // Half the threads end holding a run.
                    if (i + worker) % 4 == 0 {
                        s.claim(&t, &r).await.unwrap();
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        let index = members(&s).await;
        let mut holding = 0;
        for t in &threads {
            let keys = s.list(t, "", None, 10).await.unwrap().keys;
            if keys.is_empty() {
                assert!(
                    !index.contains(&t.to_string()),
                    "{topo}: {t} is empty but indexed"
                );
            } else {
                holding += 1;
                assert!(
                    index.contains(&t.to_string()),
                    "{topo}: {t} holds {keys:?} but is not indexed"
                );
            }
        }
        let removals: Option<u64> = {
            let mut cmd = redis::cmd("GET");
            cmd.arg(format!("{{{}}}#threads:removals", s.config().prefix));
            raw_query(s.config(), cmd).await
        };
        assert!(
            removals.unwrap_or(0) > 50,
            "{topo}: too few removals to race: {removals:?}"
        );
        println!("{topo}: {holding} of 8 threads hold keys; {removals:?} removals");
    }
}

#[tokio::test]
async fn rebuild_adds_threads_written_before_the_index_and_drops_dead_members() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.clone()).await;
        let (old, dead, live) = (thread("old"), thread("dead"), thread("live"));
        for t in [&old, &live] {
            let r = run("r1");
            let e = s.claim(t, &r).await.unwrap();
            s.commit(&commit(
                t,
                &r,
                e,
                &[("checkpoint:r1:1:pre_llm", b"v")],
                Some(b"p"),
            ))
            .await
            .unwrap();
        }
        let key = format!("{{{}}}#threads", cfg.prefix);
        // `old` as data written before the index existed; `dead` a member with nothing behind it.
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(&key).arg(old.to_string());
        let _: i64 = raw_query(&cfg, zrem).await;
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&key).arg(0).arg(dead.to_string());
        let _: i64 = raw_query(&cfg, zadd).await;
        assert!(!listed(&s).await.contains(&old.to_string()), "{topo}");
        let report = s.rebuild_thread_index().await.unwrap();
        assert_eq!((report.added, report.removed), (1, 1), "{topo}: {report:?}");
        let mut want = vec![old.to_string(), live.to_string()];
        want.sort();
        assert_eq!(members(&s).await, want, "{topo}");
        assert_eq!(
            s.rebuild_thread_index().await.unwrap(),
            IndexRebuild::default(),
            "{topo}"
        );
        // What the removal protocol leaves behind for the dead thread expires.
        for key in [
            format!("{{{}:{dead}}}#gen", cfg.prefix),
            format!("{{{}}}#threads:stamp:{dead}", cfg.prefix),
        ] {
            let mut pttl = redis::cmd("PTTL");
            pttl.arg(&key);
            let ms: i64 = raw_query(&cfg, pttl).await;
            assert!(ms > 0, "{topo}: {key} has PTTL {ms}");
        }
    }
}
