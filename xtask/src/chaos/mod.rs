//! `cargo xtask chaos`: the process-level crash campaign.
//!
//! A real runner process (`afk/examples/chaos_agent`) runs a scripted agent with an
//! at-most-once tool, an idempotent tool and a subagent with an at-most-once tool, all
//! writing to a ledger file. We start it against a real store, SIGKILL it at random moments
//! (seeded), start it again (it resumes the run, or starts it if nothing was stored), settle
//! each `EffectUncertain` from the ledger the way an operator would
//! (`Runner::resume_settling`), and at the end check: the result equals the uncrashed run's,
//! each at-most-once effect is in the ledger exactly once and each idempotent one at least
//! once, every run is terminal and `afk::verify` is clean. Also: Redis (AOF, fsync always)
//! is itself SIGKILLed and restarted mid-run; on Redis and S3 two runners race on one run;
//! a RocksDB database held by one process is refused to a second one.
//!
//! Servers run in their own set `chaos-<pid>` under `.afk-services/` with a reaper, like
//! `xtask test`, so Ctrl-C or a killed xtask leaves nothing running.

mod proc;
mod run;
mod target;
mod workers;

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

pub use target::Store;

use crate::services::{self, Needs};
use crate::system;

/// What `cargo xtask chaos` was asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Stores to run against; empty: all three.
    pub stores: Vec<Store>,
    /// Kills to reach per store (runs go on until then).
    pub kills: Option<u64>,
    /// A few dozen kills per store.
    pub quick: bool,
    /// Campaign seed (run `i` gets a seed derived from it); default: from the clock.
    pub seed: Option<u64>,
    /// Run exactly one run with this seed (the rerun command of a failure).
    pub run_seed: Option<u64>,
    /// Stop starting new runs of a store after this many minutes.
    pub minutes: Option<u64>,
    /// The worker mode: nobody calls `resume`; workers recover every run (see `workers.rs`).
    pub workers: bool,
    /// Every agent process seals the store's values (`afk_seal`), and each run's check
    /// finds no value in the clear.
    pub sealed: bool,
}

/// splitmix64, seeded: the campaign's only randomness.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What happened to one store.
#[derive(Debug, Default)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub kills: u64,
    /// Kills aimed at the start or the end of an at-most-once effect.
    pub aimed: u64,
    pub settlements: u64,
    pub server_restarts: u64,
    pub races: u64,
    pub fenced: u64,
    /// Racers whose start `run_with_id` refused (`Conflict`): the other racer had started the
    /// run after this one's own look, before or under its claim.
    pub lost_starts: u64,
    pub probes: u64,
    pub refused: BTreeSet<String>,
    pub invocations: u64,
    pub took: Duration,
}

