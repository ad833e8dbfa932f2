//! How the commit and delete scripts write, on a single node and on Cluster: commits and
//! deletes of more keys than one chunk of a script (the scripts write, index and delete 500
//! keys per `MSET`/`ZADD`/`DEL`/`ZREM`) and than Lua's `unpack` returns at once (~8000 values:
//! a single `MSET` of 4001 keys would unpack 8002); a commit whose index write fails writes no
//! data.

use crate::common;

use afk_core::ErrorKind;
use afk_core::store::{Epoch, Store};
use afk_core::{RunId, ThreadId};
use afk_store_redis::{RedisConfig, RedisStore};
use common::*;

/// Key counts around the chunk boundaries, and one past the unpack limit.
const SIZES: [usize; 5] = [1, 500, 501, 1000, 4001];

/// `n` keys of `run` (in two families, so the index spans more than one prefix) with values
/// that differ per key.
fn puts(run: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let family = if i % 2 == 0 { "messages" } else { "checkpoint" };
            let k = format!("{family}:{run}:{i:05}");
            let v = format!("value {i} of {run}").into_bytes();
            (k, v)
        })
        .collect()
}

fn big_commit(t: &ThreadId, r: &RunId, e: Epoch, n: usize) -> afk_core::store::Commit {
    afk_core::store::Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch: e,
        puts: puts(r.as_str(), n),
        latest: Some(format!("latest of {r}").into_bytes()),
        attention: None,
    }
}

/// Every key of the thread under `prefix`, page by page.
async fn list_all(s: &RedisStore, t: &ThreadId, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = s
            .list(t, prefix, cursor.as_deref(), 1000)
            .await
            .expect("list a page");
        out.extend(page.keys);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

#[tokio::test]
async fn a_commit_of_more_keys_than_one_chunk_writes_and_indexes_every_key() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.clone()).await;
        let t = thread("chunk");
        for n in SIZES {
            let r = run(&format!("run_{n}"));
            let e = s.claim(&t, &r).await.unwrap();
            let c = big_commit(&t, &r, e, n);
            s.commit(&c).await.unwrap();
            let keys: Vec<String> = c.puts.iter().map(|(k, _)| k.clone()).collect();
            let got = s.get_many(&t, &keys).await.unwrap();
            for ((k, want), got) in c.puts.iter().zip(&got) {
                assert_eq!(got.as_ref(), Some(want), "{topo}, {n} keys: {k}");
            }
            assert_eq!(
                s.get(&t, &afk_core::store::latest_key(&r)).await.unwrap(),
                c.latest,
                "{topo}, {n} keys"
            );
            // The index holds every key, the latest pointer and the fence, and nothing else
            // of the run; a listing (which reads the index) shows the same.
            let mut want = keys.clone();
            want.push(afk_core::store::latest_key(&r));
            want.push(format!("run:{r}"));
            want.sort();
            let of_run = |ks: Vec<String>| -> Vec<String> {
                ks.into_iter()
                    .filter(|k| afk_core::store::run_of_key(k) == Some(r.as_str()))
                    .collect()
            };
            let indexed = of_run(index_members(topo, &cfg, &t).await);
            assert_eq!(indexed.len(), want.len(), "{topo}, {n} keys");
            assert!(indexed == want, "{topo}, {n} keys: index differs");
            let listed = of_run(list_all(&s, &t, "").await);
            assert!(listed == want, "{topo}, {n} keys: listing differs");
        }
    }
}

#[tokio::test]
async fn a_fenced_commit_of_many_chunks_writes_nothing() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.clone()).await;
        let t = thread("chunkf");
        let r = run("run_f");
        assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(1));
        assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(2));
        let c = big_commit(&t, &r, Epoch(1), 4001);
        let err = s.commit(&c).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{topo}: {err}");
        let keys: Vec<String> = c.puts.iter().map(|(k, _)| k.clone()).collect();
        let got = s.get_many(&t, &keys).await.unwrap();
        assert!(got.iter().all(Option::is_none), "{topo}: a key was written");
        assert_eq!(
            index_members(topo, &cfg, &t).await,
            vec!["run:run_f".to_string()],
            "{topo}"
        );
    }
}

