//! The bench workload once, for profilers and `afk/benches/side_by_side.py`:
//! `perf_probe run N MODE RUNS [memory|redis]` runs RUNS runs of the scripted N-step agent
//! (`benches/support`: one tool call per step, instant model and tool) with MODE `async` or
//! `sync` checkpoint writes, and prints one JSON line: steps/s, and commits and store round
//! trips per step counted at the store (`PROBE_RAW=1`: no counting wrapper, for profiles;
//! `PROBE_CT=1`: a current-thread runtime, so a profile sees one thread; `PROBE_CONC=K`: K runs
//! in flight at once instead of one after another; `PROBE_SPAWN=1`: the driver awaits the runs
//! from a task of the runtime instead of from `block_on` on the main thread; `PROBE_FORGET=1`:
//! the memory store keeps no record, only fences and latest pointers, to measure what keeping
//! them costs, see `benches/support/forgetful.rs`).
//! Redis needs `AFK_TEST_REDIS_URL` and `--features redis`.
//!
//! `valgrind --tool=callgrind perf_probe run 10 async 101` minus the same with RUNS 1 gives the
//! instructions of 100 runs (see BENCHMARKS.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a probe: failures should stop it

#[path = "../benches/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use afk::{MemoryStore, RunId, store::Store};
use futures::StreamExt;
use support::counting::{Counter, CountingStore};

fn usage() -> ! {
    eprintln!("usage: perf_probe run N async|sync RUNS [memory|redis]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 || args[0] != "run" {
        usage();
    }
    let steps: u64 = args[1].parse().unwrap_or_else(|_| usage());
    let async_writes = match args[2].as_str() {
        "async" => true,
        "sync" => false,
        _ => usage(),
    };
    let runs: u64 = args[3].parse().unwrap_or_else(|_| usage());
    let backend = args.get(4).map_or("memory", String::as_str).to_owned();
    // `PROBE_CT=1`: a current-thread runtime (one thread: a deterministic profile).
    let rt = if std::env::var_os("PROBE_CT").is_some_and(|v| v == "1") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        support::runtime()
    };
    let main = async move {
        let store: Arc<dyn Store> = match backend.as_str() {
            "memory" if std::env::var_os("PROBE_FORGET").is_some_and(|v| v == "1") => Arc::new(
                support::forgetful::ForgetfulStore::new(Arc::new(MemoryStore::new())),
            ),
            "memory" => Arc::new(MemoryStore::new()),
            #[cfg(feature = "redis")]
            "redis" => {
                let url = support::servers::redis_url().expect("AFK_TEST_REDIS_URL");
                Arc::new(support::servers::redis_store(&url).await)
            }
            _ => usage(),
        };
        let counting = Arc::new(CountingStore::new(store.clone(), Counter::default()));
        let raw = std::env::var_os("PROBE_RAW").is_some_and(|v| v == "1");
        let runner = if raw {
            support::runner(store, async_writes)
        } else {
            support::runner(counting.clone(), async_writes)
        };
        let agent = support::agent(steps);
        let tag = support::servers::unique("probe");
        let t0 = Instant::now();
        // `PROBE_CONC=K`: K runs in flight at once (default 1: one after another).
        let conc: usize = std::env::var("PROBE_CONC")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let (runner, agent, tag) = (&runner, &agent, &tag);
        futures::stream::iter(0..runs)
            .map(|i| async move {
                let run = RunId::new(format!("run_{tag}_{i}")).expect("run id");
                support::run_to_end(runner, agent, run).await;
            })
            .buffer_unordered(conc.max(1))
            .collect::<Vec<()>>()
            .await;
        let secs = t0.elapsed().as_secs_f64();
        let total = (steps * runs) as f64;
        let calls = counting.hooks().calls() as f64;
        let commits = counting.hooks().totals().0 as f64;
        if backend != "memory" {
            let t = support::thread();
            for i in 0..runs {
                let run = RunId::new(format!("run_{tag}_{i}")).expect("run id");
                let _ = counting.delete_run(&t, &run).await;
            }
        }
        println!(
            "{{\"backend\": \"{backend}\", \"mode\": \"{}\", \"steps\": {steps}, \"runs\": {runs}, \
             \"seconds\": {secs:.4}, \"steps_per_s\": {:.1}, \"commits_per_step\": {:.2}, \
             \"round_trips_per_step\": {:.2}}}",
            args[2],
            total / secs,
            commits / total,
            calls / total,
        );
    };
    if std::env::var_os("PROBE_SPAWN").is_some_and(|v| v == "1") {
        rt.block_on(async { tokio::spawn(main).await.unwrap() });
    } else {
        rt.block_on(main);
    }
}
