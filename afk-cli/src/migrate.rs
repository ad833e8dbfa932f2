//! `afk migrate --thread T [--run R] [--dry-run]`: rewrite v1 records as v2, run by run, with
//! the library's [`afk_core::migrate::migrate_run`] (which says how, and why running it twice,
//! or again after a crash, is safe).
//!
//! JSON: `{"thread", "dry_run", "runs": [{"run", "ok", "line"}], "failed"}` (`line` is the
//! text line of the run).

use std::process::ExitCode;

use afk_core::migrate::{Migration, migrate_run};
use afk_core::store::StoreExt;

use super::common::ids;
use super::output::{Ctx, Report, wl};

/// `afk migrate`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread to migrate.
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
    /// Only say what would be rewritten.
    #[arg(long)]
    dry_run: bool,
}

/// One line per run; exit 0, or 1 when a run could not be migrated (a record that does not
/// normalize: nothing of that run is written).
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    ctx.run("migrate", |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let runs = match run {
            Some(r) => vec![r],
            None => store.list_runs(&thread).await?,
        };
        let mut failed = 0;
        let mut o = String::new();
        let mut docs = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            progress.tick("migrating runs", i, Some(runs.len()));
            let (ok, line) = match migrate_run(store.as_ref(), &thread, run, args.dry_run).await {
                Ok(m) => (true, line(run, &m, args.dry_run)),
                Err(e) => {
                    failed += 1;
                    (false, format!("FAIL {run}: {e}"))
                }
            };
            wl!(o, "{line}");
            docs.push(serde_json::json!({"run": run.as_str(), "ok": ok, "line": line}));
        }
        progress.done();
        let doc = serde_json::json!({"thread": thread.as_str(), "dry_run": args.dry_run,
            "runs": docs, "failed": failed});
        let mut report = Report::ok(doc, o);
        report.failed = failed > 0;
        Ok(report)
    })
}

/// The line of one run.
fn line(run: &afk_core::RunId, m: &Migration, dry_run: bool) -> String {
    if m.is_noop() {
        return format!("{run}: no v1 records, nothing to do");
    }
    let summary = format!(
        "{} record(s) v1 -> v2, {} transcript entr(ies) written, {} snapshot(s) kept inline",
        m.records, m.log_entries, m.inline
    );
    if dry_run {
        format!("{run}: would migrate: {summary}")
    } else {
        format!("{run}: migrated {summary}")
    }
}
