//! One campaign run: start the agent, kill it at random moments, start it again, settle what
//! it reports uncertain, race two runners, kill the server, until the run finishes; then
//! check it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::proc::Proc;
use super::target::{Store, Target};
use super::{Rng, Totals};

/// Longest an agent process may take to open its store or to end: beyond it is a hang.
const HANG: Duration = Duration::from_secs(120);
/// Most processes one run may take before it counts as unable to finish.
const MAX_INVOCATIONS: u32 = 400;

/// Everything a run needs to start agent processes.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub bin: &'a Path,
    pub target: &'a Target,
    pub work: &'a Path,
    pub set_dir: &'a Path,
    /// Each run is killed between 1 and this many times (on S3 four times as many: its runs
    /// are long).
    pub max_kills_per_run: u64,
}

impl Ctx<'_> {
    fn cmd(&self, seed: u64, index: u64, sub: &str) -> Command {
        let mut cmd = Command::new(self.bin);
        cmd.args(["--store", &self.target.url])
            .args(["--thread", &format!("chaos-{index}")])
            .args(["--run", &format!("run_{index}")])
            .args(["--seed", &seed.to_string()])
            .arg("--ledger")
            .arg(self.ledger(index));
        if let Some(ring) = &self.target.seal {
            cmd.arg("--seal-keyring").arg(ring);
        }
        cmd.arg(sub);
        cmd
    }

    fn ledger(&self, index: u64) -> PathBuf {
        self.work.join(format!("ledger-{index}.jsonl"))
    }

    fn spawn(&self, seed: u64, index: u64, sub: &str, slot: &str) -> Result<Proc> {
        Proc::spawn(
            self.cmd(seed, index, sub),
            self.set_dir.join(format!("agent-{slot}.pid")),
            self.work.join(format!("stderr-{index}-{slot}.log")),
        )
    }
}

/// A kill delay after the agent opened its store: a quarter within 0–5 ms (before or at the
/// first commits), the rest spread over 5–150 ms. On S3, where one step takes a second or
/// two (moto answers in ~10 ms and a step makes tens of requests), a quarter of the kills
/// wait 150 ms–2 s instead, so they also land late in a run.
fn delay(rng: &mut Rng, store: Store) -> Duration {
    let ms = match rng.below(4) {
        0 => rng.below(6),
        1 if store == Store::S3 => 150 + rng.below(1851),
        _ => 5 + rng.below(146),
    };
    Duration::from_millis(ms)
}

/// Runs run `index` with `seed` to its end and checks it. `Err(why)` is a failed run.
pub fn one(ctx: &Ctx<'_>, seed: u64, index: u64, t: &mut Totals) -> Result<Result<(), String>> {
    let mut rng = Rng::new(seed);
    let most = match ctx.target.store {
        Store::S3 => ctx.max_kills_per_run * 4,
        _ => ctx.max_kills_per_run,
    };
    let mut kills_left = 1 + rng.below(most);
    let mut settle_next = false;
    let mut raced = !ctx.target.store.races();
    let mut server_killed = ctx.target.store != Store::Redis;
    let mut started = false;
    if ctx.target.store == Store::Rocksdb
        && index.is_multiple_of(5)
        && let Err(why) = probe(ctx, seed, index, t)?
    {
        return Ok(Err(why));
    }
    let mut finished = false;
    // One run in four begins with the race: two runners start the run at once, so each may
    // find it absent and then claim it after the other has started it.
    let mut race_first = !raced && rng.below(4) == 0;
    for _ in 0..MAX_INVOCATIONS {
        // Two racing runners take over: at one restart in ten, and for every other run once
        // its kills are spent.
        // (And as soon as possible while the campaign has no race yet: see `coverage`.)
        let race_now = t.races == 0 || (kills_left == 0 && rng.below(2) == 0) || rng.below(10) == 0;
        if race_first || (started && !raced && !settle_next && race_now) {
            race_first = false;
            raced = true;
            match race(ctx, seed, index, t)? {
                Ok(done) => {
                    finished = done.0;
                    settle_next = done.1;
                    if finished {
                        break;
                    }
                    continue;
                }
                Err(why) => return Ok(Err(why)),
            }
        }
        let sub = if settle_next { "settle" } else { "run" };
        let mut p = ctx.spawn(seed, index, sub, "a")?;
        t.invocations += 1;
        if p.wait_ready(HANG) {
            started = true;
            if kills_left > 0 && (t.aimed == 0 || rng.below(4) == 0) {
                // An aimed kill: right as an at-most-once tool starts (its intent is durable)
                // or right after its effect is in the ledger (its result row is not yet). The
                // campaign's first kill is one of the latter, so it always has a settlement.
                let mark = if t.aimed == 0 || rng.below(2) == 0 {
                    "effect-done"
                } else {
                    "effect-start"
                };
                if p.wait_line(mark, Duration::from_secs(5)) {
                    p.kill();
                    t.kills += 1;
                    t.aimed += 1;
                    kills_left -= 1;
                    continue;
                }
            }
            if kills_left > 0 && p.wait_exit(delay(&mut rng, ctx.target.store)).is_none() {
                if !server_killed && (t.server_restarts == 0 || rng.below(3) == 0) {
                    server_killed = true;
                    ctx.target.kill_server()?;
                    // The agent meets a dead server; it must end with an error, not hang,
                    // and the server comes back while it may still be retrying.
                    let _ = p.wait_exit(Duration::from_millis(rng.below(1000)));
                    ctx.target.restart_server()?;
                    t.server_restarts += 1;
                } else {
                    p.kill();
                    t.kills += 1;
                    kills_left -= 1;
                    continue;
                }
            }
        }
        if p.wait_exit(HANG).is_none() {
            return Ok(Err(format!(
                "`{sub}` did not end within {} s",
                HANG.as_secs()
            )));
        }
        t.settlements += p.number("settled ").unwrap_or(0);
        match p.outcome() {
            Some((w, _)) if w == "completed" => {
                finished = true;
                break;
            }
            Some((w, _)) if w == "EffectUncertain" => settle_next = true,
            // The server was away (we killed it): go again. (`Fenced` is not expected here:
            // no other runner is alive outside a race.)
            Some((w, _)) if w == "Unavailable" => {}
            other => {
                return Ok(Err(format!(
                    "`{sub}` ended {other:?} (crashed: {}):{}",
                    p.crashed(),
                    p.stderr_tail()
                )));
            }
        }
        if sub == "settle" && p.outcome().is_some_and(|(w, _)| w != "EffectUncertain") {
            settle_next = false;
        }
    }
    if !finished {
        return Ok(Err(format!(
            "the run did not finish within {MAX_INVOCATIONS} processes"
        )));
    }
    let mut p = ctx.spawn(seed, index, "check", "a")?;
    if p.wait_exit(HANG).is_none() {
        return Ok(Err("`check` did not end".to_owned()));
    }
    let fails: Vec<&String> = p
        .out
        .iter()
        .filter(|l| l.starts_with("check FAIL"))
        .collect();
    if p.out.iter().any(|l| l == "check ok") && fails.is_empty() {
        return Ok(Ok(()));
    }
    let mut why = String::from("check failed:");
    for f in fails {
        why.push_str(&format!("\n    {f}"));
    }
    if !p.out.iter().any(|l| l.starts_with("check")) {
        why.push_str(&p.stderr_tail());
    }
    Ok(Err(why))
}

