//! A durable agent run for the process-level chaos campaign (`cargo xtask chaos`), and a
//! worked example of what an operator does after a crash.
//!
//! The agent (built from `--seed`, see `plan.rs`) runs 6–15 steps: an at-most-once `charge`
//! and an idempotent `lookup` (both append a line with their idempotency key to a ledger file
//! and fsync it), and every third step a delegation to the `refunder` subagent, whose own
//! `refund` tool is at-most-once too. The campaign kills this process with SIGKILL at random
//! moments and starts it again:
//!
//! * `run`: resume the run if it exists, else start it. Prints `ready` once the store is open,
//!   `start-lost` if another runner started the run first (then it resumes the run), then
//!   `outcome <completed|paused|ErrorKind> steps=<steps this process ran>`.
//! * `settle`: the run stopped with `EffectUncertain`; find out from the ledger whether the
//!   uncertain call's effect happened (is its idempotency key there?) and
//!   `Runner::resume_settling` it as `Ran` (with the ledger's output) or `DidNotRun`, then
//!   resume. Prints `settled <n>` and an `outcome` line.
//! * `check`: the run is finished; compare it with an uncrashed run of the same agent and
//!   check the ledger and `afk::verify`. Prints `check ok` or `check FAIL <why>` lines.
//! * `hold` / `probe`: open the store and keep it open / try to open it once (a RocksDB
//!   database is one process's: the second must be refused with a typed error).
//! * `worker`: the worker mode. A `Worker` (owner `--owner`, lease `--lease-ms`, its clock
//!   off by `--skew-ms`) with the agents of every run listed in `--runs` (lines `<index>
//!   <seed>`; run `run_<index>` of thread `chaos-<index>`, agent version `<index>`); with
//!   `--submit` it first starts the listed runs not yet stored (RocksDB, one process). Prints
//!   `ready`, then a `takeover <ms>` line for each lease it took over, until killed.
//! * `pending`: prints `pending <n>` (runs of the campaign's threads that have not finished)
//!   and an `uncertain <index>` line for each run waiting for a settlement.
//! * `settle --record-only`: settle without resuming (a worker continues the run).
//!
//! Build: `cargo build -p afk --features redis,s3 --example chaos_agent`.

mod check;
mod plan;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use afk::keys::{ParsedKey, parse_key};
use afk::runner::{
    Clock, Outcome, RunEvent, Runner, RunnerConfig, Settlement, SystemClock, ToolContext,
};
use afk::schema::EffectRow;
use afk::store::{Store, latest_key};
use afk::verify::verify_thread;
use afk::{Error, ErrorKind, RunId, ThreadId};
use clap::{Parser, Subcommand};

use plan::{CHARGE, Plan, REFUND, REFUNDER};

#[derive(Debug, Parser)]
#[command(about = "A scripted durable agent for `cargo xtask chaos`")]
struct Cli {
    /// Store URL (`rocksdb:///…`, `redis://…`, `s3://…`).
    #[arg(long)]
    store: String,
    /// Thread id.
    #[arg(long, default_value = "chaos")]
    thread: String,
    /// Run id.
    #[arg(long, default_value = "run_chaos")]
    run: String,
    /// Seed of the agent's script.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The ledger file the tools append to.
    #[arg(long, default_value = "ledger.jsonl")]
    ledger: PathBuf,
    /// The agent's version (the worker mode names each run's agent by its index).
    #[arg(long, default_value = "")]
    agent_version: String,
    /// This process's owner id (default: a new one).
    #[arg(long)]
    owner: Option<String>,
    /// The lease of the runs this process holds, in ms.
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// How far this process's clock is off, in ms (may be negative).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    skew_ms: i64,
    /// Seal every value at rest (`afk_seal::SealedStore`): data keys in this directory's
    /// keyring (shared by the campaign's processes), wrapped by the campaign's fixed key.
    #[arg(long, value_name = "DIR")]
    seal_keyring: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The system clock, off by a fixed amount: a machine whose clock is wrong.
#[derive(Debug)]
struct SkewedClock(i64);

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms().saturating_add_signed(self.0)
    }
}

