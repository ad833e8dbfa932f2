//! Steps per second of a scripted agent (AFK's peer workload: one tool call per step, instant
//! model and tool), async (write-behind) vs sync (inline) checkpoint writes, and write-behind
//! with merging off as the baseline (`async-unmerged`), 10- and 100-step
//! runs, on the in-memory store, RocksDB (sync WAL, the default), Redis when
//! `AFK_TEST_REDIS_URL` is set and S3 (10-step runs only) when `AFK_TEST_S3_…` are set. Each iteration is one whole run under a fresh run id, including
//! the terminal flush; throughput is in steps.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench setup

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use afk::runner::Runner;
use afk::{CheckpointConfig, MemoryStore, RunId, store::Store};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use support::{agent, run_to_end, runner, runner_with, runtime};

static RUNS: AtomicU64 = AtomicU64::new(0);

fn store_group(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    store_name: &str,
    store: Arc<dyn Store>,
    lengths: &[u64],
) {
    // The baseline in the same run: write-behind without merging, each commit written as
    // submitted (the writer before it merged a run's queued commits).
    let unmerged = CheckpointConfig::default().with_coalesce_runtime_state(false);
    let runners: Vec<(&str, Runner)> = vec![
        ("async", runner(store.clone(), true)),
        ("sync", runner(store.clone(), false)),
        ("async-unmerged", runner_with(store.clone(), unmerged)),
    ];
    // The run ids this group uses start here (the counter is shared by every group).
    let first = RUNS.load(Ordering::Relaxed);
    for &steps in lengths {
        let mut g = c.benchmark_group(format!("steps/{store_name}-{steps}"));
        g.throughput(Throughput::Elements(steps));
        g.sampling_mode(SamplingMode::Flat);
        let agent = agent(steps);
        for (mode, r) in &runners {
            g.bench_function(*mode, |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let (r, agent) = (r.clone(), agent.clone());
                    async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let n = RUNS.fetch_add(1, Ordering::Relaxed);
                            let run = RunId::new(format!("run_s{steps}_{n}")).expect("run id");
                            run_to_end(&r, &agent, run).await;
                        }
                        start.elapsed()
                    }
                })
            });
        }
        g.finish();
    }
    // Leave nothing behind on shared servers: this group's runs only (deleting every id
    // ever counted cost S3 three requests per id of every earlier group, minutes on moto).
    rt.block_on(async {
        let t = support::thread();
        for n in first..RUNS.load(Ordering::Relaxed) {
            for &steps in lengths {
                if let Ok(run) = RunId::new(format!("run_s{steps}_{n}")) {
                    let _ = store.delete_run(&t, &run).await;
                }
            }
        }
    });
}

fn benches(c: &mut Criterion) {
    // One runtime for everything: a Redis connection lives on the runtime that opened it.
    let rt = runtime();
    store_group(c, &rt, "memory", Arc::new(MemoryStore::new()), &[10, 100]);
    #[cfg(feature = "rocksdb")]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = afk_store_rocksdb::RocksDbStore::open(afk_store_rocksdb::RocksDbConfig::new(
            dir.path(),
        ))
        .expect("open rocksdb");
        store_group(c, &rt, "rocksdb", Arc::new(store), &[10, 100]);
    }
    #[cfg(feature = "redis")]
    if let Some(url) = support::servers::redis_url() {
        let store = rt.block_on(support::servers::redis_store(&url));
        store_group(c, &rt, "redis", Arc::new(store), &[10, 100]);
    }
    #[cfg(feature = "s3")]
    if let Some(env) = support::servers::s3_env() {
        let bucket = support::servers::unique("afk-steps-");
        let store = rt.block_on(support::servers::s3_store(&env, &bucket));
        // 10-step runs only: a sync run makes ~120 commits of three round trips each.
        store_group(c, &rt, "s3", Arc::new(store), &[10]);
    }
}

criterion_group! {
    name = steps;
    config = support::criterion();
    targets = benches
}
criterion_main!(steps);
