//! `afk fixtures check [--level normalize|resume] PATH...` and `afk fixtures load FILE`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use afk_core::fixture::load_state;
use afk_core::fixture::{FixtureFile, check_file_normalize};
use afk_core::keys::{ParsedKey, parse_key};
use afk_core::runner::fixture_check::{check_fixture, scripted_tools};
use afk_core::store::{Store, StoreExt, run_of_key};
use afk_core::{Error, RunId, ThreadId};
use clap::{Subcommand, ValueEnum};
use serde_json::{Value, json};

use super::EXIT_USAGE;
use super::common::{keys_of_run, latest, with_store};
use super::output::{Ctx, Progress, Report, table, wl};

/// Exit code of `fixtures check` when nothing failed but some fixtures need a tool the CLI
/// does not have.
const EXIT_UNCHECKED: u8 = 3;

/// What `fixtures check` says about one file.
enum Verdict {
    Passed,
    Failed(String),
    NeedsTools(Vec<String>),
}

/// Default store of `fixtures check`.
pub const FIXTURES_STORE: &str = "memory://";

/// `afk fixtures …`
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: FixturesCommand,
}

#[derive(Debug, Subcommand)]
enum FixturesCommand {
    /// Check fixture files (a directory means its *.json files). Every expectation comes from
    /// each fixture's own `expect` block. Prints `ok <file>`, `FAIL <file>: <what differed>`
    /// or, for a fixture whose script calls a tool this command does not have (it has the
    /// scripted `add` and `echo` of AFK's corpus), `SKIP <file>: needs tool <name>`, then
    /// `N passed, M failed` (and `, K need another tool`). Exits 0 when everything passed,
    /// 1 when something failed, 3 when nothing failed but some fixtures were not checked.
    Check {
        /// How deep to check.
        #[arg(long, value_enum, default_value_t = Level::Resume)]
        level: Level,
        /// Fixture files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Load a fixture's stored state into the store (`--store`, default rocksdb) without
    /// resuming it, for inspection with `runs`, `show`, `timeline`, `verify`, `migrate`.
    /// Prints what each run now holds (keys by kind, latest record) and the thread id.
    Load {
        /// The thread to load into (default: the fixture's own `thread_id`). Runs of the
        /// fixture already there are deleted first.
        #[arg(long)]
        thread: Option<String>,
        /// The fixture file.
        file: PathBuf,
    },
}

/// Check level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Level {
    /// Every stored record normalizes (or fails as the fixture says); hash vectors match.
    Normalize,
    /// Everything of the normalize level, then resume each fixture with its scripted model and tools and compare with its `expect`
    /// (outcome, error kind, final text, state, model calls, tool executions, replayed
    /// effects) and, for completed resumes, with the uninterrupted result. Hash-vector files
    /// are checked as at the normalize level.
    Resume,
}

/// `store`: the global `--store` value. `check` resumes on it (each fixture under a thread id
/// made unique per invocation, its runs deleted afterwards; default `memory://`); `load` writes
/// to it (default [`super::common::DEFAULT_STORE`]).
///
/// `json` (the global `--json`): `check` prints one JSON document instead of its lines:
/// `{"command", "level", "passed", "failed", "needs_tools", "fixtures": [{"file", "result",
/// "problem" | "tools"}]}`, with the same exit codes.
pub fn run(args: Args, store: Option<String>, json: bool) -> ExitCode {
    match args.command {
        FixturesCommand::Check { level, paths } => check(
            level,
            store.as_deref().unwrap_or(FIXTURES_STORE),
            &paths,
            json,
        ),
        FixturesCommand::Load { thread, file } => {
            let ctx = Ctx {
                url: store.unwrap_or_else(|| super::common::DEFAULT_STORE.to_owned()),
                json,
            };
            load(&ctx, thread, &file)
        }
    }
}

fn read_fixture(path: &Path) -> afk_core::Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid_input(format!("cannot read {}", path.display())).with_source(e)
    })?;
    serde_json::from_str(&text)
        .map_err(|e| Error::invalid_input(format!("{} is not JSON", path.display())).with_source(e))
}

