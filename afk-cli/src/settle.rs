//! `afk settle` and `afk decide`: answer a stopped run for the application, without resuming
//! it ([`Runner::settle`], [`Runner::decide`]). The application's next plain `resume`
//! continues from what they wrote.

use std::sync::Arc;

use afk_core::Result;
use afk_core::runner::{Decision, Recorded, Runner, RunnerConfig, Settlement};
use afk_core::store::Store;
use serde_json::{Value, json};

use super::common::ids;
use super::output::{Ctx, Report};

/// `afk settle`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["ran", "did_not_run", "failed"])))]
pub struct SettleArgs {
    /// The run's thread.
    #[arg(long)]
    thread: String,
    /// The run stopped with `EffectUncertain`.
    #[arg(long)]
    run: String,
    /// The uncertain tool call's id (named by the error, and by `afk verify` as `uncertain`).
    #[arg(long)]
    call: String,
    /// The side effect happened; this JSON is recorded as the call's output and replayed.
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    ran: Option<Value>,
    /// The side effect did not happen; the next resume runs the call once, with the same
    /// idempotency key.
    #[arg(long)]
    did_not_run: bool,
    /// The call failed with this error; the next resume records it as a failed call.
    #[arg(long, value_name = "MSG")]
    failed: Option<String>,
}

fn parse_json(s: &str) -> Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))
}

/// `afk decide`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["approve", "deny"])))]
pub struct DecideArgs {
    /// The run's thread.
    #[arg(long)]
    thread: String,
    /// The run paused for approval.
    #[arg(long)]
    run: String,
    /// Run the paused call.
    #[arg(long)]
    approve: bool,
    /// Do not run it; the reason becomes the failed call's error.
    #[arg(long, value_name = "MSG")]
    deny: Option<String>,
}

fn written(r: Recorded) -> bool {
    r == Recorded::Written
}

/// Write the settlement. JSON: `{"thread", "run", "call", "settlement", "written"}`.
pub fn settle(args: SettleArgs, ctx: &Ctx) -> std::process::ExitCode {
    ctx.run("settle", |store| async move {
        let settlement = match (args.ran, args.did_not_run, args.failed) {
            (Some(output), _, _) => Settlement::Ran { output },
            (_, true, _) => Settlement::DidNotRun,
            (_, _, Some(error)) => Settlement::Failed { error },
            _ => {
                return Err(afk_core::Error::invalid_input(
                    "say --ran, --did-not-run or --failed",
                ));
            }
        };
        settle_report(store, &args.thread, &args.run, &args.call, settlement).await
    })
}

/// Settle `call` of `run` ([`Runner::settle`]): the report of `afk settle` (and of the same
/// action of `afk serve`).
pub async fn settle_report(
    store: Arc<dyn Store>,
    thread: &str,
    run: &str,
    call: &str,
    settlement: Settlement,
) -> Result<Report> {
    let (thread, run) = ids(thread, Some(run))?;
    let run = run.ok_or_else(|| afk_core::Error::invalid_input("--run is required"))?;
    let name = match &settlement {
        Settlement::Ran { .. } => "ran",
        Settlement::DidNotRun => "did_not_run",
        Settlement::Failed { .. } => "failed",
    };
    let runner = Runner::new(store, RunnerConfig::default());
    let rec = runner.settle(&thread, &run, call, settlement).await?;
    let human = if written(rec) {
        format!(
            "settled tool call {call} of run {run} (thread {thread}) as {name}; the next resume \
             of the run continues from it\n"
        )
    } else {
        format!(
            "tool call {call} of run {run} (thread {thread}) is already settled as {name}; \
             nothing written\n"
        )
    };
    let doc = json!({"thread": thread.as_str(), "run": run.as_str(), "call": call,
        "settlement": name, "written": written(rec)});
    Ok(Report::ok(doc, human))
}

/// Record the decision. JSON: `{"thread", "run", "decision", "reason", "written"}`.
pub fn decide(args: DecideArgs, ctx: &Ctx) -> std::process::ExitCode {
    ctx.run("decide", |store| async move {
        let decision = match args.deny {
            Some(reason) => Decision::Deny(reason),
            None => Decision::Approve,
        };
        decide_report(store, &args.thread, &args.run, decision).await
    })
}

/// Record `decision` for the paused `run` ([`Runner::decide`]): the report of `afk decide`
/// (and of the same action of `afk serve`).
pub async fn decide_report(
    store: Arc<dyn Store>,
    thread: &str,
    run: &str,
    decision: Decision,
) -> Result<Report> {
    let (thread, run) = ids(thread, Some(run))?;
    let run = run.ok_or_else(|| afk_core::Error::invalid_input("--run is required"))?;
    let (name, reason) = match &decision {
        Decision::Approve => ("approve", None),
        Decision::Deny(r) => ("deny", Some(r.clone())),
    };
    let runner = Runner::new(store, RunnerConfig::default());
    let rec = runner.decide(&thread, &run, decision).await?;
    let human = if written(rec) {
        format!(
            "recorded `{name}` for paused run {run} (thread {thread}); the next resume of \
             the run applies it\n"
        )
    } else {
        format!("run {run} (thread {thread}) already has this decision; nothing written\n")
    };
    let doc = json!({"thread": thread.as_str(), "run": run.as_str(), "decision": name,
        "reason": reason, "written": written(rec)});
    Ok(Report::ok(doc, human))
}
