//! Command-line parsing and dispatch. Add a subcommand: a module with an `Args` struct (clap
//! derive) and a `run(args) -> ExitCode`, plus one variant in [`Command`].

mod fixtures;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// AFK for Rust: durable agent runs.
#[derive(Debug, Parser)]
#[command(name = "afk", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with the AFK golden fixtures.
    Fixtures(fixtures::Args),
}

/// Exit code for usage errors and unimplemented options (clap uses 2 as well).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Parse the command line and run the subcommand.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Fixtures(args) => fixtures::run(args),
    }
}
