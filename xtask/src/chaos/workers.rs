//! The worker mode of the campaign (`cargo xtask chaos --workers`): nobody calls `resume`.
//!
//! On Redis and S3, three worker processes share the store (one with its clock 1.2 s ahead,
//! more than the 0.5 s the lease allows for skew) while new runs are submitted by processes
//! that are mostly SIGKILLed soon after they started their run; workers are SIGKILLed at
//! random and started again under the same id, and Redis itself is killed and restarted. The
//! campaign settles, from the ledger, the runs that wait on an uncertain effect (recording the
//! settlement only: a worker continues the run). On RocksDB one process owns the database: it
//! submits the runs and works on them, and is killed and started again until every run ended.
//! At the end every run must have ended with the result of the same run without crashes, each
//! at-most-once effect exactly once and each idempotent one at least once (the agent's `check`).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::proc::Proc;
use super::target::{Store, Target};
use super::{Rng, Totals};

/// The lease of every process, in ms (the allowed skew is 0.5 s).
const LEASE_MS: u64 = 2_000;
/// How far the skewed worker's clock is ahead, in ms.
const SKEW_MS: i64 = 1_200;

/// What a worker campaign on one store needs.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub bin: &'a Path,
    pub target: &'a Target,
    pub work: &'a Path,
    pub set_dir: &'a Path,
    /// Runs to submit.
    pub runs: u64,
    /// Kills to reach before the campaign may end (it goes on killing workers, and Redis,
    /// until every run ended and this many kills were made).
    pub kills: u64,
    /// Stop after this long, whatever is left.
    pub limit: Duration,
}

impl Ctx<'_> {
    fn cmd(&self, index: u64, seed: u64, owner: &str, skew: i64, sub: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin);
        cmd.args(["--store", &self.target.url])
            .args(["--thread", &format!("chaos-{index}")])
            .args(["--run", &format!("run_{index}")])
            .args(["--seed", &seed.to_string()])
            .args(["--agent-version", &index.to_string()])
            .args(["--owner", owner])
            .args(["--lease-ms", &LEASE_MS.to_string()])
            .args(["--skew-ms", &skew.to_string()])
            .arg("--ledger")
            .arg(self.work.join(format!("ledger-{index}.jsonl")));
        if let Some(ring) = &self.target.seal {
            cmd.arg("--seal-keyring").arg(ring);
        }
        cmd.args(sub);
        cmd
    }

    fn spawn(&self, cmd: Command, slot: &str) -> Result<Proc> {
        Proc::spawn(
            cmd,
            self.set_dir.join(format!("agent-{slot}.pid")),
            self.work.join(format!("stderr-{slot}.log")),
        )
    }

    fn worker(&self, i: usize, submit: bool) -> Result<Proc> {
        let runs = self.work.join("runs.txt");
        let runs = runs.to_string_lossy().into_owned();
        let mut sub = vec!["worker", "--runs", runs.as_str()];
        if submit {
            sub.push("--submit");
        }
        let skew = if i == 2 { SKEW_MS } else { 0 };
        let mut p = self.spawn(
            self.cmd(0, 0, &format!("w{i}"), skew, &sub),
            &format!("w{i}"),
        )?;
        p.wait_ready(Duration::from_secs(60));
        Ok(p)
    }

    /// Runs `pending`: how many runs have not ended, those waiting for a settlement, and those
    /// whose submitter was killed before their first commit (never stored, so never accepted:
    /// submitted again).
    fn pending(&self) -> Result<(u64, Vec<u64>, Vec<u64>)> {
        let runs = self.work.join("runs.txt").to_string_lossy().into_owned();
        let cmd = self.cmd(0, 0, "pending", 0, &["pending", "--runs", runs.as_str()]);
        let mut p = self.spawn(cmd, "pending")?;
        p.wait_exit(Duration::from_secs(60));
        let n = p.number("pending ").unwrap_or(u64::MAX);
        let numbers = |prefix: &str| -> Vec<u64> {
            p.out
                .iter()
                .filter_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
                .collect()
        };
        Ok((n, numbers("uncertain "), numbers("missing ")))
    }

    /// Settles run `index` from its ledger without resuming it.
    fn settle(&self, index: u64, seed: u64, t: &mut Totals) -> Result<()> {
        let cmd = self.cmd(index, seed, "operator", 0, &["settle", "--record-only"]);
        let mut p = self.spawn(cmd, &format!("settle-{index}"))?;
        p.wait_exit(Duration::from_secs(120));
        t.settlements += p.number("settled ").unwrap_or(0);
        Ok(())
    }
}

/// One worker campaign on `ctx`'s store; the failures, one line each.
pub fn campaign(
    ctx: &Ctx<'_>,
    seed: u64,
    t: &mut Totals,
    delays: &mut Vec<u64>,
) -> Result<Vec<String>> {
    let mut rng = Rng::new(seed);
    let runs: Vec<(u64, u64)> = (0..ctx.runs).map(|i| (i, rng.next() % 1_000_000)).collect();
    let lines: String = runs.iter().map(|(i, s)| format!("{i} {s}\n")).collect();
    fs::write(ctx.work.join("runs.txt"), lines)?;
    let start = Instant::now();
    let finished = if ctx.target.store.races() {
        shared(ctx, &runs, &mut rng, t, delays, start)?
    } else {
        single(ctx, &runs, &mut rng, t, delays, start)?
    };
    let mut failures = Vec::new();
    if !finished {
        failures.push(format!(
            "not every run ended within {:.0} s",
            ctx.limit.as_secs_f64()
        ));
    }
    for &(index, seed) in &runs {
        let mut p = ctx.spawn(
            ctx.cmd(index, seed, "check", 0, &["check"]),
            &format!("check-{index}"),
        )?;
        p.wait_exit(Duration::from_secs(300));
        t.invocations += 1;
        if !p.out.iter().any(|l| l == "check ok") {
            let why: Vec<&str> = p
                .out
                .iter()
                .filter(|l| l.starts_with("check"))
                .map(String::as_str)
                .collect();
            failures.push(format!(
                "run {index} (seed {seed}): {}{}",
                why.join(" | "),
                p.stderr_tail()
            ));
            t.failed += 1;
        } else {
            t.passed += 1;
        }
    }
    Ok(failures)
}

