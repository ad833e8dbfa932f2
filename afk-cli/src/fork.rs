//! `afk fork`: a new run from a run's state at the start of a chosen step, written and left
//! ready ([`Runner::prepare_fork`]): the application's next resume of the new run, or a worker
//! that has the agent, runs it from that step. The original run is left as it is.

use std::sync::Arc;

use afk_core::runner::ForkPoint;
use afk_core::runner::{Runner, RunnerConfig};
use afk_core::store::Store;
use afk_core::{Result, RunId};
use serde_json::json;

use super::common::ids;
use super::output::{Ctx, Report};

/// `afk fork`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's thread (the fork goes into the same thread).
    #[arg(long)]
    thread: String,
    /// The run to fork; it may still be running (the fork reads only the steps it left).
    #[arg(long)]
    run: String,
    /// The step the fork starts at: it runs this step again, from the state the run had when
    /// it began it (the run must have begun it; step 1 starts over from the run's input).
    #[arg(long)]
    step: u64,
    /// The new run's id (default: `<run>-fork-<step>`).
    #[arg(long, value_name = "RUN")]
    new_run: Option<String>,
    /// Replace the run's last user message before the step (its input, usually) with this
    /// text: the fork asks again, differently.
    #[arg(long, value_name = "TEXT")]
    message: Option<String>,
}

/// Write the fork. JSON: `{"thread", "run", "step", "new_run", "message_replaced"}`.
pub fn run(args: Args, ctx: &Ctx) -> std::process::ExitCode {
    ctx.run("fork", |store| async move {
        let new_run = args.new_run.as_deref();
        fork_report(
            store,
            &args.thread,
            &args.run,
            args.step,
            new_run,
            args.message,
        )
        .await
    })
}

/// Fork `run` at `step` as `new_run` (default `<run>-fork-<step>`), its last user message
/// replaced by `message` when given ([`Runner::prepare_fork`]): the report of `afk fork` (and
/// of the same action of `afk serve`).
pub async fn fork_report(
    store: Arc<dyn Store>,
    thread: &str,
    run: &str,
    step: u64,
    new_run: Option<&str>,
    message: Option<String>,
) -> Result<Report> {
    let (thread, run) = ids(thread, Some(run))?;
    let run = run.ok_or_else(|| afk_core::Error::invalid_input("--run is required"))?;
    let new_run = match new_run {
        Some(id) => RunId::new(id)?,
        None => RunId::new(format!("{run}-fork-{step}"))?,
    };
    let replaced = message.is_some();
    let mut point = ForkPoint::step(step);
    if let Some(text) = message {
        point = point.with_user_message(text);
    }
    let runner = Runner::new(store, RunnerConfig::default());
    runner.prepare_fork(&thread, &run, point, &new_run).await?;
    let human = format!(
        "forked run {run} (thread {thread}) at step {step} as run {new_run}: it starts from the \
         state run {run} had when it began step {step}; the application's next resume of \
         {new_run} (or a worker with its agent) runs it from there\n"
    );
    let doc = json!({"thread": thread.as_str(), "run": run.as_str(), "step": step,
        "new_run": new_run.as_str(), "message_replaced": replaced});
    Ok(Report::ok(doc, human))
}
