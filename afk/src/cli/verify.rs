//! `afk verify --thread T [--run R]`: check a run's stored invariants.
//!
//! A printer over [`afk_core::verify`]: per run, `PROBLEM` lines for broken invariants,
//! `uncertain` lines for intent rows without a result, `note` lines for other remarks, and
//! `ok` when no problem was found; then a closing count.

use std::process::ExitCode;

use afk_core::verify::{NoteKind, verify_run};

use super::common::{ids, runs_of, with_store};

/// `afk verify`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread to check.
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
}

/// Prints `PROBLEM`, `uncertain`, `note` and `ok` lines and a closing count; exit 0 when no
/// problem was found, 1 otherwise.
pub fn run(args: Args, url: &str) -> ExitCode {
    with_store("verify", url, |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let runs = match run {
            Some(r) => vec![r],
            None => runs_of(store.as_ref(), &thread).await?,
        };
        let (mut problems, mut uncertain) = (0, 0);
        for run in &runs {
            let report = verify_run(store.as_ref(), &thread, run).await?;
            for p in &report.problems {
                println!("PROBLEM {run}: {p}");
            }
            for u in report.uncertain() {
                println!("uncertain {run}: {u}");
            }
            for n in report
                .notes
                .iter()
                .filter(|n| n.kind != NoteKind::UncertainEffect)
            {
                println!("note {run}: {n}");
            }
            if report.is_clean() {
                println!("ok {run}");
            }
            problems += report.problems.len();
            uncertain += report.uncertain().count();
        }
        println!(
            "{} run(s) checked, {problems} problem(s), {uncertain} uncertain effect(s)",
            runs.len()
        );
        Ok(if problems == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}
