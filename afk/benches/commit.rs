//! Commit throughput of each store against its raw client writing the same bytes, in one run.
//!
//! The commits are the real ones of a 10-step scripted run (captured once, sync writes), replayed
//! in a cycle. "ours" is `Store::commit` (fence check, atomicity, layout); "raw" writes the same
//! keys and values with the plain client and nothing else:
//! - memory: a `Mutex<HashMap>` insert of each key;
//! - rocksdb: one `WriteBatch` of the commit's keys, sync on and off (our store with the same
//!   `sync` setting);
//! - redis: one pipeline of `SET`s per commit (one round trip), and 64 commits per pipeline
//!   against our `commit_batch` of 64;
//! - s3: one `PutObject` per key, concurrently.
//!
//! Throughput is in commits; `cargo run --example bench_report` turns it into commits/s.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench setup

#[path = "support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use afk::{
    MemoryStore, RunId,
    store::{Commit, Store},
};
use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
#[cfg(any(feature = "redis", feature = "s3"))]
use support::servers;
use support::{captured_commits, runtime, thread, with_epoch};

const RUN: &str = "run_commit_bench";

/// Time `iters` calls of `one(i)` (i = 0, 1, …) on the runtime.
fn timed<F, Fut>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    name: &str,
    one: F,
) where
    F: Fn(usize) -> Fut + Clone,
    Fut: Future<Output = ()>,
{
    g.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let one = one.clone();
            async move {
                let start = Instant::now();
                for i in 0..iters {
                    one(i as usize).await;
                }
                start.elapsed()
            }
        })
    });
}

/// Our store's commit of the cycled commits, claimed under its own epoch.
async fn ours_commits(store: &dyn Store, commits: &[Commit]) -> Arc<Vec<Commit>> {
    let epoch = store
        .claim(&thread(), &RunId::new(RUN).expect("run id"))
        .await
        .expect("claim");
    Arc::new(with_epoch(commits, epoch))
}

/// Each commit's keys and values, in commit order.
type Kvs = Arc<Vec<Vec<(String, Vec<u8>)>>>;

/// Each commit's keys and values as the raw clients write them (the latest pointer as its key).
fn raw_kvs(commits: &[Commit]) -> Kvs {
    Arc::new(
        commits
            .iter()
            .map(|c| {
                let mut kv = c.puts.clone();
                if let Some(l) = &c.latest {
                    kv.push((format!("checkpoint:{}:latest", c.run), l.clone()));
                }
                kv
            })
            .collect(),
    )
}

fn group<'a>(c: &'a mut Criterion, name: &str, per_iter: u64) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(per_iter));
    g.measurement_time(Duration::from_secs(2));
    g
}

fn memory(c: &mut Criterion, commits: &[Commit]) {
    let rt = runtime();
    let store = Arc::new(MemoryStore::new());
    let ours = rt.block_on(ours_commits(store.as_ref(), commits));
    let kvs = raw_kvs(commits);
    let mut g = group(c, "commit/memory", 1);
    let n = ours.len();
    timed(&mut g, &rt, "ours", move |i| {
        let (store, ours) = (store.clone(), ours.clone());
        async move { store.commit(&ours[i % n]).await.expect("commit") }
    });
    let map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    timed(&mut g, &rt, "raw", move |i| {
        let (map, kvs) = (map.clone(), kvs.clone());
        async move {
            let mut m = map.lock().expect("lock");
            for (k, v) in &kvs[i % n] {
                let mut pk = b"bench\0".to_vec();
                pk.extend_from_slice(k.as_bytes());
                m.insert(pk, v.clone());
            }
        }
    });
    g.finish();
}

#[cfg(feature = "rocksdb")]
fn rocks(c: &mut Criterion, commits: &[Commit]) {
    use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};
    let rt = runtime();
    let kvs = raw_kvs(commits);
    for sync in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = RocksDbConfig::new(dir.path().join("ours"));
        cfg.sync = sync;
        let store = Arc::new(RocksDbStore::open(cfg).expect("open rocksdb store"));
        let ours = rt.block_on(ours_commits(store.as_ref(), commits));
        let n = ours.len();
        let name = if sync {
            "commit/rocksdb-sync"
        } else {
            "commit/rocksdb-nosync"
        };
        let mut g = group(c, name, 1);
        timed(&mut g, &rt, "ours", move |i| {
            let (store, ours) = (store.clone(), ours.clone());
            async move { store.commit(&ours[i % n]).await.expect("commit") }
        });
        let db = Arc::new(rocksdb::DB::open_default(dir.path().join("raw")).expect("open raw db"));
        let kvs = kvs.clone();
        timed(&mut g, &rt, "raw", move |i| {
            let (db, kvs) = (db.clone(), kvs.clone());
            async move {
                let mut batch = rocksdb::WriteBatch::default();
                for (k, v) in &kvs[i % n] {
                    let mut pk = b"bench\0".to_vec();
                    pk.extend_from_slice(k.as_bytes());
                    batch.put(pk, v);
                }
                let mut wo = rocksdb::WriteOptions::default();
                wo.set_sync(sync);
                db.write_opt(batch, &wo).expect("raw write");
            }
        });
        g.finish();
    }
}

