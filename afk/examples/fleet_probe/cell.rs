//! One cell of the grid, in a process of its own (`fleet_probe --cell STORE RUNS LATENCY_MS
//! MODE`): opens the store by URL, starts the runs through `Runner::run_with_id`, waits for
//! them and prints one JSON line of measurements.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use afk::runner::{Agent, Outcome, Runner, RunnerConfig, RunnerStats};
use afk::store::Store;
use afk::{RunId, ThreadId};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::stores::Opened;
use crate::sys::{self, Gauge, quantile};
use crate::workload::{self, Clocks};

/// Tool steps of every run.
pub const STEPS: u64 = 10;

/// How the runs arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One run at a time (the per-store reference: what one run alone achieves).
    Alone,
    /// All runs started at once.
    Closed,
    /// Runs arriving at a fixed rate over [`Cell::window`].
    Open,
}

/// One configuration of the grid.
#[derive(Debug, Clone)]
pub struct Cell {
    /// `memory`, `rocksdb`, `redis` or `s3`.
    pub store: String,
    /// Runs started.
    pub runs: u64,
    /// Model latency.
    pub latency: Duration,
    /// How they arrive.
    pub mode: Mode,
}

impl Cell {
    /// The open loop's arrival window: one ideal run length (11 model turns), at least 1 s.
    pub fn window(&self) -> Duration {
        (self.latency * (STEPS as u32 + 1)).max(Duration::from_secs(1))
    }

    /// How long the cell may take before its unfinished runs are counted as such.
    /// `AFK_FLEET_DEADLINE_S` if set (S3 on moto needs more for 1,000 runs at 1 s).
    fn deadline(&self) -> Duration {
        let set = std::env::var("AFK_FLEET_DEADLINE_S").ok();
        if let Some(secs) = set.and_then(|v| v.parse::<u64>().ok()) {
            return Duration::from_secs(secs);
        }
        let run = self.latency * (STEPS as u32 + 1);
        let arrivals = if self.mode == Mode::Open {
            self.window()
        } else {
            Duration::ZERO
        };
        Duration::from_secs(60) + (run + arrivals) * 4
    }
}

/// What one run ended with: its time, and `None` or the kind of its failure.
type Ended = (Duration, Option<String>);

/// Run `cell` and return its measurements.
pub async fn run(cell: &Cell) -> Value {
    let opened = crate::stores::open(&cell.store).await;
    let runner = Runner::new(opened.store.clone(), RunnerConfig::default());
    warm_up(&runner).await;
    let clocks = Arc::new(Clocks::default());
    let agent = workload::agent(STEPS, cell.latency, &clocks);
    let redis_before = redis_memory(&opened).await;
    let gauge = Arc::new(Gauge::default());
    let (rss0, cpu0, stats0) = (sys::rss_bytes(), sys::cpu_us(), runner.stats());
    gauge
        .peak_rss
        .store(rss0, std::sync::atomic::Ordering::Relaxed);
    let sampler = gauge.clone().sample();
    let t0 = Instant::now();
    let (ended, unfinished) = drive(cell, &runner, &agent, &gauge).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = sys::cpu_us() - cpu0;
    sampler.abort();
    let stats = delta(runner.stats(), stats0);
    let redis_after = redis_memory(&opened).await;
    let mut out = measurements(cell, &clocks, &gauge, &ended, unfinished, secs);
    out["rss_before"] = json!(rss0);
    out["cpu_us"] = json!(cpu);
    out["store_calls"] = store_calls(&stats);
    out["redis"] = redis_delta(redis_before, redis_after);
    clean_up(&opened, cell.runs).await;
    out
}

/// One run before measuring, so the writer, connections and caches are up.
async fn warm_up(runner: &Runner) {
    let clocks = Arc::new(Clocks::default());
    let agent = workload::agent(STEPS, Duration::ZERO, &clocks);
    let run = RunId::new("warm").expect("run id");
    let thread = ThreadId::new("warm").expect("thread id");
    let _ = runner
        .run_with_id(&agent, &thread, run, "go")
        .result()
        .await;
}

fn ids(i: u64) -> (ThreadId, RunId) {
    (
        ThreadId::new(format!("t{i}")).expect("thread id"),
        RunId::new(format!("r{i}")).expect("run id"),
    )
}

/// Start run `i` as a task of its own, the way a service would per request.
fn start(runner: &Runner, agent: &Agent, gauge: &Arc<Gauge>, i: u64, set: &mut JoinSet<Ended>) {
    let (thread, run) = ids(i);
    gauge.start();
    let t = Instant::now();
    let handle = runner.run_with_id(agent, &thread, run, "go");
    let gauge = gauge.clone();
    set.spawn(async move {
        let res = handle.result().await;
        gauge.end();
        let failed = match res {
            Ok(Outcome::Completed(_)) => None,
            Ok(_) => Some("not completed (paused)".to_owned()),
            Err(e) => Some(format!("{:?}: {}", e.kind(), short(e.message()))),
        };
        (t.elapsed(), failed)
    });
}

/// The first 80 characters of `m` with every number written `N`, so the failures of many
/// runs group by what went wrong, not by run id.
fn short(m: &str) -> String {
    let mut out = String::new();
    for ch in m.chars().take(80) {
        if !ch.is_ascii_digit() {
            out.push(ch);
        } else if !out.ends_with('N') {
            out.push('N');
        }
    }
    out
}