/// Two runners resume the run at once, or both start it (the run begins with the race, or a
/// kill kept its first commit from the store): the one that finds it started, before or after
/// its claim, resumes it. At most one of them runs it to the end; the other is fenced, finds
/// it finished, or stops at an uncertain effect.
/// `Ok((finished, uncertain))`.
fn race(
    ctx: &Ctx<'_>,
    seed: u64,
    index: u64,
    t: &mut Totals,
) -> Result<Result<(bool, bool), String>> {
    t.races += 1;
    let mut a = ctx.spawn(seed, index, "run", "a")?;
    let mut b = ctx.spawn(seed, index, "run", "b")?;
    t.invocations += 2;
    let mut outs = Vec::new();
    for p in [&mut a, &mut b] {
        if p.wait_exit(HANG).is_none() {
            return Ok(Err("a racer did not end".to_owned()));
        }
        if p.out.iter().any(|l| l == "start-lost") {
            t.lost_starts += 1;
        }
        outs.push((p.outcome(), p.stderr_tail()));
    }
    let ran_to_end = outs
        .iter()
        .filter(|(o, _)| matches!(o, Some((w, steps)) if w == "completed" && *steps > 0))
        .count();
    if ran_to_end > 1 {
        return Ok(Err(format!(
            "race: both runners ran the run to its end: {outs:?}"
        )));
    }
    let mut finished = false;
    let mut uncertain = false;
    for (o, tail) in &outs {
        match o {
            Some((w, _)) if w == "completed" => finished = true,
            Some((w, _)) if w == "Fenced" => t.fenced += 1,
            Some((w, _)) if w == "EffectUncertain" => uncertain = true,
            other => return Ok(Err(format!("race: a runner ended {other:?}:{tail}"))),
        }
    }
    if !finished && !uncertain {
        return Ok(Err(format!("race: neither runner finished: {outs:?}")));
    }
    Ok(Ok((finished, uncertain && !finished)))
}

/// RocksDB is one process's: while one holds the database, a second open is refused with a
/// typed error, promptly, without a panic.
fn probe(ctx: &Ctx<'_>, seed: u64, index: u64, t: &mut Totals) -> Result<Result<(), String>> {
    t.probes += 1;
    let mut holder = ctx.spawn(seed, index, "hold", "hold")?;
    if !holder.wait_ready(HANG) {
        return Ok(Err(format!(
            "the holder did not open the database:{}",
            holder.stderr_tail()
        )));
    }
    let mut p = ctx.spawn(seed, index, "probe", "probe")?;
    let ended = p.wait_exit(Duration::from_secs(30));
    holder.kill();
    match (ended, p.outcome()) {
        (Some(_), Some((w, _))) if w != "opened" && !p.crashed() => {
            t.refused.insert(w);
            Ok(Ok(()))
        }
        (None, _) => Ok(Err("a second open of the RocksDB database hung".to_owned())),
        (_, o) => Ok(Err(format!(
            "a second open of the RocksDB database was not refused cleanly: {o:?} (crashed: {}):{}",
            p.crashed(),
            p.stderr_tail()
        ))),
    }
}