/// Runs the campaign; returns the exit code (1 if any run failed).
pub fn run(opts: &Options) -> Result<i32> {
    let stores: Vec<Store> = if opts.stores.is_empty() {
        Store::ALL.to_vec()
    } else {
        opts.stores.clone()
    };
    let needs = Needs {
        redis: stores.contains(&Store::Redis),
        s3: stores.contains(&Store::S3),
    };
    system::ensure_debs(&needs.debs())?;
    let bin = build_agent()?;
    let (kills, minutes, max_kills) = match (opts.quick, opts.kills) {
        (true, k) => (k.unwrap_or(30), opts.minutes.unwrap_or(3), 6),
        (false, k) => (k.unwrap_or(200), opts.minutes.unwrap_or(40), 12),
    };
    let seed = opts.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let set = format!("chaos-{}", std::process::id());
    let set_dir = services::state_root().join(&set);
    fs::create_dir_all(&set_dir)?;
    services::spawn_reaper(&set)?;
    let _stop = StopSet(set_dir.clone());
    let work = system::repo_root()
        .join("target")
        .join("chaos")
        .join(std::process::id().to_string());
    eprintln!(
        "chaos: seed {seed}; per store: {kills} kills (1-{max_kills} per run, 4 times as many on S3), at most {minutes} min{}; work dir {}",
        if opts.sealed {
            "; values sealed at rest"
        } else {
            ""
        },
        work.display()
    );

    if opts.workers {
        return run_workers(opts, &stores, &bin, &set_dir, &work, seed);
    }
    let mut all = Vec::new();
    let mut failures = Vec::new();
    for store in stores {
        let dir = work.join(store.name());
        fs::create_dir_all(&dir)?;
        let mut target = target::Target::start(store, &set_dir, &dir)?;
        target.seal = opts.sealed.then(|| dir.join("keyring"));
        let ctx = run::Ctx {
            bin: &bin,
            target: &target,
            work: &dir,
            set_dir: &set_dir,
            max_kills_per_run: max_kills,
        };
        let mut t = Totals::default();
        let start = Instant::now();
        let limit = Duration::from_secs(minutes * 60);
        let mut seeds = Rng::new(seed ^ store as u64);
        let mut index = 0u64;
        loop {
            let run_seed = opts.run_seed.unwrap_or_else(|| seeds.next());
            match run::one(&ctx, run_seed, index, &mut t)? {
                Ok(()) => t.passed += 1,
                Err(why) => {
                    t.failed += 1;
                    eprintln!(
                        "chaos {}: run {index} (seed {run_seed}) FAILED: {why}",
                        store.name()
                    );
                    failures.push(format!(
                        "{} run seed {run_seed}: {}\n  rerun: cargo xtask chaos --store {} --run-seed {run_seed}",
                        store.name(),
                        one_line(&why),
                        store.name()
                    ));
                }
            }
            index += 1;
            if opts.run_seed.is_some() || t.kills >= kills {
                break;
            }
            if start.elapsed() > limit {
                eprintln!(
                    "chaos {}: time limit of {minutes} min reached at {} kills",
                    store.name(),
                    t.kills
                );
                break;
            }
        }
        t.took = start.elapsed();
        if opts.run_seed.is_none() {
            for missed in coverage(store, &t) {
                t.failed += 1;
                eprintln!("chaos {}: {missed}", store.name());
                failures.push(format!(
                    "{}: {missed}\n  rerun: cargo xtask chaos --store {} --seed {seed}",
                    store.name(),
                    store.name()
                ));
            }
        }
        eprintln!("chaos {}: {}", store.name(), summary(&t));
        all.push((store, t));
        if let Store::Redis | Store::S3 = store {
            // Stop this store's server before the next store's campaign.
            services::stop_set(&set_dir);
            fs::create_dir_all(&set_dir)?;
        }
    }

    println!();
    for f in &failures {
        println!("FAILED {f}");
    }
    for (store, t) in &all {
        println!("{:<8} {}", store.name(), summary(t));
    }
    let passed: u64 = all.iter().map(|(_, t)| t.passed).sum();
    let failed: u64 = all.iter().map(|(_, t)| t.failed).sum();
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        let _ = fs::remove_dir_all(&work);
    } else {
        println!(
            "kept the stores' data, ledgers and logs in {}",
            work.display()
        );
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The worker mode on each store: its runs, kills, takeovers and their delays.
fn run_workers(
    opts: &Options,
    stores: &[Store],
    bin: &std::path::Path,
    set_dir: &std::path::Path,
    work: &std::path::Path,
    seed: u64,
) -> Result<i32> {
    let (runs, kills, minutes) = if opts.quick {
        (10, 20, 4)
    } else {
        (100, 200, 30)
    };
    let mut failed = 0u64;
    let mut lines = Vec::new();
    for &store in stores {
        let dir = work.join(format!("workers-{}", store.name()));
        fs::create_dir_all(&dir)?;
        let mut target = target::Target::start(store, set_dir, &dir)?;
        target.seal = opts.sealed.then(|| dir.join("keyring"));
        let ctx = workers::Ctx {
            bin,
            target: &target,
            work: &dir,
            set_dir,
            runs,
            kills: opts.kills.unwrap_or(kills),
            limit: Duration::from_secs(opts.minutes.unwrap_or(minutes) * 60),
        };
        let mut t = Totals::default();
        let mut delays = Vec::new();
        let start = Instant::now();
        let failures = workers::campaign(&ctx, seed ^ store as u64, &mut t, &mut delays)?;
        t.took = start.elapsed();
        if t.kills == 0 || (store.races() && delays.is_empty()) {
            t.failed += 1;
            lines.push(format!(
                "FAILED {} workers: coverage: no kill or no takeover",
                store.name()
            ));
        }
        for f in &failures {
            lines.push(format!(
                "FAILED {} workers seed {seed}: {}",
                store.name(),
                one_line(f)
            ));
        }
        delays.sort_unstable();
        let pct = |p: usize| {
            delays
                .get(delays.len().saturating_sub(1) * p / 100)
                .copied()
                .unwrap_or(0)
        };
        let line = format!(
            "{:<8} workers: {} runs ({} passed, {} failed), {} kills, {} settlements, {} server restarts, {} takeovers (delay after the lease's end: p50 {} ms, p90 {} ms, max {} ms), {} processes, {:.0} s",
            store.name(),
            t.passed + t.failed,
            t.passed,
            t.failed,
            t.kills,
            t.settlements,
            t.server_restarts,
            delays.len(),
            pct(50),
            pct(90),
            pct(100),
            t.invocations,
            t.took.as_secs_f64()
        );
        eprintln!("chaos {line}");
        lines.push(line);
        failed += t.failed;
        if store.races() {
            services::stop_set(set_dir);
            fs::create_dir_all(set_dir)?;
        }
    }
    println!();
    for l in &lines {
        println!("{l}");
    }
    if failed == 0 {
        let _ = fs::remove_dir_all(work);
    } else {
        println!(
            "kept the stores' data, ledgers and logs in {}",
            work.display()
        );
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// What a campaign on `store` must have exercised to say anything: a campaign that never
/// settled an effect, never raced or never restarted the server proves nothing about those.
fn coverage(store: Store, t: &Totals) -> Vec<String> {
    let mut missed = Vec::new();
    let mut need = |what: &str, n: u64| {
        if n == 0 {
            missed.push(format!("coverage: no {what} in the whole campaign"));
        }
    };
    need("kill", t.kills);
    need("settlement of an uncertain effect", t.settlements);
    match store {
        Store::Rocksdb => need("second-open probe", t.probes),
        Store::Redis => {
            need("server restart", t.server_restarts);
            need("race", t.races);
        }
        Store::S3 => need("race", t.races),
    }
    missed
}

/// A failure on one line of at most 400 characters, for the final list.
fn one_line(why: &str) -> String {
    let s: Vec<&str> = why
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let s = s.join(" | ");
    match s.char_indices().nth(400) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn summary(t: &Totals) -> String {
    let refused: Vec<&str> = t.refused.iter().map(String::as_str).collect();
    format!(
        "{} runs ({} passed, {} failed), {} kills ({} aimed at an effect), {} settlements, {} server restarts, {} races \
         ({} fenced, {} lost a start), {} second-open probes (refused: {}), {} processes, {:.0} s",
        t.passed + t.failed,
        t.passed,
        t.failed,
        t.kills,
        t.aimed,
        t.settlements,
        t.server_restarts,
        t.races,
        t.fenced,
        t.lost_starts,
        t.probes,
        if refused.is_empty() {
            "-".to_owned()
        } else {
            refused.join(",")
        },
        t.invocations,
        t.took.as_secs_f64()
    )
}

/// Builds the agent binary; returns its path.
fn build_agent() -> Result<PathBuf> {
    let mut cmd = system::cargo();
    cmd.args([
        "build",
        "-p",
        "afk",
        "--features",
        "redis,s3",
        "--example",
        "chaos_agent",
    ]);
    system::run(&mut cmd)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| system::repo_root().join("target"));
    let bin = target.join("debug").join("examples").join("chaos_agent");
    bin.is_file()
        .then_some(bin.clone())
        .with_context(|| format!("built chaos_agent but found no {}", bin.display()))
}

/// Stops the campaign's servers and agents when the campaign ends (also on an error).
struct StopSet(PathBuf);

impl Drop for StopSet {
    fn drop(&mut self) {
        services::stop_set(&self.0);
    }
}