#[tokio::test]
async fn delete_run_and_delete_remove_more_keys_than_one_chunk() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.clone()).await;
        let t = thread("chunkd");
        let (a, b) = (run("run_a"), run("run_b"));
        for r in [&a, &b] {
            let e = s.claim(&t, r).await.unwrap();
            s.commit(&big_commit(&t, r, e, 1201)).await.unwrap();
        }
        // 1201 keys + latest + fence.
        assert_eq!(s.delete_run(&t, &a).await.unwrap(), 1203, "{topo}");
        let left = index_members(topo, &cfg, &t).await;
        assert_eq!(left.len(), 1203, "{topo}");
        assert!(left.iter().all(|k| k.contains("run_b")), "{topo}");
        let keys: Vec<String> = puts("run_a", 1201).into_iter().map(|(k, _)| k).collect();
        let got = s.get_many(&t, &keys).await.unwrap();
        assert!(
            got.iter().all(Option::is_none),
            "{topo}: a key of run_a is left"
        );

        // `delete` of 1100 keys of run_b (plus one that does not exist).
        let mut doomed: Vec<String> = puts("run_b", 1100).into_iter().map(|(k, _)| k).collect();
        doomed.push("effect:run_b:9:missing".into());
        s.delete(&t, &doomed).await.unwrap();
        let got = s.get_many(&t, &doomed).await.unwrap();
        assert!(
            got.iter().all(Option::is_none),
            "{topo}: a deleted key is left"
        );
        // 101 keys + latest + fence, in the index itself (a listing skips members whose key
        // is gone, so it would hide a member the delete left behind).
        let left = index_members(topo, &cfg, &t).await;
        assert_eq!(left.len(), 103, "{topo}: {:?}", &left[..left.len().min(5)]);
        assert!(
            left.iter().all(|k| !doomed.contains(k)),
            "{topo}: a deleted key is still indexed"
        );
    }
}

/// Every member of the thread's key index, read directly (`ZRANGE`).
async fn index_members(topo: &str, cfg: &RedisConfig, t: &ThreadId) -> Vec<String> {
    let mut pipe = redis::pipe();
    pipe.cmd("ZRANGE")
        .arg(format!("{{{}:{}}}#index", cfg.prefix, t))
        .arg(0)
        .arg(-1);
    let (members,): (Vec<String>,) = query(topo, cfg, &pipe).await;
    members
}

/// `PEXPIRETIME` of each physical key.
pub(crate) async fn expiry_times(topo: &str, cfg: &RedisConfig, keys: &[String]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("PEXPIRETIME").arg(k);
    }
    query(topo, cfg, &pipe).await
}

/// Run `pipe` (all keys in one slot) over a plain connection to the node or cluster.
pub(crate) async fn query<T: redis::FromRedisValue>(
    topo: &str,
    cfg: &RedisConfig,
    pipe: &redis::Pipeline,
) -> T {
    if topo == "cluster" {
        // One slot: the cluster client sends a pipeline of one slot to its node.
        let nodes: Vec<String> = cfg
            .nodes
            .iter()
            .map(|(h, p)| format!("redis://{h}:{p}"))
            .collect();
        let c = redis::cluster::ClusterClient::new(nodes).expect("cluster client");
        let mut conn = c.get_async_connection().await.expect("cluster connection");
        pipe.query_async(&mut conn).await.expect("query")
    } else {
        let (h, p) = &cfg.nodes[0];
        let mut conn = raw(&format!("redis://{h}:{p}")).await;
        pipe.query_async(&mut conn).await.expect("query")
    }
}

#[tokio::test]
async fn with_a_ttl_every_key_of_a_commit_of_many_chunks_expires_with_its_run_once_finished() {
    for (topo, cfg) in topologies() {
        let cfg = cfg.with_ttl_s(3600);
        let s = connect(cfg.clone()).await;
        let t = thread("chunkt");
        let r = run("run_t");
        let e = s.claim(&t, &r).await.unwrap();
        let c = big_commit(&t, &r, e, 1001);
        s.commit(&c).await.unwrap();
        let kp = format!("{{{}:{}}}:", cfg.prefix, t);
        let mut keys: Vec<String> = c.puts.iter().map(|(k, _)| format!("{kp}{k}")).collect();
        keys.push(format!("{kp}checkpoint:run_t:latest"));
        keys.push(format!("{kp}run:run_t"));
        let index = format!("{{{}:{}}}#index", cfg.prefix, t);
        keys.push(index);
        let times = expiry_times(topo, &cfg, &keys).await;
        assert!(
            times.iter().all(|at| *at == -1),
            "{topo}: a run in progress has keys that expire"
        );
        s.finish_run(&t, &r, e).await.unwrap();
        let times = expiry_times(topo, &cfg, &keys).await;
        let fence = times[times.len() - 2];
        assert!(fence > 0, "{topo}: the fence has no expiry");
        let off: Vec<&String> = keys
            .iter()
            .zip(&times)
            .filter(|(_, at)| **at != fence)
            .map(|(k, _)| k)
            .collect();
        assert!(
            off.is_empty(),
            "{topo}: keys off the run's instant: {off:?}"
        );
    }
}

#[tokio::test]
async fn a_commit_whose_index_write_fails_writes_no_data() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.clone()).await;
        let t = thread("chunki");
        let r = run("run_i");
        let e = s.claim(&t, &r).await.unwrap();
        // Break the index: a string where the sorted set was.
        let index = format!("{{{}:{}}}#index", cfg.prefix, t);
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(&index).arg("not a sorted set").ignore();
        let () = query(topo, &cfg, &pipe).await;
        let c = big_commit(&t, &r, e, 3);
        let err = s.commit(&c).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unexpected, "{topo}: {err}");
        let mut keys: Vec<String> = c.puts.iter().map(|(k, _)| k.clone()).collect();
        keys.push(afk_core::store::latest_key(&r));
        let got = s.get_many(&t, &keys).await.unwrap();
        assert!(got.iter().all(Option::is_none), "{topo}: {got:?}");
    }
}
