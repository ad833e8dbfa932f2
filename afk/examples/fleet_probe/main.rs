//! The concurrency bench: many runs in flight in one process, as a service runs them.
//!
//! `cargo run -p afk --release --features rocksdb,redis,s3 --example fleet_probe -- [OPTIONS]`
//! starts, for every configuration of the grid, N runs of 10 tool steps each through the public API
//! (`afk::open(url)`, `Runner::new` with the default config, one `Runner::run_with_id` per run,
//! each awaited from a task of its own), with the bench script behind a model that answers after
//! a set latency and an instant idempotent tool, and prints a Markdown table (also written to
//! `--out PATH`). `cargo xtask bench` runs it with its servers and appends the table to
//! `bench-report.md`.
//!
//! Each configuration (a *cell*) runs in a fresh process of its own (this binary with
//! `--cell`), so CPU time and memory are the cell's alone; each store is fresh (RocksDB in a
//! temporary directory with the default settings, WAL synced; Redis under a new key prefix,
//! its keys deleted after the cell; S3 in a new bucket). Per store, a reference cell first runs
//! 50 runs one at a time with an instant model: the time of one run alone, `t1`.
//!
//! The grid (flags, or the environment variables in brackets; lists are comma-separated):
//! - `--stores` [`AFK_FLEET_STORES`]: `memory,rocksdb,redis,s3` (default all; Redis and S3
//!   need `--features redis,s3` and the `AFK_TEST_…` variables of `cargo xtask services up`,
//!   and are skipped with a line without them);
//! - `--runs` [`AFK_FLEET_RUNS`]: runs in flight, default `1,100,1000,10000` (S3: `--s3-runs`
//!   [`AFK_FLEET_S3_RUNS`], default `1000`);
//! - `--latencies` [`AFK_FLEET_LATENCIES_MS`]: model latency in ms, default `0,50,1000`;
//! - `--loops` [`AFK_FLEET_LOOPS`]: `closed` (all N started at once) and `open` (N runs arriving
//!   at a fixed rate over a window of one ideal run, `11 × latency`, at least 1 s), default both;
//! - `--allocators` [`AFK_FLEET_ALLOCATORS`]: the `malloc` each cell's process runs with,
//!   default `system` (the C library's); `jemalloc` preloads Debian's `libjemalloc2`
//!   (`LD_PRELOAD`; another file with [`AFK_FLEET_JEMALLOC`]), and a path preloads that
//!   library. Each cell runs once per entry; its rows read `store + allocator`. An application
//!   picks its allocator itself (for jemalloc, the `tikv-jemallocator` crate's
//!   `#[global_allocator]`); this shows what the choice is worth with many runs in flight;
//! - `--quick` [`AFK_FLEET_QUICK=1`]: a smoke grid, runs `1,100,1000`, latencies `0,50`, S3 runs
//!   `100` (about a minute);
//! - `--out PATH`: also write the table there.
//!
//! What each column means:
//! - **steps/s**: tool steps done ÷ the cell's time (first start to last end);
//! - **of ideal**: steps/s ÷ the ideal: every run's 11 model turns back to back, a run never
//!   faster than one run alone (`t1`): `N × 10 ÷ max(11 × latency, t1)` closed, and
//!   `N × 10 ÷ (last arrival + max(11 × latency, t1))` open. At 0 ms the ideal is N runs each as fast
//!   as one alone, which two cores cannot reach: there it says how much running many at once
//!   gains over one at a time;
//! - **run p50/p99**: the time of a run from `run_with_id` to its result;
//! - **store wait p50/p99/max**: per tool step, the time from the model's answer (the moment the
//!   model client returns) to the tool's call. `Runner::stats()` counts commits and store calls
//!   but no wait times, so this is timed around what the tool sees. It holds the runner's work
//!   between the two (recording the answer and the tool's intent), the write barrier before the
//!   tool (the store round trip, or the wait for a write in flight), and any time the run's task
//!   waits for a worker thread: an upper bound on the store wait, and on a busy process mostly
//!   queueing for the CPU (the **lag** column shows how late a 10 ms timer fires);
//! - **CPU/step**: user + system CPU time of the process over the cell ÷ steps (`utime` +
//!   `stime` of `/proc/self/stat`, what `getrusage` reads, in 10 ms ticks: meaningless for N = 1);
//!   it holds the in-process store (memory, RocksDB) and the clients, not the Redis server or
//!   the S3 service;
//! - **RSS/run**: (highest `VmRSS` sampled every 10 ms − `VmRSS` before the runs) ÷ the most
//!   runs in flight at once; the memory store keeps every finished run too;
//! - **store calls/step**: store calls that wrote commits (`Runner::stats().batches`: batches
//!   of the background writer and writes a barrier made itself) ÷ tool steps, and the most
//!   commits one call carried (`max_batch_len`), and the share of calls a run's barrier made
//!   itself on its own task (`inline_writes`): whether runs share round trips;
//! - **failed**: runs that ended with an error (by kind) or did not end within the cell's
//!   deadline (60 s + 4 × the ideal, or `AFK_FLEET_DEADLINE_S` seconds: on moto, 1,000 S3 runs
//!   at 1 s take longer than the default allows); and, when every run completed but the
//!   workload was not the one meant (10 tool calls and 11 model calls per run, each once:
//!   counted by the model and the tool), a `workload:` entry with the counts;
//! - **Redis bytes/run**: the change of `used_memory` (`INFO memory`) over the cell ÷ runs, and
//!   keys per run (`DBSIZE`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a probe: failures should stop it

#[path = "../../benches/support/mod.rs"]
mod support;

mod cell;
mod grid;
mod stores;
mod sys;
mod table;
mod workload;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--cell") {
        let cell = grid::parse_cell(&args[1..]).unwrap_or_else(|e| grid::usage(&e));
        let rt = support::runtime();
        let out = rt.block_on(cell::run(&cell));
        println!("{out}");
        // Runs left unfinished at the deadline hold the runtime: do not wait for them.
        std::process::exit(0);
    }
    let grid = grid::Grid::from_args(&args).unwrap_or_else(|e| grid::usage(&e));
    let report = grid.run();
    println!("{report}");
    if let Some(out) = &grid.out {
        std::fs::write(out, &report).expect("write --out");
        eprintln!("wrote {}", out.display());
    }
}
