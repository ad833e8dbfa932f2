//! `afk fixtures check [--level normalize|resume] PATH...`

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use afk_core::fixture::{FixtureFile, check_file_normalize};
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
        #[arg(long, value_enum, default_value_t = Level::Normalize)]
        level: Level,
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
    /// Resume each fixture and compare with its expectation (not implemented yet).
    Resume,
}

pub fn run(args: Args) -> ExitCode {
    match args.command {
        FixturesCommand::Check { level, paths } => check(level, &paths),
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

fn check_one(path: &Path) -> Result<(), String> {
    let file = FixtureFile::load(path).map_err(|e| e.to_string())?;
    check_file_normalize(&file)
}

fn check(level: Level, paths: &[PathBuf]) -> ExitCode {
    if level == Level::Resume {
        eprintln!(
            "afk fixtures check: --level resume is not implemented yet; use --level normalize"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let files = match expand(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("afk fixtures check: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        match check_one(file) {
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
