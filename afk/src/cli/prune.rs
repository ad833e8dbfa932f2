//! `afk prune --thread T (--run R | --keep-last N) [--dry-run]`: delete runs.

use std::process::ExitCode;

use afk_core::{Error, RunId};

use super::common::{ids, keys_of_run, latest, runs_of, with_store};

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
}

/// Prints `deleted <run> (<n> keys)` (or `would delete`) per run and `kept <run>` for the
/// others, then a count. Exit 0; 1 when `--run` names a run with no keys.
pub fn run(args: Args, url: &str) -> ExitCode {
    with_store("prune", url, |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let mut doomed: Vec<RunId> = Vec::new();
        if let Some(run) = run {
            if keys_of_run(store.as_ref(), &thread, &run).await?.is_empty() {
                return Err(Error::not_found(format!(
                    "run {run} has no keys in thread {thread}"
                )));
            }
            doomed.push(run);
        } else {
            let keep = args.keep_last.unwrap_or(usize::MAX);
            let mut runs = Vec::new();
            for run in runs_of(store.as_ref(), &thread).await? {
                let ts = match latest(store.as_ref(), &thread, &run).await {
                    Ok(Some(rec)) => rec.timestamp_ms,
                    _ => 0,
                };
                runs.push((ts, run));
            }
            // Newest first; ties by run id so the choice is stable.
            runs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
            for (i, (_, run)) in runs.into_iter().enumerate() {
                if i < keep {
                    println!("kept {run}");
                } else {
                    doomed.push(run);
                }
            }
        }
        let mut total = 0;
        for run in &doomed {
            if args.dry_run {
                let n = keys_of_run(store.as_ref(), &thread, run).await?.len();
                println!("would delete {run} ({n} keys)");
            } else {
                let n = store.delete_run(&thread, run).await?;
                total += n;
                println!("deleted {run} ({n} keys)");
            }
        }
        if args.dry_run {
            println!("dry run: {} run(s) would be deleted", doomed.len());
        } else {
            println!("{} run(s) deleted, {total} keys", doomed.len());
        }
        Ok(ExitCode::SUCCESS)
    })
}
