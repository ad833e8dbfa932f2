//! `cargo xtask test`: install what the build and the servers need, start the servers, run
//! every test with the servers' addresses exported, stop the servers.

use std::collections::BTreeSet;
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::Result;
use clap::ValueEnum;

use crate::services::{Needs, Services};
use crate::system;

/// A group of tests, named by the store they exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Store {
    /// Core, the conformance suite and the example store (in-memory; no server).
    Memory,
    /// The RocksDB store, the `afk` facade and the `afk` command line with their default
    /// features.
    Rocksdb,
    /// The Redis store, against a single node and a 3-master cluster, and the command line's
    /// Redis tests.
    Redis,
    /// The S3 store, against moto's server, and the command line's S3 tests.
    S3,
}

/// What to build and test, and what it needs.
#[derive(Debug)]
pub struct Selection {
    /// Package arguments for cargo (`--workspace --all-features` or `-p …`).
    pub cargo_args: Vec<String>,
    /// The servers the tests need.
    pub needs: Needs,
    /// The Debian packages the build needs.
    pub build_debs: BTreeSet<&'static str>,
    /// The Debian packages the tests need besides the servers: the browser of `afk serve`'s
    /// browser tests when the command line crate is tested.
    pub test_debs: BTreeSet<&'static str>,
}

/// Debian packages the RocksDB crate needs to build: bindgen's libclang and the library we
/// link instead of compiling RocksDB's C++ (see `.cargo/config.toml`).
pub const ROCKSDB_DEBS: [&str; 2] = ["libclang-dev", "librocksdb-dev"];

/// Debian packages of the browser `afk serve`'s tests drive: headless Chromium
/// (`/usr/bin/chromium`) and its WebDriver server (`/usr/bin/chromedriver`).
pub const BROWSER_DEBS: [&str; 2] = ["chromium", "chromium-driver"];

impl Selection {
    /// The selection for `stores`; empty means everything.
    pub fn new(stores: &[Store]) -> Selection {
        if stores.is_empty() {
            return Selection {
                cargo_args: vec!["--workspace".into(), "--all-features".into()],
                needs: Needs::ALL,
                build_debs: ROCKSDB_DEBS.into(),
                test_debs: BROWSER_DEBS.into(),
            };
        }
        let mut packages = BTreeSet::new();
        let mut needs = Needs {
            redis: false,
            s3: false,
        };
        let mut build_debs = BTreeSet::new();
        // Features of the selected crates: the command line crate's Redis, S3 and KMS tests
        // are behind them (it always builds with RocksDB, its default store), the KMS key
        // source's, and the providers'.
        let mut features = BTreeSet::new();
        for store in stores {
            match store {
                Store::Memory => {
                    packages.extend([
                        "afk-core",
                        "afk-conformance",
                        "afk-seal",
                        "afk-providers",
                        "custom-store",
                    ]);
                    // The providers' tests run against recorded exchanges on a local server.
                    features.insert("afk-providers/openai");
                    features.insert("afk-providers/anthropic");
                }
                Store::Rocksdb => {
                    packages.extend(["afk-store-rocksdb", "afk", "afk-cli"]);
                    build_debs.extend(ROCKSDB_DEBS);
                }
                Store::Redis => {
                    packages.extend(["afk-store-redis", "afk-cli"]);
                    features.insert("afk-cli/redis");
                    build_debs.extend(ROCKSDB_DEBS);
                    needs.redis = true;
                }
                Store::S3 => {
                    // The S3 test server (moto) serves KMS too: the KMS key source's tests.
                    packages.extend(["afk-store-s3", "afk-cli", "afk-seal"]);
                    features.extend(["afk-cli/s3", "afk-cli/kms", "afk-seal/kms"]);
                    build_debs.extend(ROCKSDB_DEBS);
                    needs.s3 = true;
                }
            }
        }
        let mut cargo_args: Vec<String> = packages
            .iter()
            .flat_map(|p| ["-p".to_string(), p.to_string()])
            .collect();
        if !features.is_empty() {
            let list: Vec<&str> = features.into_iter().collect();
            cargo_args.extend(["--features".to_string(), list.join(",")]);
        }
        let test_debs = if packages.contains("afk-cli") {
            BROWSER_DEBS.into()
        } else {
            BTreeSet::new()
        };
        Selection {
            cargo_args,
            needs,
            build_debs,
            test_debs,
        }
    }
}

/// Sets `name` on `cmd` to the value in our environment, or to `default` when unset.
fn env_or(cmd: &mut Command, name: &str, default: &str) {
    let value = env::var(name).unwrap_or_else(|_| default.to_string());
    eprintln!("{name}={value}");
    cmd.env(name, value);
}

