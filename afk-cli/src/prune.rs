//! `afk prune --thread T (--run R | --keep-last N) [--dry-run] [--force]`: delete runs.
//!
//! A run that still needs someone (in progress or claimed, paused, uncertain, or with an
//! unreadable pointer; see `status.rs`) is never deleted without `--force`: `--run` on such a
//! run is refused (exit 1, nothing deleted), `--keep-last` skips it and says so. `--dry-run`
//! prints what would be deleted and deletes nothing.
//!
//! JSON: `{"thread", "dry_run", "force", "deleted": [{"run", "state", "keys"}], "kept":
//! [{"run", "state"}], "skipped": [{"run", "state"}], "keys"}`; with `--dry-run`, `deleted`
//! lists what would be deleted.

use std::process::ExitCode;

use afk_core::store::StoreExt;
use afk_core::{Error, RunId};
use serde_json::json;

use super::common::{ids, keys_of_run};
use super::output::{Ctx, Report, wl};
use super::status::{RunStatus, run_status};

/// `afk prune`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["run", "keep_last"])))]
pub struct Args {
    /// The thread to prune.
    #[arg(long)]
    thread: String,
    /// Delete this run.
    #[arg(long)]
    run: Option<String>,
    /// Keep the newest N runs (by their latest record's timestamp), delete the others. Runs
    /// without a readable latest pointer count as oldest.
    #[arg(long)]
    keep_last: Option<usize>,
    /// Only say what would be deleted.
    #[arg(long)]
    dry_run: bool,
    /// Also delete runs that are in progress, paused or uncertain.
    #[arg(long)]
    force: bool,
}

/// Prints `deleted <run> (<n> keys)` (or `would delete`) per run, `kept <run>` and `skipped
/// <run> (<state>)` for the others, then a count. Exit 0; 1 when `--run` names a run with no
/// keys or one that needs `--force`.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    ctx.run("prune", |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let mut doomed: Vec<RunStatus> = Vec::new();
        let (mut kept, mut skipped) = (Vec::new(), Vec::new());
        let mut o = String::new();
        if let Some(run) = run {
            if keys_of_run(store.as_ref(), &thread, &run).await?.is_empty() {
                return Err(Error::not_found(format!(
                    "run {run} has no keys in thread {thread}"
                )));
            }
            let st = run_status(store.as_ref(), &thread, &run).await?;
            if !st.is_terminal() && !args.force {
                return Err(Error::conflict(format!(
                    "run {run} of thread {thread} is {}; it is not deleted without --force",
                    st.state
                ))
                .with_key(afk_core::store::latest_key(&run)));
            }
            doomed.push(st);
        } else {
            let keep = args.keep_last.unwrap_or(usize::MAX);
            let mut all = Vec::new();
            for run in store.list_runs(&thread).await? {
                all.push(run_status(store.as_ref(), &thread, &run).await?);
            }
            // Newest first; ties by run id so the choice is stable.
            all.sort_by(|a, b| {
                b.timestamp_ms
                    .unwrap_or(0)
                    .cmp(&a.timestamp_ms.unwrap_or(0))
                    .then_with(|| a.run.cmp(&b.run))
            });
            for (i, st) in all.into_iter().enumerate() {
                if i < keep {
                    wl!(o, "kept {}", st.run);
                    kept.push(json!({"run": st.run, "state": st.state}));
                } else if !st.is_terminal() && !args.force {
                    wl!(o, "skipped {} ({}; --force deletes it)", st.run, st.state);
                    skipped.push(json!({"run": st.run, "state": st.state}));
                } else {
                    doomed.push(st);
                }
            }
        }
        let mut total = 0;
        let mut deleted = Vec::new();
        for (i, st) in doomed.iter().enumerate() {
            progress.tick("deleting runs", i, Some(doomed.len()));
            let run = RunId::new(st.run.as_str())?;
            let n = if args.dry_run {
                let n = keys_of_run(store.as_ref(), &thread, &run).await?.len() as u64;
                wl!(o, "would delete {run} ({n} keys, {})", st.state);
                n
            } else {
                let n = store.delete_run(&thread, &run).await?;
                wl!(o, "deleted {run} ({n} keys)");
                n
            };
            total += n;
            deleted.push(json!({"run": st.run, "state": st.state, "keys": n}));
        }
        progress.done();
        if args.dry_run {
            wl!(
                o,
                "dry run: {} run(s) would be deleted, {total} keys",
                doomed.len()
            );
        } else {
            wl!(o, "{} run(s) deleted, {total} keys", doomed.len());
        }
        let doc = json!({"thread": thread.as_str(), "dry_run": args.dry_run, "force": args.force,
            "deleted": deleted, "kept": kept, "skipped": skipped, "keys": total});
        Ok(Report::ok(doc, o))
    })
}
