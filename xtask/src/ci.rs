//! `cargo xtask ci`: exactly what CI runs once the machine has Rust (see `.ci/run`).

use std::time::Instant;

use anyhow::Result;

use crate::chaos;
use crate::features;
use crate::msrv;
use crate::services::Needs;
use crate::system;
use crate::test::{self, BROWSER_DEBS, ROCKSDB_DEBS};

/// `cargo package` of every crate meant to be published, verified (built from the packaged
/// sources alone). `--allow-dirty`: it checks what a package would hold, also before a commit.
const PACKAGE: [&str; 20] = [
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
    "afk-seal",
    "-p",
    "afk-providers",
    "-p",
    "afk",
    "-p",
    "afk-cli",
];

/// How long CI feeds the sealed-value decoder damaged and arbitrary bytes.
const FUZZ_SECONDS: u64 = 45;

/// Runs format check, clippy, rustdoc, the package check, the feature combinations, every test,
/// the sealed-value decoder's fuzz test, the newest-rocksdb build and the quick chaos campaigns
/// (plain, worker mode, values sealed at rest), stopping at the first failure. Returns the exit
/// code. Prints how long each step took.
pub fn run() -> Result<i32> {
    // Install everything up front: clippy and rustdoc already build the RocksDB crate.
    let mut debs = Needs::ALL.debs();
    debs.extend(ROCKSDB_DEBS);
    debs.extend(BROWSER_DEBS);
    system::ensure_debs(&debs)?;
    // RocksDB's C++ for the rocksdb-newest step starts compiling now, in the cores the steps
    // before it leave idle.
    let prebuild = crate::rocksdb_newest::prebuild()?;

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
        if name == "package" {
            forget_unpacked_packages()?;
            cmd.arg("--target-dir").arg(package_target_dir()?);
        }
        let status = system::run_status(&mut cmd)?;
        times.push((name, start.elapsed()));
        if !status.success() {
            report(&times);
            eprintln!("ci: {name} failed");
            return Ok(test::code(status));
        }
    }
    // Each feature combination users build, alone (`cargo check`).
    let start = Instant::now();
    let code = features::run()?;
    times.push(("features", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: features failed");
        return Ok(code);
    }
    let start = Instant::now();
    let code = msrv::run()?;
    times.push(("msrv", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: msrv failed");
        return Ok(code);
    }
    // The README's quick start from the packaged crates, outside the clone, against a real
    // OpenAI-compatible server: completes, and resumes after SIGKILL without repeating its tool.
    let start = Instant::now();
    let code = crate::quickstart::run()?;
    times.push(("quickstart", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: quickstart failed");
        return Ok(code);
    }
    let start = Instant::now();
    let code = test::run(&[], &[])?;
    times.push(("test", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: test failed");
        return Ok(code);
    }
    // The sealed-value decoder fed damaged and arbitrary bytes, for a bounded time.
    let start = Instant::now();
    let code = test::fuzz_seal(FUZZ_SECONDS)?;
    times.push(("fuzz", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: fuzz failed");
        return Ok(code);
    }
    // The newest end of the rocksdb range, RocksDB built from source in an application outside
    // the clone (cached there: only the first run on a machine compiles the C++).
    let start = Instant::now();
    let code = match prebuild {
        Some(prebuild) => prebuild.finish()?,
        None => crate::rocksdb_newest::run()?,
    };
    times.push(("rocksdb-newest", start.elapsed()));
    if code != 0 {
        report(&times);
        eprintln!("ci: rocksdb-newest failed");
        return Ok(code);
    }
    // The quick crash campaigns: runs resumed by hand, runs left to workers, and the first
    // again with every value sealed at rest (a sealed store resumes as a plain one does, and
    // no value reaches the store in the clear).
    let campaigns = [
        ("chaos", false, false),
        ("chaos --workers", true, false),
        ("chaos --sealed", false, true),
    ];
    for (name, workers, sealed) in campaigns {
        let start = Instant::now();
        let code = chaos::run(&chaos::Options {
            quick: true,
            workers,
            sealed,
            ..chaos::Options::default()
        })?;
        times.push((name, start.elapsed()));
        if code != 0 {
            report(&times);
            eprintln!("ci: {name} failed");
            return Ok(code);
        }
    }
    report(&times);
    Ok(0)
}

/// `cargo package` of several workspace crates verifies each against the others through a
/// local registry, and cargo unpacks those crates into `$CARGO_HOME/registry/src/-<hash>/`
/// once per name and version: a later run would build against the stale sources of an
/// earlier one. Remove our crates' unpacked copies from such local-registry folders (their
/// names start with `-`; crates.io's do not) so every run verifies the sources it packed.
fn forget_unpacked_packages() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    let crates: Vec<&str> = PACKAGE.iter().skip(3).step_by(2).copied().collect();
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in std::fs::read_dir(registry.path())?.flatten() {
            let name = unpacked.file_name().to_string_lossy().into_owned();
            let ours = crates.iter().any(|c| {
                name.strip_prefix(c)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(unpacked.path())?;
            }
        }
    }
    Ok(())
}

/// The package check's own target directory, `<target>/package-check`, without the build
/// artifacts of our crates: cargo takes a registry crate's artifacts as up to date by name
/// and version alone, so the local-registry copies of our crates must be rebuilt each run
/// (third-party dependencies stay cached).
fn package_target_dir() -> Result<std::path::PathBuf> {
    let base = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::PathBuf::from("target"),
        std::path::PathBuf::from,
    );
    let dir = base.join("package-check");
    for sub in ["debug/.fingerprint", "debug/deps", "debug/build"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("afk") || name.starts_with("libafk") {
                let path = entry.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(path)?;
                } else {
                    std::fs::remove_file(path)?;
                }
            }
        }
    }
    Ok(dir)
}

fn report(times: &[(&str, std::time::Duration)]) {
    for (name, took) in times {
        eprintln!("ci: {name:<14} {:>7.1} s", took.as_secs_f64());
    }
}
