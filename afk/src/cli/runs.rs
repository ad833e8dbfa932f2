//! `afk runs --thread T`: the runs of a thread with their latest phase, step and state.

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload};

use super::common::{ids, latest, runs_of, with_store};

/// `afk runs`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread whose runs to list.
    #[arg(long)]
    thread: String,
}

/// The state a latest record says the run is in: the terminal state, `paused`, or the
/// runner state of the newest record (`running` while in progress).
pub fn state_of(rec: &CheckpointRecord) -> String {
    match &rec.payload {
        PhasePayload::RunTerminal(p) => p
            .terminal_result
            .as_ref()
            .map_or_else(|| p.state.clone(), |r| r.state.clone()),
        PhasePayload::Paused(_) => "paused".to_owned(),
        PhasePayload::RuntimeState(s) if !s.state.is_empty() => s.state.clone(),
        PhasePayload::StepStarted(s) if !s.state.is_empty() => s.state.clone(),
        _ => "running".to_owned(),
    }
}

/// Print one line per run (`<run>  step <s>  <phase>  <state>  <version>  ts <ms>`), sorted by
/// run id. A run without a pointer or with an unreadable one says so on its line.
pub fn run(args: Args, url: &str) -> ExitCode {
    with_store("runs", url, |store| async move {
        let (thread, _) = ids(&args.thread, None)?;
        let runs = runs_of(store.as_ref(), &thread).await?;
        if runs.is_empty() {
            println!("no runs in thread {thread}");
        }
        for run in runs {
            match latest(store.as_ref(), &thread, &run).await {
                Ok(Some(rec)) => println!(
                    "{run}  step {}  {}  {}  {}  ts {}",
                    rec.step,
                    rec.phase,
                    state_of(&rec),
                    rec.schema_version,
                    rec.timestamp_ms
                ),
                Ok(None) => println!("{run}  no latest pointer (claimed, nothing saved)"),
                Err(e) => println!("{run}  unreadable latest pointer: {e}"),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
