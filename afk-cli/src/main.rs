//! The `afk` command-line tool (crate `afk-cli`; see its README).
//!
//! Command-line parsing and dispatch. Add a subcommand: a module with an `Args` struct (clap
//! derive) and a `run(args, &Ctx) -> ExitCode` that builds a [`output::Report`] (its `--json`
//! document and its text) inside [`output::Ctx::run`], plus one variant in [`Command`].
//!
//! Exit codes: 0 success; 1 a failure (an error, a failed check, `verify` problems, an import
//! that does not verify); 2 usage (clap).
//!
//! `--json` (global): every store command prints one JSON document on stdout; its fields are
//! listed in the module docs of each command and only ever gain fields. An error is
//! `{"error": {"command", "store", "kind", "message", "key", "retryable", "hint"}}` (see
//! [`output`]). Errors always name the store (passwords redacted), the key when there is one,
//! and what to do. `fixtures check --json` prints its verdicts as one document (see
//! `fixtures`; exit 3 when nothing failed but a fixture needs another tool), `demo --json` and
//! `fixtures load --json` their facts as one document (see `demo` and `fixtures`).

mod common;
mod demo;
mod entry;
#[cfg(test)]
mod entry_tests;
mod erase;
mod fixtures;
mod fork;
mod logging;
mod migrate;
mod output;
mod prune;
mod rekey;
mod runs;
mod serve;
mod settle;
mod show;
mod status;
mod sweep;
mod threads;
mod timeline;
mod transfer;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// AFK for Rust: durable agent runs.
#[derive(Debug, Parser)]
#[command(name = "afk", version, about)]
struct Cli {
    /// The store, as a URL: rocksdb:///abs/path, rocksdb://./rel/path, memory://,
    /// redis://host:port (feature `redis`), s3://bucket/prefix (feature `s3`). Default:
    /// rocksdb://./.afk-data (`demo`: rocksdb://./.afk-demo; `fixtures check`: memory://).
    /// Only `demo`, `import` and `fixtures` create a RocksDB database where there is none; the
    /// other commands refuse such a path (a typo is an error, not a new empty store).
    #[arg(long, global = true, env = "AFK_STORE")]
    store: Option<String>,
    /// Print one JSON document on stdout instead of text (errors too: `{"error": {...}}`).
    #[arg(long, global = true)]
    json: bool,
    /// Log more on stderr: -v info, -vv debug, -vvv trace (default: warnings). `RUST_LOG`
    /// directives are honoured too.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scripted durable agent, crash it part way, resume it, and explain each step.
    Demo(demo::Args),
    /// The threads of the store, newest activity first, with their runs' states.
    Threads(threads::Args),
    /// List the runs of a thread with their latest phase, step and state.
    Runs(runs::Args),
    /// Show a run's latest record and snapshot summary.
    Show(show::Args),
    /// Every record, effect row and transcript entry of a run, in order, one line each.
    Timeline(timeline::Args),
    /// Check a thread's runs for broken invariants (exit 1 when any is found).
    Verify(verify::Args),
    /// Rewrite v1 (AFK Python) records as v2, moving transcripts to the log.
    Migrate(migrate::Args),
    /// Delete runs: one by id, or all but the newest N.
    Prune(prune::Args),
    /// Delete the runs that finished more than an age ago, in every thread (RocksDB, S3).
    Sweep(sweep::Args),
    /// Destroy a thread's data keys in a sealed store's keyring: none of its values can be
    /// opened any more, anywhere (`AFK_SEAL_KEYRING`).
    Erase(erase::Args),
    /// Rotate a sealed store's keys: wrap a thread's data keys under the active key (the
    /// first of `AFK_SEAL_KEYS`, or the `AFK_SEAL_KMS` key) and, with `--new-data-key`, re-seal every value under a fresh
    /// data key; resumable, verified at the end.
    Rekey(rekey::Args),
    /// Work with the AFK golden fixtures.
    Fixtures(fixtures::Args),
    /// Say what an uncertain tool call did (the run stopped with `EffectUncertain`), without
    /// resuming: the application's next resume continues from it.
    Settle(settle::SettleArgs),
    /// Write a run or a thread as JSON Lines (records, effect rows, transcript log; no fence).
    Export(transfer::ExportArgs),
    /// Read an export into the store, each run under a fresh claim, then verify it.
    Import(transfer::ImportArgs),
    /// Approve or deny the call a paused run waits for, without resuming: the application's
    /// next resume applies it.
    Decide(settle::DecideArgs),
    /// Start a new run from a run's state at the start of a step, ready for the application's
    /// next resume (or a worker); the original run is left as it is.
    Fork(fork::Args),
    /// Serve the console to a browser: threads, runs, a run's records, and the actions of
    /// `decide`, `settle` and `fork` (token in `AFK_SERVE_TOKEN`; loopback by default).
    Serve(serve::Args),
}

/// Exit code for usage errors and unimplemented options (clap uses 2 as well).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Parse the command line and run the subcommand.
fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.verbose);
    let store = cli.store;
    let url = || {
        store
            .clone()
            .unwrap_or_else(|| common::DEFAULT_STORE.to_owned())
    };
    let ctx = output::Ctx {
        url: url(),
        json: cli.json,
    };
    match cli.command {
        Command::Demo(args) => demo::run(args, store, cli.json),
        Command::Threads(args) => threads::run(args, &ctx),
        Command::Runs(args) => runs::run(args, &ctx),
        Command::Show(args) => show::run(args, &ctx),
        Command::Timeline(args) => timeline::run(args, &ctx),
        Command::Verify(args) => verify::run(args, &ctx),
        Command::Migrate(args) => migrate::run(args, &ctx),
        Command::Prune(args) => prune::run(args, &ctx),
        Command::Sweep(args) => sweep::run(args, &ctx),
        Command::Erase(args) => erase::run(args, &ctx),
        Command::Rekey(args) => rekey::run(args, &ctx),
        Command::Fixtures(args) => fixtures::run(args, store, cli.json),
        Command::Settle(args) => settle::settle(args, &ctx),
        Command::Decide(args) => settle::decide(args, &ctx),
        Command::Fork(args) => fork::run(args, &ctx),
        Command::Serve(args) => serve::run(args, &ctx),
        Command::Export(args) => transfer::export(args, &ctx),
        Command::Import(args) => transfer::import(args, &ctx),
    }
}
