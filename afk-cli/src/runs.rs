//! `afk runs --thread T`: the runs of a thread with their latest phase, step and state, as a
//! table.
//!
//! JSON: `{"thread", "runs": [{"run", "state", "step", "phase", "schema_version",
//! "timestamp_ms", "uncertain_effects", "error"?, "attention"?}]}`, sorted by run id (states:
//! see `status.rs`; `attention`, the run's entry in the index of runs that need attention, only
//! for an unfinished run that has one: see `entry.rs`).

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload};
use afk_core::store::{Store, StoreExt};
use afk_core::{Result, ThreadId};

use super::common::ids;
use super::entry::{entry_of, has_index, now_ms};
use super::output::{Ctx, Report, table, utc};
use super::status::{RunStatus, call_of, run_status};

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
/// id. A run without a pointer or with an unreadable one says so in its row. When a listed run
/// has an entry in the store's index of runs that need attention, the table gains the columns
/// `ENTRY  OWNER  LEASE` before `NOTE` (see `entry.rs`).
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    ctx.run("runs", |store| async move {
        let (thread, _) = ids(&args.thread, None)?;
        report(store.as_ref(), &thread, now_ms()).await
    })
}

/// The report of `afk runs` for `thread`, lease times read at `now_ms`. Reads the index entry
/// of each unfinished run only (a finished run has none), and none on a store without the
/// index.
pub async fn report(store: &dyn Store, thread: &ThreadId, now_ms: u64) -> Result<Report> {
    let index = has_index(store);
    let mut all = Vec::new();
    for run in store.list_runs(thread).await? {
        let mut status = run_status(store, thread, &run).await?;
        if index && !status.is_terminal() {
            status.attention = entry_of(store, thread, &run, now_ms).await?;
        }
        all.push(status);
    }
    let human = if all.is_empty() {
        format!("no runs in thread {thread}\n")
    } else {
        let with_entry = all.iter().any(|s| s.attention.is_some());
        let mut headers = vec!["RUN", "STATE", "STEP", "PHASE", "VERSION", "LAST_ACTIVITY"];
        if with_entry {
            headers.extend(["ENTRY", "OWNER", "LEASE"]);
        }
        headers.push("NOTE");
        let rows: Vec<Vec<String>> = all.iter().map(|s| row(s, with_entry)).collect();
        table(&headers, &rows)
    };
    let doc = serde_json::json!({"thread": thread.as_str(), "runs": all});
    Ok(Report::ok(doc, human))
}

/// A run's row; with the entry's columns when `with_entry`.
fn row(s: &RunStatus, with_entry: bool) -> Vec<String> {
    let mut note = match s.state.as_str() {
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
    let mut row = vec![
        s.run.clone(),
        s.state.clone(),
        s.step.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        opt(&s.phase),
        opt(&s.schema_version),
        s.timestamp_ms.map_or_else(|| "-".to_owned(), utc),
    ];
    if with_entry {
        match &s.attention {
            Some(e) => {
                row.extend([e.state.clone(), e.owner_text(), e.lease_text()]);
                let more = e.note();
                if !more.is_empty() {
                    note = if note.is_empty() {
                        more
                    } else {
                        format!("{note}; {more}")
                    };
                }
            }
            None => row.extend(["-".to_owned(), "-".to_owned(), "-".to_owned()]),
        }
    }
    row.push(note);
    row
}
