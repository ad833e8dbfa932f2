//! What sealing every value at rest costs per step (`afk-seal`): the same 10-step runs of the
//! peer workload (one tool call per step, instant model and tool, write-behind writes) on a
//! store as it is (`plain`) and wrapped in a `SealedStore` (`sealed`, XChaCha20-Poly1305, data
//! keys in memory), side by side in one run, on the in-memory store, RocksDB (sync WAL) and
//! Redis when `AFK_TEST_REDIS_URL` is set. Throughput is in steps.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench setup

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use afk::{MemoryStore, RunId, store::Store};
use afk_seal::{Key, MemoryKeyring, SealedStore, StaticKeys};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use support::{agent, run_to_end, runner, runtime};

static RUNS: AtomicU64 = AtomicU64::new(0);
const STEPS: u64 = 10;

fn pair(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: Arc<dyn Store>) {
    let keys = StaticKeys::new("k1", Key::generate()).expect("keys");
    let sealed: Arc<dyn Store> = Arc::new(SealedStore::new(
        store.clone(),
        Arc::new(keys),
        Arc::new(MemoryKeyring::default()),
    ));
    let mut g = c.benchmark_group(format!("sealed/{name}-{STEPS}"));
    g.throughput(Throughput::Elements(STEPS));
    g.sampling_mode(SamplingMode::Flat);
    let agent = agent(STEPS);
    for (mode, s) in [("plain", store), ("sealed", sealed)] {
        let r = runner(s, true);
        g.bench_function(mode, |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (r, agent) = (r.clone(), agent.clone());
                async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let n = RUNS.fetch_add(1, Ordering::Relaxed);
                        let run = RunId::new(format!("run_seal{n}")).expect("run id");
                        run_to_end(&r, &agent, run).await;
                    }
                    start.elapsed()
                }
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    pair(c, &rt, "memory", Arc::new(MemoryStore::new()));
    #[cfg(feature = "rocksdb")]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = afk_store_rocksdb::RocksDbStore::open(afk_store_rocksdb::RocksDbConfig::new(
            dir.path(),
        ))
        .expect("open rocksdb");
        pair(c, &rt, "rocksdb", Arc::new(store));
    }
    #[cfg(feature = "redis")]
    if let Some(url) = support::servers::redis_url() {
        let store = rt.block_on(support::servers::redis_store(&url));
        pair(c, &rt, "redis", Arc::new(store));
    }
}

criterion_group! {
    name = sealed;
    config = support::criterion();
    targets = benches
}
criterion_main!(sealed);