/// The runner settings of this process: its owner, lease and clock, a lease skew allowance
/// of 500 ms.
fn runner_config(cli: &Cli) -> RunnerConfig {
    let mut c = RunnerConfig::default()
        .with_lease(Duration::from_millis(cli.lease_ms))
        .with_lease_skew(Duration::from_millis(500))
        .with_clock(Arc::new(SkewedClock(cli.skew_ms)));
    if let Some(o) = &cli.owner {
        c = c.with_owner(o.clone());
    }
    c
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Resume the run if it exists, else start it.
    Run,
    /// Settle the uncertain at-most-once calls from the ledger, then resume.
    Settle {
        /// Record the settlements only; a worker continues the run.
        #[arg(long)]
        record_only: bool,
    },
    /// Run a worker over the runs listed in `--runs`.
    Worker {
        /// Lines `<index> <seed>`.
        #[arg(long)]
        runs: PathBuf,
        /// Start the listed runs that are not stored yet (one process owns a RocksDB store).
        #[arg(long)]
        submit: bool,
    },
    /// Count the campaign's unfinished runs and name those waiting for a settlement (and,
    /// with `--runs`, the listed runs that were never stored: `missing <index>`).
    Pending {
        /// Lines `<index> <seed>`.
        #[arg(long)]
        runs: Option<PathBuf>,
    },
    /// Start the run if nothing of it is stored (never resumes it): a request to a service.
    Submit,
    /// Check the finished run (result, ledger, verify).
    Check,
    /// Open the store and keep it open until killed.
    Hold,
    /// Open the store once; prints `outcome opened` or `outcome <ErrorKind>`.
    Probe,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            println!("outcome {:?} steps=0", e.kind());
            eprintln!("chaos_agent: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> afk::Result<ExitCode> {
    let opened = afk::open(&cli.store).await;
    if let Cmd::Probe = cli.cmd {
        let word = match &opened {
            Ok(_) => "opened".to_owned(),
            Err(e) => format!("{:?}", e.kind()),
        };
        if let Err(e) = &opened {
            eprintln!("chaos_agent: {e}");
        }
        println!("outcome {word} steps=0");
        return Ok(ExitCode::SUCCESS);
    }
    let raw = opened?;
    let store = match &cli.seal_keyring {
        Some(dir) => sealed(raw.clone(), dir)?,
        None => raw.clone(),
    };
    println!("ready");
    let thread = ThreadId::new(cli.thread.clone())?;
    let run = RunId::new(cli.run.clone())?;
    let plan = Plan::from_seed(cli.seed);
    let agent = plan
        .agent(&cli.ledger)
        .with_version(cli.agent_version.clone());
    let runner = Runner::new(store.clone(), runner_config(&cli));
    match &cli.cmd {
        Cmd::Worker { runs, submit } => return worker::run(&runner, &cli, runs, *submit).await,
        Cmd::Pending { runs } => return worker::pending(store.as_ref(), runs.as_deref()).await,
        _ => {}
    }
    match cli.cmd {
        Cmd::Worker { .. } | Cmd::Pending { .. } => Ok(ExitCode::SUCCESS),
        Cmd::Submit => {
            if store.get(&thread, &latest_key(&run)).await?.is_some() {
                println!("outcome exists steps=0");
                return Ok(ExitCode::SUCCESS);
            }
            Ok(report(
                drive(runner.run_with_id(&agent, &thread, run.clone(), "go")).await,
            ))
        }
        Cmd::Hold => {
            tokio::time::sleep(std::time::Duration::from_secs(600)).await;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Probe => Ok(ExitCode::SUCCESS),
        Cmd::Run => {
            let exists = store.get(&thread, &latest_key(&run)).await?.is_some();
            let out = if exists {
                drive(runner.resume(&agent, &thread, &run)).await
            } else {
                match drive(runner.run_with_id(&agent, &thread, run.clone(), "go")).await {
                    // A racer found the store empty too and started the run first (a run
                    // whose first commit a kill kept from the store looks never started):
                    // resume it, as the error says.
                    (Err(e), _) if e.kind() == ErrorKind::Conflict => {
                        eprintln!("chaos_agent: {e}; resuming");
                        println!("start-lost");
                        drive(runner.resume(&agent, &thread, &run)).await
                    }
                    other => other,
                }
            };
            Ok(report(out))
        }
        Cmd::Settle { record_only } => {
            let settled = settle_all(&runner, &plan, &cli, &thread, &run, record_only).await?;
            println!("settled {settled}");
            if record_only {
                println!("outcome settled steps=0");
                return Ok(ExitCode::SUCCESS);
            }
            Ok(report(drive(runner.resume(&agent, &thread, &run)).await))
        }
        Cmd::Check => {
            let scratch = cli.ledger.parent().map(PathBuf::from).unwrap_or_default();
            let expected = match check::baseline(&plan, &scratch).await {
                Ok(f) => f,
                Err(e) => {
                    println!("check FAIL {e}");
                    return Ok(ExitCode::from(1));
                }
            };
            let result = match runner.resume(&agent, &thread, &run).result().await {
                Ok(Outcome::Completed(r)) => r,
                other => {
                    println!("check FAIL the run is not finished: {other:?}");
                    return Ok(ExitCode::from(1));
                }
            };
            let ledger = match check::read_ledger(&cli.ledger) {
                Ok(l) => l,
                Err(e) => {
                    println!("check FAIL {e}");
                    return Ok(ExitCode::from(1));
                }
            };
            let failures = check::check(
                &plan,
                store.as_ref(),
                &thread,
                &run,
                &result,
                &ledger,
                &expected,
            )
            .await;
            let mut failures = failures;
            if cli.seal_keyring.is_some() {
                failures.extend(check::all_sealed(raw.as_ref(), &thread).await);
            }
            for f in &failures {
                println!("check FAIL {}", f.replace('\n', " |"));
            }
            if failures.is_empty() {
                println!("check ok");
                return Ok(ExitCode::SUCCESS);
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// The campaign's key-encryption key (a test key: the campaign checks sealing, not secrecy).
const CHAOS_KEK: &str = "chaos=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// `raw` with every value sealed, data keys in the keyring directory `dir`.
fn sealed(raw: Arc<dyn Store>, dir: &std::path::Path) -> afk::Result<Arc<dyn Store>> {
    let keys = afk_seal::StaticKeys::parse(CHAOS_KEK)?;
    let ring = afk_seal::DirKeyring::open(dir)?;
    Ok(Arc::new(afk_seal::SealedStore::new(
        raw,
        Arc::new(keys),
        Arc::new(ring),
    )))
}

/// Await a run, counting the steps this process started (a resume of a terminal run starts
/// none: that is how a racer that found the run finished differs from the one that ran it).
async fn drive(mut handle: afk::runner::RunHandle) -> (afk::Result<Outcome>, u64) {
    let mut events = handle.events();
    let steps = tokio::spawn(async move {
        let mut n = 0u64;
        if let Some(rx) = events.as_mut() {
            loop {
                match rx.recv().await {
                    Ok(RunEvent::StepStarted { .. }) => n += 1,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => n += k,
                    Err(_) => break,
                }
            }
        }
        n
    });
    let out = handle.result().await;
    let steps = steps.await.unwrap_or(0);
    (out, steps)
}

fn report((out, steps): (afk::Result<Outcome>, u64)) -> ExitCode {
    match out {
        Ok(Outcome::Completed(r)) if r.state == "completed" => {
            println!("outcome completed steps={steps}");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Completed(r)) => {
            println!("outcome ended_{} steps={steps}", r.state);
            eprintln!("chaos_agent: run ended {}: {}", r.state, r.final_text);
            ExitCode::from(2)
        }
        Ok(Outcome::Paused { .. }) => {
            println!("outcome paused steps={steps}");
            ExitCode::from(2)
        }
        Ok(other) => {
            println!("outcome other steps={steps}");
            eprintln!("chaos_agent: run ended {other:?}");
            ExitCode::from(2)
        }
        Err(e) => {
            println!("outcome {:?} steps={steps}", e.kind());
            eprintln!("chaos_agent: {e}");
            ExitCode::from(2)
        }
    }
}

/// Settle every at-most-once call of the thread that has an intent row and no result: what
/// an operator does with the ledger. Children first (a child's settlement completes the
/// child; the parent's resume then takes the child's result). Returns how many were settled.
async fn settle_all(
    runner: &Runner,
    plan: &Plan,
    cli: &Cli,
    thread: &ThreadId,
    run: &RunId,
    record_only: bool,
) -> afk::Result<u64> {
    let ledger = check::read_ledger(&cli.ledger).map_err(Error::corrupt)?;
    let store = runner.store().clone();
    let mut targets: Vec<(RunId, u64, String)> = Vec::new();
    for report in verify_thread(store.as_ref(), thread).await? {
        for note in report.uncertain() {
            if let Ok(ParsedKey::Effect { run, step, call_id }) = parse_key(&note.key)
                && is_at_most_once(store.as_ref(), thread, &note.key).await?
            {
                targets.push((run, step, call_id));
            }
        }
    }
    targets.sort_by_key(|(r, ..)| r == run); // children (false) first
    let agent = plan
        .agent(&cli.ledger)
        .with_version(cli.agent_version.clone());
    let mut settled = 0;
    for (target, step, call_id) in targets {
        let key = ToolContext::idempotency_key_for(target.as_str(), step, &call_id);
        let settlement = match ledger.iter().find(|e| e.key == key) {
            Some(e) => Settlement::Ran {
                output: e.output.clone(),
            },
            None => Settlement::DidNotRun,
        };
        let who = if &target == run {
            agent.clone()
        } else {
            agent
                .subagent(REFUNDER)
                .cloned()
                .ok_or_else(|| Error::unexpected("no refunder subagent"))?
        };
        eprintln!("chaos_agent: settling {target} {call_id} as {settlement:?}");
        if record_only {
            match runner.settle(thread, &target, &call_id, settlement).await {
                Ok(_) => settled += 1,
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        let handle = runner.resume_settling(&who, thread, &target, call_id, settlement);
        match handle.result().await {
            Ok(_) => settled += 1,
            // Settled by an earlier, killed, settle: the row is there, resume goes on.
            Err(e) if e.kind() == ErrorKind::Conflict => settled += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(settled)
}

/// Whether the effect row at `key` belongs to an at-most-once tool.
async fn is_at_most_once(store: &dyn Store, thread: &ThreadId, key: &str) -> afk::Result<bool> {
    let Some(bytes) = store.get(thread, key).await? else {
        return Ok(false);
    };
    let row: EffectRow = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupt_record(key, format!("effect row: {e}")))?;
    Ok(matches!(row.tool_name.as_deref(), Some(CHARGE | REFUND)))
}
