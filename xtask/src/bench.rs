//! `cargo xtask bench`: runs the benchmarks that exist and writes `bench-report.md` into the
//! target directory. The `afk` crate's benches (see BENCHMARKS.md) run with `--all-features`, and its
//! `bench_report` example turns criterion's results into the report's tables; this task appends
//! which crates ran and which have no benchmarks.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::{env, fs};

use anyhow::{Context, Result};

use crate::services::{Needs, Services};
use crate::system;

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

/// Runs `cargo bench -p <crate>` for every crate with a `benches/` directory; returns the
/// exit code (the first failure's).
pub fn run() -> Result<i32> {
    let root = system::repo_root();
    let with: Vec<_> = CRATES
        .iter()
        .filter(|(c, _)| root.join(c).join("benches").is_dir())
        .collect();
    let needs = Needs {
        redis: with.iter().any(|(_, n)| n.redis),
        s3: with.iter().any(|(_, n)| n.s3),
    };
    let services = if needs.redis || needs.s3 {
        Some(Services::start(
            &format!("bench-{}", std::process::id()),
            needs,
            true,
        )?)
    } else {
        None
    };

    let target = env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    fs::create_dir_all(&target)?;
    let path = target.join("bench-report.md");
    let mut tables: Option<String> = None;
    let mut report = String::from("## Benchmark runs\n\n");
    let mut code = 0;
    for (krate, _) in &with {
        let mut cmd = system::cargo();
        cmd.args(["bench", "-p", krate]);
        if *krate == "afk" {
            // Every store is reachable only with every feature on.
            cmd.arg("--all-features");
        }
        cmd.envs(
            services
                .iter()
                .flat_map(|s| s.env().iter().map(|(k, v)| (k, v))),
        );
        let status = system::run_status(&mut cmd)?;
        let _ = writeln!(report, "- `{krate}`: `cargo bench` exited with {status}");
        if !status.success() && code == 0 {
            code = crate::test::code(status);
        }
        if *krate == "afk" && status.success() {
            let mut cmd = system::cargo();
            cmd.args(["run", "-p", "afk", "--release", "--all-features"]);
            cmd.args(["--example", "bench_report", "--", "--out"]);
            cmd.arg(&path);
            cmd.env("CARGO_TARGET_DIR", &target);
            // The report measures bytes, round trips and S3 resume itself: it needs the
            // servers too (without them it printed "not measured" for Redis and S3).
            cmd.envs(
                services
                    .iter()
                    .flat_map(|s| s.env().iter().map(|(k, v)| (k, v))),
            );
            let status = system::run_status(&mut cmd)?;
            if status.success() {
                tables = fs::read_to_string(&path).ok();
            } else if code == 0 {
                code = crate::test::code(status);
            }
        }
    }
    for (krate, _) in CRATES.iter().filter(|c| !with.contains(c)) {
        let _ = writeln!(report, "- `{krate}`: no benchmarks yet");
    }
    report.push_str("\nCriterion's own reports are under `criterion/` in the target directory.\n");
    drop(services);

    let report = match tables {
        Some(t) => format!("{t}\n{report}"),
        None => format!("# Bench report\n\n{report}"),
    };
    fs::write(&path, report).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(code)
}
