//! `afk fixtures check [--level normalize|resume] PATH...`

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::sync::Arc;

use afk_core::fixture::{FixtureFile, check_file_normalize};
use afk_core::runner::fixture_check::check_fixture;
use afk_core::{MemoryStore, Store};
use clap::{Subcommand, ValueEnum};

use super::EXIT_USAGE;

/// `afk fixtures …`
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: FixturesCommand,
}

#[derive(Debug, Subcommand)]
enum FixturesCommand {
    /// Check fixture files (a directory means its *.json files). Prints `ok <file>` or
    /// `FAIL <file>: <what differed>` per file, then `N passed, M failed`; exits 0 only when
    /// nothing failed.
    Check {
        /// How deep to check.
        #[arg(long, value_enum, default_value_t = Level::Resume)]
        level: Level,
        /// Store to resume on (each fixture gets a fresh one). Only `memory://` for now.
        #[arg(long, default_value = "memory://")]
        store: String,
        /// Fixture files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
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

pub fn run(args: Args) -> ExitCode {
    match args.command {
        FixturesCommand::Check {
            level,
            store,
            paths,
        } => check(level, &store, &paths),
    }
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

fn check_one(path: &Path, level: Level, rt: &tokio::runtime::Runtime) -> Result<(), String> {
    let file = FixtureFile::load(path).map_err(|e| e.to_string())?;
    // The resume level includes the normalize level.
    check_file_normalize(&file)?;
    if level == Level::Normalize || matches!(file, FixtureFile::HashVectors(_)) {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let verdict = rt
        .block_on(check_fixture(&value, store))
        .map_err(|e| e.to_string())?;
    if verdict.passed() {
        Ok(())
    } else {
        Err(verdict.problems.join("; "))
    }
}

fn check(level: Level, store: &str, paths: &[PathBuf]) -> ExitCode {
    if level == Level::Resume && store != "memory://" {
        eprintln!("afk fixtures check: --store {store:?} is not supported yet; use memory://");
        return ExitCode::from(EXIT_USAGE);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("afk fixtures check: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let files = match expand(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("afk fixtures check: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        match check_one(file, level, &rt) {
            Ok(()) => {
                passed += 1;
                println!("ok {}", file.display());
            }
            Err(what) => {
                failed += 1;
                println!("FAIL {}: {what}", file.display());
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
