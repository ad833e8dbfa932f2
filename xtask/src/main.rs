//! `cargo xtask …`: the project's own tasks (tests with real servers, CI, benchmarks).
//! Run `cargo xtask --help`. Depends only on std, clap, anyhow and serde_json so it builds in
//! seconds.

mod bench;
mod chaos;
mod ci;
mod features;
mod layers;
mod msrv;
mod quickstart;
mod rocksdb_newest;
mod services;
mod system;
mod test;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "AFK for Rust: development tasks")]
enum Cli {
    /// Start the servers the selected tests need, run the tests, stop the servers.
    Test {
        /// Only the tests of these stores (repeatable or comma-separated); default: all.
        #[arg(long = "store", value_enum, value_delimiter = ',', num_args = 1..)]
        stores: Vec<test::Store>,
        /// Extra arguments for `cargo nextest run` (after `--`).
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// Start, stop or show the test servers for manual work.
    Services {
        #[command(subcommand)]
        action: ServicesCmd,
    },
    /// What CI runs: fmt, clippy, rustdoc, package, `msrv`, feature combinations, `test`,
    /// then `chaos --quick`.
    Ci,
    /// Build the newest `rocksdb` release from source in an application outside the clone
    /// that also uses afk-store-rocksdb, and run the store's tests there (cached: only the
    /// first run on a machine compiles RocksDB's C++).
    RocksdbNewest,
    /// Build the README's quick start from the packaged crates in an application outside the
    /// clone, and run it against LiteLLM's OpenAI-compatible proxy: it completes, and after a
    /// SIGKILL mid-run it resumes without running its tool again.
    Quickstart,
    /// Check that no locked dependency needs a newer Rust than the declared `rust-version`.
    Msrv,
    /// Write the runner's module graph (read from its `use` lines) into ARCHITECTURE.md.
    Arch,
    /// Run the benchmarks that exist and the concurrency bench, and write
    /// target/bench-report.md.
    Bench {
        /// Only the concurrency bench (`afk/examples/fleet_probe`), not the criterion benches.
        #[arg(long, conflicts_with = "no_fleet")]
        fleet_only: bool,
        /// Not the concurrency bench.
        #[arg(long)]
        no_fleet: bool,
        /// The concurrency bench's smoke grid (about a minute); `AFK_FLEET_…` variables
        /// choose any other grid (see BENCHMARKS.md).
        #[arg(long)]
        fleet_quick: bool,
    },
    /// Kill real runner processes (SIGKILL) at random moments, many times per run, against
    /// real stores; check nothing is lost or repeated (see RELIABILITY.md).
    Chaos {
        /// Only these stores (repeatable or comma-separated); default: all three.
        #[arg(long = "store", value_enum, value_delimiter = ',', num_args = 1..)]
        stores: Vec<chaos::Store>,
        /// Kills to reach per store (default 200; 30 with --quick).
        #[arg(long)]
        kills: Option<u64>,
        /// A few dozen kills per store, all stores within a few minutes (what CI runs).
        #[arg(long)]
        quick: bool,
        /// Campaign seed (default: from the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Run exactly one run with this seed (failures print it).
        #[arg(long)]
        run_seed: Option<u64>,
        /// Stop starting runs of a store after this many minutes (default 40; 3 with --quick).
        #[arg(long)]
        minutes: Option<u64>,
        /// The worker mode: processes run `Worker`s and nobody calls `resume`; workers, run
        /// submitters and Redis are killed (10 runs per store with --quick, else 100).
        #[arg(long)]
        workers: bool,
        /// Seal every value at rest (`afk-seal`, keys in a keyring the processes share); each
        /// run's check also finds no value in the clear.
        #[arg(long)]
        sealed: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ServicesCmd {
    /// Start Redis, a Redis Cluster and moto on free ports; print the exports.
    Up,
    /// Stop the servers `up` started.
    Down {
        /// Also stop servers of test runs in this clone that were left behind.
        #[arg(long)]
        all: bool,
        /// Stop one named set (used by the reaper of `xtask test`).
        #[arg(long, hide = true)]
        set: Option<String>,
    },
    /// Show which servers started by xtask run.
    Status,
}

const MANUAL: &str = "manual";

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    match cli {
        Cli::Test { stores, extra } => test::run(&stores, &extra),
        Cli::Ci => ci::run(),
        Cli::RocksdbNewest => rocksdb_newest::run(),
        Cli::Msrv => msrv::run(),
        Cli::Quickstart => quickstart::run(),
        Cli::Arch => layers::write_architecture().map(|()| 0),
        Cli::Bench {
            fleet_only,
            no_fleet,
            fleet_quick,
        } => bench::run(bench::Options {
            fleet_only,
            no_fleet,
            fleet_quick,
        }),
        Cli::Chaos {
            stores,
            kills,
            quick,
            seed,
            run_seed,
            minutes,
            workers,
            sealed,
        } => chaos::run(&chaos::Options {
            stores,
            kills,
            quick,
            seed,
            run_seed,
            minutes,
            workers,
            sealed,
        }),
        Cli::Services {
            action: ServicesCmd::Up,
        } => {
            if services::state_root().join(MANUAL).is_dir() {
                services::print_status();
                anyhow::bail!("already up; run `cargo xtask services down` first");
            }
            let started = services::Services::start(MANUAL, services::Needs::ALL, false)?;
            println!("{}", started.export_line());
            started.keep();
            Ok(0)
        }
        Cli::Services {
            action: ServicesCmd::Down { all, set },
        } => {
            let root = services::state_root();
            let sets = match (all, set) {
                (true, _) => services::sets(),
                (false, Some(set)) => vec![root.join(set)],
                (false, None) => vec![root.join(MANUAL)],
            };
            for dir in sets.iter().filter(|d| d.is_dir()) {
                services::stop_set(dir);
                eprintln!("stopped {}", dir.display());
            }
            Ok(0)
        }
        Cli::Services {
            action: ServicesCmd::Status,
        } => {
            services::print_status();
            Ok(0)
        }
    }
}