/// Move a parsed fixture to thread `to`: its `thread_id` and every record's top-level thread
/// id (`thread_id` or the legacy `threadId`) that named the old thread.
fn rethread(fixture: &mut Value, to: &str) {
    let from = fixture
        .get("thread_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    fixture["thread_id"] = Value::String(to.to_owned());
    if let Some(Value::Object(state)) = fixture.get_mut("state") {
        for rec in state.values_mut() {
            for k in ["thread_id", "threadId"] {
                if let Some(v) = rec.get_mut(k)
                    && v.as_str() == from.as_deref()
                {
                    *v = Value::String(to.to_owned());
                }
            }
        }
    }
}

/// What one loaded run holds, by key family.
#[derive(Default)]
struct Loaded {
    keys: usize,
    records: usize,
    effects: usize,
    transcript: usize,
    replaced: bool,
}

/// `fixtures load`: the fixture's runs written into the store (runs of the same ids deleted
/// first), then a summary of what each run now holds. `--json`: `{"command", "file", "store",
/// "thread", "keys", "runs": [{"run", "keys", "records", "effect_rows", "transcript_entries",
/// "replaced", "latest": {"step", "phase", "schema_version"} | null}]}`.
fn load(ctx: &Ctx, thread: Option<String>, file: &Path) -> ExitCode {
    ctx.run_creating("fixtures load", |store| async move {
        let mut fixture = read_fixture(file)?;
        if let Some(t) = &thread {
            rethread(&mut fixture, t);
        }
        let thread = ThreadId::new(fixture["thread_id"].as_str().unwrap_or(""))?;
        let state = fixture["state"]
            .as_object()
            .ok_or_else(|| Error::invalid_input("fixture state is not an object"))?;
        let mut runs: BTreeMap<&str, Loaded> = BTreeMap::new();
        for key in state.keys() {
            let Some(run) = run_of_key(key) else { continue };
            let r = runs.entry(run).or_default();
            r.keys += 1;
            match parse_key(key) {
                Ok(ParsedKey::Checkpoint { .. }) => r.records += 1,
                Ok(ParsedKey::Effect { .. }) => r.effects += 1,
                Ok(ParsedKey::Messages { .. }) => r.transcript += 1,
                _ => {}
            }
        }
        for (run, loaded) in &mut runs {
            let run = RunId::new(*run)?;
            loaded.replaced = !keys_of_run(store.as_ref(), &thread, &run).await?.is_empty();
            store.delete_run(&thread, &run).await?;
        }
        load_state(store.as_ref(), &thread, state).await?;
        let (mut rows, mut docs) = (Vec::new(), Vec::new());
        for (run, l) in &runs {
            let latest = latest(store.as_ref(), &thread, &RunId::new(*run)?).await?;
            rows.push(vec![
                (*run).to_owned(),
                l.keys.to_string(),
                l.records.to_string(),
                l.effects.to_string(),
                l.transcript.to_string(),
                latest.as_ref().map_or("none".to_owned(), |r| {
                    format!("step {} {} ({})", r.step, r.phase, r.schema_version)
                }),
                if l.replaced { "yes" } else { "no" }.to_owned(),
            ]);
            docs.push(json!({
                "run": run, "keys": l.keys, "records": l.records, "effect_rows": l.effects,
                "transcript_entries": l.transcript, "replaced": l.replaced,
                "latest": latest.map(|r| json!({"step": r.step, "phase": r.phase,
                    "schema_version": r.schema_version})),
            }));
        }
        let mut human = table(
            &[
                "RUN",
                "KEYS",
                "RECORDS",
                "EFFECT_ROWS",
                "TRANSCRIPT",
                "LATEST",
                "REPLACED",
            ],
            &rows,
        );
        wl!(
            human,
            "loaded {} keys of {} run(s) into thread {thread}; inspect with `afk runs --thread \
             {thread}`",
            state.len(),
            runs.len(),
        );
        let doc = json!({
            "command": "fixtures load", "file": file.display().to_string(),
            "store": ctx.store_name(), "thread": thread, "keys": state.len(), "runs": docs,
        });
        Ok(Report::ok(doc, human))
    })
}

/// Expand directories to their `*.json` files (sorted; README files skipped).
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries =
                std::fs::read_dir(p).map_err(|e| format!("cannot list {}: {e}", p.display()))?;
            let mut files = Vec::new();
            for entry in entries {
                let path = entry
                    .map_err(|e| format!("cannot list {}: {e}", p.display()))?
                    .path();
                let is_json = path.extension().is_some_and(|e| e == "json");
                let is_readme = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.to_ascii_lowercase().starts_with("readme"));
                if is_json && !is_readme && path.is_file() {
                    files.push(path);
                }
            }
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// A suffix that makes thread ids unique per invocation (a shared store may hold old data).
fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

