//! `cargo xtask bench`: runs the benchmarks that exist and writes `bench-report.md` into the
//! target directory. The `afk` crate's benches (see BENCHMARKS.md) run with every store's
//! feature ([`STORES`]), and its `bench_report` example turns criterion's results into the
//! report's tables; then the concurrency bench (`afk/examples/fleet_probe`, N runs in flight
//! in one process) runs and its table is appended; this task appends which crates ran and which
//! have no benchmarks.
//!
//! `--fleet-only` runs the concurrency bench alone, `--no-fleet` skips it, `--fleet-quick` runs
//! its smoke grid; its `AFK_FLEET_…` variables (see its module docs) pass through.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

use anyhow::{Context, Result};

use crate::services::{Needs, Services};
use crate::system;

/// The `afk` features the benches, `bench_report` and `fleet_probe` build with: every store, and
/// not the model-provider features. No bench calls a provider, and those features bring `genai`,
/// which turns on serde_json's `preserve_order` for the whole build (every JSON map an
/// `IndexMap`): a cost an application without a provider feature does not pay, and one
/// BENCHMARKS.md reports on its own.
const STORES: &str = "rocksdb,redis,s3";

/// Crates that may have benchmarks, with the servers their benchmarks need.
const CRATES: [(&str, Needs); 5] = [
    (
        "afk-core",
        Needs {
            redis: false,
            s3: false,
        },
    ),
    (
        "afk-store-rocksdb",
        Needs {
            redis: false,
            s3: false,
        },
    ),
    (
        "afk-store-redis",
        Needs {
            redis: true,
            s3: false,
        },
    ),
    (
        "afk-store-s3",
        Needs {
            redis: false,
            s3: true,
        },
    ),
    ("afk", Needs::ALL),
];

/// What `cargo xtask bench` runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Only the concurrency bench, not the criterion benches.
    pub fleet_only: bool,
    /// Not the concurrency bench.
    pub no_fleet: bool,
    /// The concurrency bench's smoke grid.
    pub fleet_quick: bool,
}

type Env = Vec<(String, String)>;

/// Runs `cargo bench -p <crate>` for every crate with a `benches/` directory, then the
/// concurrency bench; returns the exit code (the first failure's).
pub fn run(opts: Options) -> Result<i32> {
    let root = system::repo_root();
    let with: Vec<_> = CRATES
        .iter()
        .filter(|(c, _)| !opts.fleet_only && root.join(c).join("benches").is_dir())
        .collect();
    let fleet = !opts.no_fleet;
    let needs = Needs {
        redis: fleet || with.iter().any(|(_, n)| n.redis),
        s3: fleet || with.iter().any(|(_, n)| n.s3),
    };
    let services = if needs.redis || needs.s3 {
        let set = format!("bench-{}", std::process::id());
        Some(Services::start(&set, needs, true)?)
    } else {
        None
    };
    let env: Env = services.iter().flat_map(|s| s.env().to_vec()).collect();
    let target = env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    fs::create_dir_all(&target)?;
    let path = target.join("bench-report.md");
    let (mut report, tables, mut code) = criterion(&with, &env, &target, &path)?;
    let fleet_table = if fleet {
        fleet_bench(opts, &env, &target, &mut code)?
    } else {
        None
    };
    if opts.fleet_only {
        report.push_str("- criterion benches not run (`--fleet-only`)\n");
    } else {
        for (krate, _) in CRATES.iter().filter(|c| !with.contains(c)) {
            let _ = writeln!(report, "- `{krate}`: no benchmarks yet");
        }
    }
    report.push_str("\nCriterion's own reports are under `criterion/` in the target directory.\n");
    drop(services);

    let mut out = match tables {
        Some(t) => format!("{t}\n{report}"),
        None => format!("# Bench report\n\n{report}"),
    };
    if let Some(t) = fleet_table {
        out = format!("{out}\n{t}");
    }
    fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(code)
}

/// The criterion benches of `with`, then `bench_report` (which writes `path`): the list of
/// crates run, `bench_report`'s tables, and the exit code so far.
fn criterion(
    with: &[&(&str, Needs)],
    env: &Env,
    target: &Path,
    path: &Path,
) -> Result<(String, Option<String>, i32)> {
    let mut tables: Option<String> = None;
    let mut report = String::from("## Benchmark runs\n\n");
    let mut code = 0;
    for (krate, _) in with {
        let mut cmd = system::cargo();
        cmd.args(["bench", "-p", krate]);
        if *krate == "afk" {
            cmd.args(["--features", STORES]);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let status = system::run_status(&mut cmd)?;
        let _ = writeln!(report, "- `{krate}`: `cargo bench` exited with {status}");
        if !status.success() && code == 0 {
            code = crate::test::code(status);
        }
        if *krate == "afk" && status.success() {
            let mut cmd = system::cargo();
            cmd.args(["run", "-p", "afk", "--release", "--features", STORES]);
            cmd.args(["--example", "bench_report", "--", "--out"]);
            cmd.arg(path);
            cmd.env("CARGO_TARGET_DIR", target);
            // The report measures bytes, round trips and S3 resume itself: it needs the
            // servers too (without them it printed "not measured" for Redis and S3).
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
            let status = system::run_status(&mut cmd)?;
            if status.success() {
                tables = fs::read_to_string(path).ok();
            } else if code == 0 {
                code = crate::test::code(status);
            }
        }
    }
    Ok((report, tables, code))
}

/// The concurrency bench (`fleet_probe`) with the servers; its table, if it ran.
fn fleet_bench(opts: Options, env: &Env, target: &Path, code: &mut i32) -> Result<Option<String>> {
    let out = target.join("fleet-report.md");
    let _ = fs::remove_file(&out);
    let mut cmd = system::cargo();
    cmd.args(["run", "-p", "afk", "--release", "--features", STORES]);
    cmd.args(["--example", "fleet_probe", "--", "--out"]);
    cmd.arg(&out);
    if opts.fleet_quick {
        cmd.arg("--quick");
    }
    cmd.env("CARGO_TARGET_DIR", target);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let status = system::run_status(&mut cmd)?;
    if !status.success() && *code == 0 {
        *code = crate::test::code(status);
    }
    Ok(fs::read_to_string(&out).ok())
}
