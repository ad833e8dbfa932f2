//! `cargo xtask ci`: exactly what CI runs once the machine has Rust (see `.ci/run`).

use std::time::Instant;

use anyhow::Result;

use crate::services::Needs;
use crate::system;
use crate::test::{self, ROCKSDB_DEBS};

/// `cargo package` of every crate meant to be published, verified (built from the packaged
/// sources alone). `--allow-dirty`: it checks what a package would hold, also before a commit.
const PACKAGE: [&str; 14] = [
    "package",
    "--allow-dirty",
    "-p",
    "afk-core",
    "-p",
    "afk-conformance",
    "-p",
    "afk-store-rocksdb",
    "-p",
    "afk-store-redis",
    "-p",
    "afk-store-s3",
    "-p",
    "afk",
];

/// Runs format check, clippy, rustdoc, the package check and every test, stopping at the
/// first failure. Returns the exit code. Prints how long each step took.
pub fn run() -> Result<i32> {
    // Install everything up front: clippy and rustdoc already build the RocksDB crate.
    let mut debs = Needs::ALL.debs();
    debs.extend(ROCKSDB_DEBS);
    system::ensure_debs(&debs)?;

    let mut times = Vec::new();
    let steps: [(&str, &[&str]); 4] = [
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
        // What users get: each published crate packaged and built from its .crate alone
        // (cargo packages path dependencies together through a local registry).
        ("package", &PACKAGE),
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
    report(&times);
    if code != 0 {
        eprintln!("ci: test failed");
    }
    Ok(code)
}

fn report(times: &[(&str, std::time::Duration)]) {
    for (name, took) in times {
        eprintln!("ci: {name:<6} {:>7.1} s", took.as_secs_f64());
    }
}