async fn check_one(path: &Path, level: Level, store: &Arc<dyn Store>, suffix: &str) -> Verdict {
    match check_file(path, level, store, suffix).await {
        Ok(v) => v,
        Err(what) => Verdict::Failed(what),
    }
}

async fn check_file(
    path: &Path,
    level: Level,
    store: &Arc<dyn Store>,
    suffix: &str,
) -> Result<Verdict, String> {
    let file = FixtureFile::load(path).map_err(|e| e.to_string())?;
    // The resume level includes the normalize level.
    check_file_normalize(&file)?;
    if level == Level::Normalize || matches!(file, FixtureFile::HashVectors(_)) {
        return Ok(Verdict::Passed);
    }
    let mut value = read_fixture(path).map_err(|e| e.to_string())?;
    let thread = format!(
        "{}-{suffix}",
        value
            .get("thread_id")
            .and_then(Value::as_str)
            .unwrap_or("t")
    );
    rethread(&mut value, &thread);
    let verdict = check_fixture(&value, store.clone(), &scripted_tools()).await;
    // Leave nothing behind in a shared store.
    if let Ok(t) = ThreadId::new(&thread)
        && let Ok(runs) = store.list_runs(&t).await
    {
        for run in runs {
            let _ = store.delete_run(&t, &run).await;
        }
    }
    let verdict = verdict.map_err(|e| e.to_string())?;
    Ok(if !verdict.missing_tools.is_empty() {
        Verdict::NeedsTools(verdict.missing_tools)
    } else if verdict.passed() {
        Verdict::Passed
    } else {
        Verdict::Failed(verdict.problems.join("; "))
    })
}

/// One human line for a fixture's verdict.
fn verdict_line(file: &Path, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Passed => format!("ok {}", file.display()),
        Verdict::Failed(what) => format!("FAIL {}: {what}", file.display()),
        Verdict::NeedsTools(tools) => {
            let s = if tools.len() == 1 { "" } else { "s" };
            format!(
                "SKIP {}: needs tool{s} {} (this command has only the scripted add and echo; \
                 check it with afk_core::runner::fixture_check::check_fixture and your tools)",
                file.display(),
                tools.join(", ")
            )
        }
    }
}

/// A fixture's verdict in the `--json` document: `file`, `result` (`ok`, `failed`,
/// `needs_tools`), and `problem` or `tools`.
fn verdict_json(file: &Path, verdict: &Verdict) -> Value {
    let file = file.display().to_string();
    match verdict {
        Verdict::Passed => serde_json::json!({"file": file, "result": "ok"}),
        Verdict::Failed(what) => {
            serde_json::json!({"file": file, "result": "failed", "problem": what})
        }
        Verdict::NeedsTools(tools) => {
            serde_json::json!({"file": file, "result": "needs_tools", "tools": tools})
        }
    }
}

fn check(level: Level, url: &str, paths: &[PathBuf], json: bool) -> ExitCode {
    let files = match expand(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("afk fixtures check: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let progress = Progress::on_terminal(json);
    with_store("fixtures check", url, |store| async move {
        let suffix = unique_suffix();
        let (mut passed, mut failed, mut unchecked) = (0usize, 0usize, 0usize);
        let mut rows = Vec::new();
        for (i, file) in files.iter().enumerate() {
            progress.tick("checking fixtures", i + 1, Some(files.len()));
            let verdict = check_one(file, level, &store, &suffix).await;
            progress.done();
            match &verdict {
                Verdict::Passed => passed += 1,
                Verdict::Failed(_) => failed += 1,
                Verdict::NeedsTools(_) => unchecked += 1,
            }
            if json {
                rows.push(verdict_json(file, &verdict));
            } else {
                println!("{}", verdict_line(file, &verdict));
            }
        }
        if json {
            let doc = serde_json::json!({
                "command": "fixtures check",
                "level": format!("{level:?}").to_ascii_lowercase(),
                "passed": passed,
                "failed": failed,
                "needs_tools": unchecked,
                "fixtures": rows,
            });
            println!("{doc:#}");
        } else if unchecked == 0 {
            println!("{passed} passed, {failed} failed");
        } else {
            println!("{passed} passed, {failed} failed, {unchecked} need another tool");
        }
        Ok(if failed > 0 {
            ExitCode::FAILURE
        } else if unchecked > 0 {
            ExitCode::from(EXIT_UNCHECKED)
        } else {
            ExitCode::SUCCESS
        })
    })
}