/// Redis and S3: three workers, a stream of submitted runs, kills of everything.
fn shared(
    ctx: &Ctx<'_>,
    runs: &[(u64, u64)],
    rng: &mut Rng,
    t: &mut Totals,
    delays: &mut Vec<u64>,
    start: Instant,
) -> Result<bool> {
    let mut workers: Vec<Proc> = (0..3)
        .map(|i| ctx.worker(i, false))
        .collect::<Result<_>>()?;
    let mut submitters: Vec<Proc> = Vec::new();
    let mut next = 0usize;
    let mut last_look = Instant::now();
    loop {
        if next < runs.len() {
            let (index, seed) = runs[next];
            let cmd = ctx.cmd(index, seed, &format!("sub{index}"), 0, &["submit"]);
            let mut p = ctx.spawn(cmd, &format!("sub-{index}"))?;
            t.invocations += 1;
            if p.wait_ready(Duration::from_secs(60)) && rng.below(4) != 0 {
                std::thread::sleep(Duration::from_millis(rng.below(400)));
                p.kill();
                t.kills += 1;
            }
            submitters.push(p);
            next += 1;
        }
        std::thread::sleep(Duration::from_millis(100 + rng.below(300)));
        // Once the kill target is reached, or three quarters of the time are gone, the workers
        // live on, so that the runs end: every kill leaves new uncertain effects to settle, and
        // on a slow store the runs would never catch up (as RocksDB's single process does).
        let killing = t.kills < ctx.kills && start.elapsed() < ctx.limit * 3 / 4;
        if killing && rng.below(2) == 0 {
            let i = rng.below(3) as usize;
            collect(&mut workers[i], delays);
            workers[i].kill();
            t.kills += 1;
            workers[i] = ctx.worker(i, false)?;
            t.invocations += 1;
        }
        if killing && ctx.target.store == Store::Redis && rng.below(40) == 0 {
            ctx.target.kill_server()?;
            std::thread::sleep(Duration::from_millis(rng.below(500)));
            ctx.target.restart_server()?;
            t.server_restarts += 1;
        }
        if next == runs.len() && last_look.elapsed() > Duration::from_secs(1) {
            last_look = Instant::now();
            let (n, uncertain, missing) = ctx.pending()?;
            for index in uncertain {
                let seed = seed_of(runs, index);
                ctx.settle(index, seed, t)?;
            }
            for &index in &missing {
                let seed = seed_of(runs, index);
                let cmd = ctx.cmd(index, seed, &format!("sub{index}"), 0, &["submit"]);
                submitters.push(ctx.spawn(cmd, &format!("sub-{index}"))?);
                t.invocations += 1;
            }
            let done = n == 0 && missing.is_empty();
            // At the time limit the kill target gives way: what counts is that every run ended.
            if done && (t.kills >= ctx.kills || start.elapsed() > ctx.limit) {
                break;
            }
        }
        if start.elapsed() > ctx.limit {
            let (n, _, missing) = ctx.pending()?;
            if n == 0 && missing.is_empty() {
                break; // every run ended, the kill target aside
            }
            return Ok(false);
        }
    }
    for w in &mut workers {
        collect(w, delays);
        w.kill();
    }
    drop(submitters);
    Ok(true)
}

/// RocksDB: one process submits and works; it is killed and started again until every run
/// ended. Between two processes the campaign looks at the database and settles what waits.
fn single(
    ctx: &Ctx<'_>,
    runs: &[(u64, u64)],
    rng: &mut Rng,
    t: &mut Totals,
    delays: &mut Vec<u64>,
    start: Instant,
) -> Result<bool> {
    loop {
        let mut w = ctx.worker(0, true)?;
        t.invocations += 1;
        // Killed 50-650 ms after it started until the kill target is reached; then it lives
        // 5 s at a time, so that the runs (re-entering uncertain effects at every kill) end.
        let life = if t.kills < ctx.kills {
            50 + rng.below(600)
        } else {
            5_000
        };
        std::thread::sleep(Duration::from_millis(life));
        collect(&mut w, delays);
        let submitted = w.number("submitted ").unwrap_or(u64::MAX);
        w.kill();
        t.kills += 1;
        let (n, uncertain, _) = ctx.pending()?;
        for index in uncertain {
            let seed = seed_of(runs, index);
            ctx.settle(index, seed, t)?;
        }
        let done = n == 0 && submitted == 0;
        // At the time limit the kill target gives way: what counts is that every run ended.
        if done && (t.kills >= ctx.kills || start.elapsed() > ctx.limit) {
            return Ok(true);
        }
        if start.elapsed() > ctx.limit {
            return Ok(false);
        }
    }
}

/// The takeover delays a worker reported so far.
fn collect(p: &mut Proc, delays: &mut Vec<u64>) {
    p.poll_lines();
    delays.extend(
        p.out
            .iter()
            .filter_map(|l| l.strip_prefix("takeover ")?.trim().parse::<u64>().ok()),
    );
    p.out.retain(|l| !l.starts_with("takeover "));
}

/// The seed of campaign run `index` (0 if it is not listed).
fn seed_of(runs: &[(u64, u64)], index: u64) -> u64 {
    runs.iter().find(|(i, _)| *i == index).map_or(0, |r| r.1)
}
