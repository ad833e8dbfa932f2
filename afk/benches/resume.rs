//! Resume time for long runs: a 100- and a 1000-step run of the scripted agent crashed inside
//! its last tool step (its latest pointer names the mid-step snapshot holding the model's
//! pending answer), loaded into a fresh store, then resumed to its end. Timed: `Runner::resume` until the run's result is back
//! (claim, load the snapshot and the transcript log, verify the digest, finish the interrupted
//! step and the closing answer, flush). If resume cost grew with the run, the 1000-step case
//! would take ~10× the 100-step one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench setup

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use afk::runner::Outcome;
use afk::{MemoryStore, RunId, store::Store};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use support::{CrashedRun, agent, crashed_run, load_crashed, runner, runtime, thread};

/// Resume `run` on `store` to its end; the elapsed time.
async fn resume_once(store: Arc<dyn Store>, steps: u64, run: &str) -> Duration {
    let r = runner(store, true);
    let agent = agent(steps);
    let run = RunId::new(run).expect("run id");
    let start = Instant::now();
    let out = r
        .resume(&agent, &thread(), &run)
        .result()
        .await
        .expect("resume");
    let took = start.elapsed();
    assert!(
        matches!(out, Outcome::Completed(_)),
        "resume did not finish"
    );
    took
}

fn group(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    states: &[(u64, CrashedRun)],
    open: impl Fn() -> (Arc<dyn Store>, Option<tempfile::TempDir>) + Copy,
) {
    let mut g = c.benchmark_group(format!("resume/{name}"));
    g.sampling_mode(SamplingMode::Flat);
    for (steps, state) in states {
        let run = format!("run_resume_{steps}");
        g.bench_function(steps.to_string(), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (state, run) = (state.clone(), run.clone());
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (store, dir) = open();
                        load_crashed(store.as_ref(), &run, &state).await;
                        total += resume_once(store, *steps, &run).await;
                        drop(dir);
                    }
                    total
                }
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let states: Vec<(u64, CrashedRun)> = [100u64, 1000]
        .into_iter()
        .map(|steps| {
            let state = rt.block_on(crashed_run(steps, &format!("run_resume_{steps}")));
            eprintln!(
                "{steps}-step run: {} records, latest = {}",
                state.puts.len(),
                state.latest_names
            );
            (steps, state)
        })
        .collect();
    group(c, &rt, "memory", &states, || {
        (Arc::new(MemoryStore::new()) as Arc<dyn Store>, None)
    });
    #[cfg(feature = "rocksdb")]
    group(c, &rt, "rocksdb", &states, || {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = afk_store_rocksdb::RocksDbStore::open(afk_store_rocksdb::RocksDbConfig::new(
            dir.path().join("db"),
        ))
        .expect("open rocksdb");
        (Arc::new(store) as Arc<dyn Store>, Some(dir))
    });
}

criterion_group! {
    name = resume;
    config = support::criterion();
    targets = benches
}
criterion_main!(resume);
