//! `afk verify --thread T [--run R]` / `afk verify --all`: check runs' stored invariants.
//!
//! A printer over [`afk_core::verify`]: per run, `PROBLEM` lines for broken invariants,
//! `uncertain` lines for intent rows without a result, `note` lines for other remarks, and
//! `ok` when no problem was found; then a closing count. `--all` checks every run of every
//! thread of the store (stores that can list their threads).
//!
//! JSON: `{"runs": [{"thread", "run", "ok", "problems": [{"kind", "key", "message"}],
//! "uncertain": [{"key", "message"}], "notes": [{"key", "message"}]}], "checked", "problems",
//! "uncertain"}`.

use std::process::ExitCode;

use afk_core::store::{Store, StoreExt};
use afk_core::verify::{self, Note, NoteKind, verify_run};
use afk_core::{Error, RunId, ThreadId};
use serde_json::{Value, json};

use super::common::ids;
use super::output::{Ctx, Report, wl};

/// `afk verify`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["thread", "all"])))]
pub struct Args {
    /// The thread to check.
    #[arg(long)]
    thread: Option<String>,
    /// Only this run (default: every run of the thread).
    #[arg(long, requires = "thread")]
    run: Option<String>,
    /// Every run of every thread of the store.
    #[arg(long)]
    all: bool,
}

/// Prints `PROBLEM`, `uncertain`, `note` and `ok` lines and a closing count; exit 0 when no
/// problem was found, 1 otherwise.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    ctx.run("verify", |store| async move {
        let targets = targets(store.as_ref(), &args).await?;
        let (mut problems, mut uncertain) = (0, 0);
        let mut o = String::new();
        let mut docs = Vec::new();
        let show_thread = args.all;
        for (i, (thread, run)) in targets.iter().enumerate() {
            progress.tick("verifying runs", i, Some(targets.len()));
            let report = verify_run(store.as_ref(), thread, run).await?;
            let name = if show_thread {
                format!("{thread}/{run}")
            } else {
                run.to_string()
            };
            say_run(&mut o, &name, &report);
            problems += report.problems.len();
            uncertain += report.uncertain().count();
            docs.push(run_doc(thread, run, &report));
        }
        progress.done();
        wl!(
            o,
            "{} run(s) checked, {problems} problem(s), {uncertain} uncertain effect(s)",
            targets.len()
        );
        let doc = json!({"runs": docs, "checked": targets.len(), "problems": problems,
            "uncertain": uncertain});
        let mut report = Report::ok(doc, o);
        report.failed = problems > 0;
        Ok(report)
    })
}

/// The runs to check: `--run` of `--thread`, every run of `--thread`, or with `--all` every
/// run of every thread.
async fn targets(store: &dyn Store, args: &Args) -> afk_core::Result<Vec<(ThreadId, RunId)>> {
    let mut targets: Vec<(ThreadId, RunId)> = Vec::new();
    match &args.thread {
        Some(t) => {
            let (thread, run) = ids(t, args.run.as_deref())?;
            let runs = match run {
                Some(r) => vec![r],
                None => store.list_runs(&thread).await?,
            };
            targets.extend(runs.into_iter().map(|r| (thread.clone(), r)));
        }
        None if args.all => {
            for thread in store.list_all_threads().await? {
                for r in store.list_runs(&thread).await? {
                    targets.push((thread.clone(), r));
                }
            }
        }
        None => return Err(Error::invalid_input("say --thread T or --all")),
    }
    Ok(targets)
}

/// The notes of a run's report other than its uncertain effects.
fn other_notes(report: &verify::Report) -> Vec<&Note> {
    report
        .notes
        .iter()
        .filter(|n| n.kind != NoteKind::UncertainEffect)
        .collect()
}

/// The `PROBLEM`, `uncertain`, `note` and `ok` lines of the run called `name`.
fn say_run(o: &mut String, name: &str, report: &verify::Report) {
    for p in &report.problems {
        wl!(o, "PROBLEM {name}: {p}");
    }
    for u in report.uncertain() {
        wl!(o, "uncertain {name}: {u}");
    }
    for n in &other_notes(report) {
        wl!(o, "note {name}: {n}");
    }
    if report.is_clean() {
        wl!(o, "ok {name}");
    }
}

/// A run's entry in `runs` of the JSON document.
fn run_doc(thread: &ThreadId, run: &RunId, report: &verify::Report) -> Value {
    json!({
        "thread": thread.as_str(),
        "run": run.as_str(),
        "ok": report.is_clean(),
        "problems": report.problems.iter().map(|p| json!({
            "kind": format!("{:?}", p.kind), "key": p.key, "message": p.message,
        })).collect::<Vec<_>>(),
        "uncertain": report.uncertain().map(|n| json!({
            "key": n.key, "message": n.message,
        })).collect::<Vec<_>>(),
        "notes": other_notes(report).iter().map(|n| json!({
            "key": n.key, "message": n.message,
        })).collect::<Vec<_>>(),
    })
}
