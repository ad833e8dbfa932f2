//! `cargo xtask ci`: exactly what CI runs once the machine has Rust (see `.ci/run`).

use std::time::Instant;

use anyhow::Result;

use crate::chaos;
use crate::services::Needs;
use crate::system;
use crate::test::{self, ROCKSDB_DEBS};

/// Runs format check, clippy, rustdoc, every test and the quick chaos campaign, stopping at
/// the first failure. Returns the exit code. Prints how long each step took.
pub fn run() -> Result<i32> {
    // Install everything up front: clippy and rustdoc already build the RocksDB crate.
    let mut debs = Needs::ALL.debs();
    debs.extend(ROCKSDB_DEBS);
    system::ensure_debs(&debs)?;

    let mut times = Vec::new();
    let steps: [(&str, &[&str]); 3] = [
        ("fmt", &["fmt", "--all", "--check"]),
        (
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
        ),
        (
            "doc",
            &["doc", "--workspace", "--no-deps", "--all-features"],
        ),
    ];
    for (name, args) in steps {
        let start = Instant::now();
        let mut cmd = system::cargo();
        cmd.args(args).env("RUSTDOCFLAGS", "-D warnings");
        let status = system::run_status(&mut cmd)?;
        times.push((name, start.elapsed()));
        if !status.success() {
            report(&times);
            eprintln!("ci: {name} failed");
            return Ok(test::code(status));
        }
    }
    let start = Instant::now();
    let code = test::run(&[], &[])?;
    times.push(("test", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: test failed");
        return Ok(code);
    }
    let start = Instant::now();
    let code = chaos::run(&chaos::Options {
        quick: true,
        ..chaos::Options::default()
    })?;
    times.push(("chaos", start.elapsed()));
    report(&times);
    if code != 0 {
        eprintln!("ci: chaos failed");
    }
    Ok(code)
}

fn report(times: &[(&str, std::time::Duration)]) {
    for (name, took) in times {
        eprintln!("ci: {name:<6} {:>7.1} s", took.as_secs_f64());
    }
}