/// Runs the tests of `stores` (all when empty), passing `extra` to cargo-nextest. Returns the
/// exit code: 0, or the first failing command's code (doctests run only after the other tests
/// pass). The servers are stopped before it returns.
pub fn run(stores: &[Store], extra: &[String]) -> Result<i32> {
    let selection = Selection::new(stores);
    system::ensure_debs(
        &selection
            .build_debs
            .union(&selection.test_debs)
            .copied()
            .collect(),
    )?;
    let services = if selection.needs.redis || selection.needs.s3 {
        Some(Services::start(
            &format!("test-{}", std::process::id()),
            selection.needs,
            true,
        )?)
    } else {
        None
    };
    let configure = |cmd: &mut Command| {
        for (key, value) in services.iter().flat_map(|s| s.env()) {
            eprintln!("{key}={value}");
            cmd.env(key, value);
        }
        cmd.env("AFK_REQUIRE_INTEGRATION", "1");
        // PROPTEST_CASES is left to the caller: each property test has a default sized for
        // what one case costs (a conformance case against S3 costs seconds, a key-building
        // case microseconds), and one global number would make the slow ones take many
        // minutes. The normalization proptests get 10,000 cases: CI's minimum for them.
        env_or(cmd, "AFK_PROPTEST_NORMALIZE_CASES", "10000");
    };

    let mut nextest = system::cargo();
    nextest.args(["nextest", "run", "--all-targets", "--no-tests", "warn"]);
    nextest.args(&selection.cargo_args).args(extra);
    configure(&mut nextest);
    let status = system::run_status(&mut nextest)?;
    if !status.success() {
        eprintln!(
            "test: failed; the stores the conformance tests shared per process are kept in {}",
            test_tmp_dir().display()
        );
        return Ok(code(status));
    }
    // cargo-nextest does not run doctests; cargo's own harness does.
    let mut doctest = system::cargo();
    doctest.args(["test", "--doc"]).args(&selection.cargo_args);
    configure(&mut doctest);
    let status = system::run_status(&mut doctest)?;
    drop(services); // stops the servers; an early return above drops them too
    if status.success() {
        remove_process_dirs(&test_tmp_dir());
    }
    Ok(code(status))
}

/// The sealed-value decoder's fuzz test (`afk-seal/tests/it/fuzz.rs`) for `seconds` (up to ten
/// million cases), built as the full test run builds it, so nothing is compiled again. No
/// server: it reads through a sealed in-memory store.
pub fn fuzz_seal(seconds: u64) -> Result<i32> {
    let mut cmd = system::cargo();
    cmd.args(["nextest", "run", "--all-targets", "--no-capture"])
        .args(&Selection::new(&[]).cargo_args)
        .args(["-E", "package(afk-seal) and test(/^fuzz::/)"])
        .env("AFK_FUZZ_CASES", "10000000")
        .env("AFK_FUZZ_SECONDS", seconds.to_string());
    Ok(code(system::run_status(&mut cmd)?))
}

/// `<target>/tmp`, the tests' `CARGO_TARGET_TMPDIR`.
fn test_tmp_dir() -> PathBuf {
    let target = env::var_os("CARGO_TARGET_DIR").map_or_else(
        || system::repo_root().join("target"),
        |dir| system::repo_root().join(dir),
    );
    target.join("tmp")
}

/// Removes the directories `<name>-<pid>` in `tmp` whose process has exited: the stores the
/// conformance tests share per process (`afk-store-rocksdb/tests/it/conformance.rs`,
/// `examples/custom-store/tests/it/conformance.rs`). Each test process already removes those of
/// earlier processes; after a passing run the last ones go too.
fn remove_process_dirs(tmp: &Path) {
    for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The exit code to pass on; 128 + signal number style for a killed child.
pub fn code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_exited_processes_are_removed() {
        let me = std::process::id();
        let tmp = env::temp_dir().join(format!("xtask-process-dirs-{me}"));
        let live = tmp.join(format!("rocksdb-conformance-{me}"));
        let dead = tmp.join(format!("rocksdb-conformance-{}", u32::MAX)); // never a pid
        let other = tmp.join("outside-workspace");
        for dir in [&live, &dead, &other] {
            std::fs::create_dir_all(dir).unwrap();
        }
        remove_process_dirs(&tmp);
        let left = [live.exists(), dead.exists(), other.exists()];
        std::fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(left, [true, false, true]);
    }

    #[test]
    fn no_store_selects_everything_with_all_features_and_servers() {
        let all = Selection::new(&[]);
        assert_eq!(all.cargo_args, ["--workspace", "--all-features"]);
        assert_eq!(all.needs, Needs::ALL);
        assert!(all.build_debs.contains("librocksdb-dev"));
        assert_eq!(all.test_debs, BTreeSet::from(BROWSER_DEBS));
    }

    #[test]
    fn memory_needs_no_server_and_no_system_library() {
        let memory = Selection::new(&[Store::Memory]);
        assert_eq!(
            memory.cargo_args,
            [
                "-p",
                "afk-conformance",
                "-p",
                "afk-core",
                "-p",
                "afk-providers",
                "-p",
                "afk-seal",
                "-p",
                "custom-store",
                "--features",
                "afk-providers/anthropic,afk-providers/openai"
            ]
        );
        assert_eq!(
            memory.needs,
            Needs {
                redis: false,
                s3: false
            }
        );
        assert!(memory.build_debs.is_empty());
        assert!(memory.test_debs.is_empty());
    }

    #[test]
    fn stores_combine_packages_servers_and_packages_to_install() {
        let both = Selection::new(&[Store::S3, Store::Rocksdb]);
        assert_eq!(
            both.cargo_args,
            [
                "-p",
                "afk",
                "-p",
                "afk-cli",
                "-p",
                "afk-seal",
                "-p",
                "afk-store-rocksdb",
                "-p",
                "afk-store-s3",
                "--features",
                "afk-cli/kms,afk-cli/s3,afk-seal/kms"
            ]
        );
        assert_eq!(
            both.needs,
            Needs {
                redis: false,
                s3: true
            }
        );
        assert_eq!(both.build_debs, BTreeSet::from(ROCKSDB_DEBS));
        assert_eq!(both.test_debs, BTreeSet::from(BROWSER_DEBS));
    }
}
