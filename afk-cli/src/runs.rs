//! `afk runs --thread T`: the runs of a thread with their latest phase, step and state, as a
//! table.
//!
//! JSON: `{"thread", "runs": [{"run", "state", "step", "phase", "schema_version",
//! "timestamp_ms", "uncertain_effects", "error"?}]}`, sorted by run id (states: see
//! `status.rs`).

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload};
use afk_core::store::StoreExt;

use super::common::ids;
use super::output::{Ctx, Report, table, utc};
use super::status::{call_of, run_status};

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
            .map_or_else(|| p.state.to_string(), |r| r.state.to_string()),
        PhasePayload::Paused(_) => "paused".to_owned(),
        PhasePayload::RuntimeState(s) if !s.state.as_str().is_empty() => s.state.to_string(),
        PhasePayload::StepStarted(s) if !s.state.as_str().is_empty() => s.state.to_string(),
        _ => "running".to_owned(),
    }
}

/// One row per run (`RUN  STATE  STEP  PHASE  VERSION  LAST_ACTIVITY  NOTE`), sorted by run
/// id. A run without a pointer or with an unreadable one says so in its row.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    ctx.run("runs", |store| async move {
        let (thread, _) = ids(&args.thread, None)?;
        let mut all = Vec::new();
        for run in store.list_runs(&thread).await? {
            all.push(run_status(store.as_ref(), &thread, &run).await?);
        }
        let human = if all.is_empty() {
            format!("no runs in thread {thread}\n")
        } else {
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|s| {
                    let note = match s.state.as_str() {
                        "claimed" => "claimed, nothing saved".to_owned(),
                        "unreadable" => s.error.clone().unwrap_or_default(),
                        "uncertain" => format!(
                            "no result for call(s) {}",
                            s.uncertain_effects
                                .iter()
                                .map(|k| call_of(k))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        _ => String::new(),
                    };
                    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
                    vec![
                        s.run.clone(),
                        s.state.clone(),
                        s.step.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                        opt(&s.phase),
                        opt(&s.schema_version),
                        s.timestamp_ms.map_or_else(|| "-".to_owned(), utc),
                        note,
                    ]
                })
                .collect();
            table(
                &[
                    "RUN",
                    "STATE",
                    "STEP",
                    "PHASE",
                    "VERSION",
                    "LAST_ACTIVITY",
                    "NOTE",
                ],
                &rows,
            )
        };
        let doc = serde_json::json!({"thread": thread.as_str(), "runs": all});
        Ok(Report::ok(doc, human))
    })
}
