//! `afk runs --thread T`: the runs of a thread with their latest phase, step and state, as a
//! table.
//!
//! JSON: `{"thread", "runs": [{"run", "state", "step", "phase", "schema_version",
//! "timestamp_ms", "uncertain_effects", "error"?, "attention"?}]}`, sorted by run id (states:
//! see `status.rs`; `attention`, the run's entry in the index of runs that need attention, only
//! for an unfinished run that has one: see `entry.rs`). With `--page-size` also `"total_runs"`
//! (every run of the thread) and `"next_after"` (the `--after` of the next page, or null on the
//! last page).

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload};
use afk_core::store::{MAX_LIST_LIMIT, Store, StoreExt};
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
    /// One page instead of every run: at most this many runs (1 to 1000); the output ends with
    /// the `--after` of the next page.
    #[arg(long)]
    page_size: Option<usize>,
    /// With `--page-size`: only the runs whose id sorts after this one (the last run of the
    /// previous page).
    #[arg(long, requires = "page_size")]
    after: Option<String>,
    /// With `--page-size`: only the runs in this state (`paused`, `uncertain`, …).
    #[arg(long, requires = "page_size")]
    state: Option<String>,
}

/// One page of a thread's runs, by run id.
#[derive(Debug, Clone, Default)]
pub struct RunsPage {
    /// Only the runs whose id sorts after this one (the cursor: the last run the previous page
    /// looked at).
    pub after: Option<String>,
    /// At most this many runs (clamped to 1 to [`MAX_LIST_LIMIT`]).
    pub size: usize,
    /// Only the runs in this state.
    pub state: Option<String>,
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
        let page = args.page_size.map(|size| RunsPage {
            after: args.after,
            size,
            state: args.state,
        });
        report_page(store.as_ref(), &thread, now_ms(), page.as_ref()).await
    })
}

/// The report of `afk runs` for `thread`, lease times read at `now_ms`: one `page`, or every
/// run when `None`. Lists the thread's run ids (keys only) and reads the records of the runs
/// it looks at: those of the page, and with a state filter also the runs it skipped on the
/// way. Reads the index entry of each unfinished run only (a finished run has none), and none
/// on a store without the index.
pub async fn report_page(
    store: &dyn Store,
    thread: &ThreadId,
    now_ms: u64,
    page: Option<&RunsPage>,
) -> Result<Report> {
    let index = has_index(store);
    let ids = store.list_runs(thread).await?;
    let after = page.and_then(|p| p.after.as_deref());
    let size = page.map(|p| p.size.clamp(1, MAX_LIST_LIMIT));
    let mut all = Vec::new();
    let (mut last, mut next) = (None, None);
    for run in ids.iter().filter(|r| after.is_none_or(|a| r.as_str() > a)) {
        if size.is_some_and(|n| all.len() >= n) {
            next = last;
            break;
        }
        last = Some(run.as_str());
        let mut status = run_status(store, thread, run).await?;
        if page
            .and_then(|p| p.state.as_deref())
            .is_some_and(|s| s != status.state)
        {
            continue;
        }
        if index && !status.is_terminal() {
            status.attention = entry_of(store, thread, run, now_ms).await?;
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
    let mut doc = serde_json::json!({"thread": thread.as_str(), "runs": all});
    let mut human = human;
    if page.is_some() {
        doc["total_runs"] = serde_json::json!(ids.len());
        doc["next_after"] = serde_json::json!(next);
        if let Some(n) = next {
            human.push_str(&format!("next page: --after {n}\n"));
        }
    }
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