/// Start the cell's runs as its mode says and wait for them (up to the deadline): what ended,
/// and how many had not.
async fn drive(
    cell: &Cell,
    runner: &Runner,
    agent: &Agent,
    gauge: &Arc<Gauge>,
) -> (Vec<Ended>, u64) {
    let mut set = JoinSet::new();
    let mut ended = Vec::with_capacity(cell.runs as usize);
    let deadline = tokio::time::Instant::now() + cell.deadline();
    match cell.mode {
        Mode::Alone => {
            for i in 0..cell.runs {
                start(runner, agent, gauge, i, &mut set);
                ended.extend(set.join_next().await.and_then(Result::ok));
            }
        }
        Mode::Closed => (0..cell.runs).for_each(|i| start(runner, agent, gauge, i, &mut set)),
        Mode::Open => {
            let t0 = tokio::time::Instant::now();
            let gap = cell.window() / cell.runs.max(1) as u32;
            for i in 0..cell.runs {
                tokio::time::sleep_until(t0 + gap * i as u32).await;
                start(runner, agent, gauge, i, &mut set);
                while let Some(r) = set.try_join_next() {
                    ended.extend(r.ok());
                }
            }
        }
    }
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline, set.join_next()).await {
        ended.extend(r.ok());
    }
    let unfinished = set.len() as u64;
    set.detach_all();
    (ended, unfinished)
}

fn measurements(
    cell: &Cell,
    clocks: &Clocks,
    gauge: &Gauge,
    ended: &[Ended],
    unfinished: u64,
    secs: f64,
) -> Value {
    let steps = clocks.tool_calls.load(std::sync::atomic::Ordering::Relaxed);
    let model_calls = clocks
        .model_calls
        .load(std::sync::atomic::Ordering::Relaxed);
    let waits = clocks.waits();
    let mut times: Vec<u64> = ended.iter().map(|(d, _)| d.as_micros() as u64).collect();
    times.sort_unstable();
    let mut failed: BTreeMap<String, u64> = BTreeMap::new();
    for (_, f) in ended {
        if let Some(kind) = f {
            *failed.entry(kind.clone()).or_default() += 1;
        }
    }
    // The workload as meant: every completed run made STEPS tool calls and STEPS + 1 model
    // calls, each once (a failed or unfinished run may have made fewer).
    let completed = ended.iter().filter(|(_, f)| f.is_none()).count() as u64;
    let all_done = completed == cell.runs;
    if all_done && (steps != cell.runs * STEPS || model_calls != cell.runs * (STEPS + 1)) {
        failed.insert(
            format!("workload: {steps} tool and {model_calls} model calls"),
            cell.runs,
        );
    }
    let mut lags = gauge.lags_us.lock().map(|l| l.clone()).unwrap_or_default();
    lags.sort_unstable();
    json!({
        "store": cell.store, "runs": cell.runs, "latency_ms": cell.latency.as_millis() as u64,
        "mode": format!("{:?}", cell.mode).to_lowercase(), "secs": secs, "steps": steps,
        "model_calls": model_calls,
        "run_us": [quantile(&times, 0.5), quantile(&times, 0.99), quantile(&times, 1.0)],
        "wait_us": [quantile(&waits, 0.5), quantile(&waits, 0.99), quantile(&waits, 1.0)],
        "lag_us": [quantile(&lags, 0.5), quantile(&lags, 0.99), quantile(&lags, 1.0)],
        "peak_rss": gauge.peak_rss.load(std::sync::atomic::Ordering::Relaxed),
        "peak_in_flight": gauge.peak_in_flight.load(std::sync::atomic::Ordering::Relaxed),
        "failed": failed, "unfinished": unfinished,
    })
}

fn delta(a: RunnerStats, b: RunnerStats) -> RunnerStats {
    let mut d = a;
    d.submitted -= b.submitted;
    d.durable -= b.durable;
    d.written -= b.written;
    d.coalesced -= b.coalesced;
    d.batches -= b.batches;
    d.inline_writes -= b.inline_writes;
    d.retries -= b.retries;
    d
}

fn store_calls(s: &RunnerStats) -> Value {
    json!({"submitted": s.submitted, "written": s.written, "batches": s.batches,
        "inline": s.inline_writes, "max_batch": s.max_batch_len, "retries": s.retries})
}

async fn redis_memory(opened: &Opened) -> Option<(u64, u64)> {
    sys::redis_memory(opened.redis_url.as_deref()?).await
}

fn redis_delta(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Value {
    match (before, after) {
        (Some((m0, k0)), Some((m1, k1))) => {
            json!({"bytes": m1 as i64 - m0 as i64, "keys": k1 as i64 - k0 as i64})
        }
        _ => Value::Null,
    }
}

/// Delete the cell's runs from a shared server (Redis), so the next cell starts level.
async fn clean_up(opened: &Opened, runs: u64) {
    if opened.redis_url.is_none() {
        return;
    }
    let store: &Arc<dyn Store> = &opened.store;
    use futures::StreamExt;
    futures::stream::iter(0..runs)
        .for_each_concurrent(64, |i| async move {
            let (thread, run) = ids(i);
            let _ = store.delete_run(&thread, &run).await;
        })
        .await;
    let (thread, run) = (
        ThreadId::new("warm").expect("thread"),
        RunId::new("warm").expect("run"),
    );
    let _ = store.delete_run(&thread, &run).await;
}