#[cfg(feature = "redis")]
fn redis_group(c: &mut Criterion, commits: &[Commit]) {
    let Some(url) = servers::redis_url() else {
        return;
    };
    let rt = runtime();
    let store = Arc::new(rt.block_on(servers::redis_store(&url)));
    let ours = rt.block_on(ours_commits(store.as_ref(), commits));
    let n = ours.len();
    let kvs = raw_kvs(commits);
    let raw_prefix = servers::unique("benchraw");
    let con = rt.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("redis url");
        client
            .get_multiplexed_async_connection()
            .await
            .expect("raw redis connection")
    });
    let pipe_of = {
        let (kvs, raw_prefix) = (kvs.clone(), raw_prefix.clone());
        move |from: usize, count: usize| {
            let mut p = redis::pipe();
            for j in from..from + count {
                for (k, v) in &kvs[j % n] {
                    p.set(format!("{raw_prefix}:{{bench}}:{k}"), v.as_slice())
                        .ignore();
                }
            }
            p
        }
    };
    let mut g = group(c, "commit/redis", 1);
    {
        let store = store.clone();
        let ours = ours.clone();
        timed(&mut g, &rt, "ours", move |i| {
            let (store, ours) = (store.clone(), ours.clone());
            async move { store.commit(&ours[i % n]).await.expect("commit") }
        });
    }
    {
        let (con, pipe_of) = (con.clone(), pipe_of.clone());
        timed(&mut g, &rt, "raw", move |i| {
            let mut con = con.clone();
            let p = pipe_of(i, 1);
            async move { p.query_async::<()>(&mut con).await.expect("raw SET") }
        });
    }
    g.finish();
    let mut g = group(c, "commit/redis-batch64", 64);
    {
        let store = store.clone();
        timed(&mut g, &rt, "ours", move |i| {
            let (store, ours) = (store.clone(), ours.clone());
            async move {
                let batch: Vec<Commit> = (0..64).map(|j| ours[(i * 64 + j) % n].clone()).collect();
                for r in store.commit_batch(&batch).await {
                    r.expect("commit_batch");
                }
            }
        });
    }
    timed(&mut g, &rt, "raw", move |i| {
        let mut con = con.clone();
        let p = pipe_of(i * 64, 64);
        async move { p.query_async::<()>(&mut con).await.expect("raw pipeline") }
    });
    g.finish();
    rt.block_on(async {
        let run = RunId::new(RUN).expect("run id");
        let _ = store.delete_run(&thread(), &run).await;
        let client = redis::Client::open(url.as_str()).expect("redis url");
        if let Ok(mut con) = client.get_multiplexed_async_connection().await {
            let mut p = redis::pipe();
            for kv in kvs.iter() {
                for (k, _) in kv {
                    p.del(format!("{raw_prefix}:{{bench}}:{k}")).ignore();
                }
            }
            let _ = p.query_async::<()>(&mut con).await;
        }
    });
}

#[cfg(feature = "s3")]
fn s3_group(c: &mut Criterion, commits: &[Commit]) {
    let Some(env) = servers::s3_env() else {
        return;
    };
    let rt = runtime();
    let bucket = servers::unique("afk-bench-").to_lowercase();
    let store = Arc::new(rt.block_on(servers::s3_store(&env, &bucket)));
    let ours = rt.block_on(ours_commits(store.as_ref(), commits));
    let n = ours.len();
    let kvs = raw_kvs(commits);
    let client = rt.block_on(servers::raw_s3_client(&env));
    let mut g = group(c, "commit/s3", 1);
    {
        let store = store.clone();
        timed(&mut g, &rt, "ours", move |i| {
            let (store, ours) = (store.clone(), ours.clone());
            async move { store.commit(&ours[i % n]).await.expect("commit") }
        });
    }
    timed(&mut g, &rt, "raw", move |i| {
        let (client, kvs, bucket) = (client.clone(), kvs.clone(), bucket.clone());
        async move {
            let puts = kvs[i % n].iter().map(|(k, v)| {
                client
                    .put_object()
                    .bucket(&bucket)
                    .key(format!("raw/bench/{k}"))
                    .body(aws_sdk_s3::primitives::ByteStream::from(v.clone()))
                    .send()
            });
            futures::future::try_join_all(puts)
                .await
                .expect("raw PutObject");
        }
    });
    g.finish();
    rt.block_on(async {
        let _ = store
            .delete_run(&thread(), &RunId::new(RUN).expect("run id"))
            .await;
    });
}

fn benches(c: &mut Criterion) {
    let commits = runtime().block_on(captured_commits(10, RUN));
    let bytes: usize = commits.iter().map(Commit::byte_len).sum();
    eprintln!(
        "replaying {} commits of a 10-step run, {} bytes on average",
        commits.len(),
        bytes / commits.len().max(1)
    );
    memory(c, &commits);
    #[cfg(feature = "rocksdb")]
    rocks(c, &commits);
    #[cfg(feature = "redis")]
    redis_group(c, &commits);
    #[cfg(feature = "s3")]
    s3_group(c, &commits);
}

criterion_group! {
    name = commit;
    config = support::criterion();
    targets = benches
}

criterion_main!(commit);
