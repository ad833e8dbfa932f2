//! `cargo xtask rocksdb-newest`: the newest end of `afk-store-rocksdb`'s `rocksdb` version
//! range, proven the way a library user meets it.
//!
//! The workspace's lock keeps the oldest end (`rocksdb` 0.20.1, linked to Debian's
//! `librocksdb`: see CONTRIBUTING.md, "RocksDB from Debian"). This step generates an
//! application outside the clone that already uses the newest `rocksdb` (with
//! `default-features = false`, so every compression library it gets comes from
//! `afk-store-rocksdb`'s own features) and adds `afk-store-rocksdb` and `afk-conformance` by
//! path. It must resolve (`librocksdb-sys` is a `links` crate: two versions cannot coexist),
//! build RocksDB from source, and pass
//! `afk-store-rocksdb`'s own test files (the conformance suite, durability under SIGKILL, the
//! default configuration's compression) plus the application's test.
//!
//! The application and its target directory live in `$AFK_ROCKSDB_NEWEST_DIR`, by default
//! `<cache>/rocksdb-newest` (see [`system::cache_dir`]): only the first run on a machine pays
//! for RocksDB's C++ (17 minutes on two idle cores); later runs rebuild our crates only.
//! `cargo xtask ci` starts the build early, in the background ([`prebuild`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;
use std::{env, fs};

use anyhow::{Context, Result, bail};

use crate::system;

/// The newest `rocksdb` release proven: the top of the range in the workspace `Cargo.toml`
/// (`<0.26`). Raise both together, after this step passes with the new release.
pub const NEWEST: &str = "0.25";

/// The compressions a from-source RocksDB has with `afk-store-rocksdb`'s default features
/// (`snappy`), for `tests/it/open.rs` (`AFK_TEST_ROCKSDB_COMPRESSIONS`).
const COMPILED_IN: &str = "none,snappy";

/// Runs the step; returns the exit code of the failing cargo command, or 0.
pub fn run() -> Result<i32> {
    match prepare()? {
        Some((app, target)) => build_and_test(&app, &target),
        None => Ok(1),
    }
}

/// Builds the prepared application in `app` (into `target`) and runs its tests.
fn build_and_test(app: &Path, target: &Path) -> Result<i32> {
    warn_if_newer_release(app);

    let start = Instant::now();
    let status = system::run_status(cargo(app, target).args(["test", "--no-run"]))?;
    eprintln!(
        "rocksdb-newest: build {:.1} s",
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        return Ok(crate::test::code(status));
    }
    // The tests' temp dirs go under the app's target; a passing run leaves none behind.
    let tmp = target.join("tmp");
    let start = Instant::now();
    let status = system::run_status(
        cargo(app, target)
            .args(["test"])
            .env("AFK_TEST_ROCKSDB_COMPRESSIONS", COMPILED_IN)
            .env("TMPDIR", fresh_dir(&tmp)?),
    )?;
    eprintln!(
        "rocksdb-newest: tests {:.1} s",
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        eprintln!(
            "rocksdb-newest: failed; the tests' databases are kept in {}",
            tmp.display()
        );
        return Ok(crate::test::code(status));
    }
    let _ = fs::remove_dir_all(&tmp);
    Ok(0)
}

/// The application written and its lock resolved: its directory and its target directory, or
/// `None` (said why) when it does not resolve.
fn prepare() -> Result<Option<(PathBuf, PathBuf)>> {
    check_range_top()?;
    let mut debs = std::collections::BTreeSet::new();
    debs.extend(["libclang-dev", "g++"]);
    system::ensure_debs(&debs)?;

    let root = root();
    let app = root.join("app");
    let target = root.join("target");
    generate(&app, &system::repo_root())?;
    eprintln!("rocksdb-newest: application {}", app.display());

    // A fresh lock resolves everything to the newest releases; a kept one (later runs) moves
    // `rocksdb` alone, so a new release of a build-script dependency (`cc`, `bindgen`) does
    // not rebuild RocksDB's C++.
    let lock_args: &[&str] = if app.join("Cargo.lock").exists() {
        &["update", "-p", "rocksdb"]
    } else {
        &["generate-lockfile"]
    };
    if !system::run_status(cargo(&app, &target).args(lock_args))?.success() {
        eprintln!(
            "rocksdb-newest: the application does not resolve: afk-store-rocksdb cannot join an \
             application on rocksdb {NEWEST}"
        );
        return Ok(None);
    }
    let resolved = resolved_rocksdb(&app)?;
    eprintln!("rocksdb-newest: resolved rocksdb {}", resolved.join(", "));
    if resolved.len() != 1 || !resolved[0].starts_with(&format!("{NEWEST}.")) {
        bail!("expected one rocksdb {NEWEST}.x in the application, found {resolved:?}");
    }
    Ok(Some((app, target)))
}

/// Where the application and its target directory live.
fn root() -> PathBuf {
    env::var_os("AFK_ROCKSDB_NEWEST_DIR")
        .map_or_else(|| system::cache_dir().join("rocksdb-newest"), PathBuf::from)
}

/// The step's build started early, in the background at the lowest CPU priority, so that
/// RocksDB's C++ (17 minutes on two idle cores, the first time on a machine) compiles in
/// the time CI's other steps leave a core idle. [`Prebuild::finish`] is the step: it waits for
/// the build, then builds and tests as [`run`] does (finding the build done, or finishing it
/// and showing its errors if the early one failed). Dropped unfinished (an earlier step
/// failed), it stops the build and its compilers.
pub struct Prebuild {
    app: PathBuf,
    target: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    started: Instant,
}

/// Starts [`Prebuild`]; `None` (said why) when the application does not resolve or the build
/// cannot start: the step then builds in the foreground as it always does.
pub fn prebuild() -> Result<Option<Prebuild>> {
    let Some((app, target)) = prepare()? else {
        return Ok(None);
    };
    let log = root().join("prebuild.log");
    let out = fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    // `nice` in front of cargo: every compiler it starts inherits the priority. Its own
    // process group, so that stopping it stops the compilers too (librocksdb-sys's build
    // script runs them itself).
    let mut niced = Command::new("nice");
    niced
        .args(["-n", "19"])
        .arg(system::cargo().get_program())
        .args(["test", "--no-run"])
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    in_app(&mut niced, &app, &target);
    match niced.spawn() {
        Ok(child) => {
            eprintln!(
                "rocksdb-newest: building in the background at low priority (log {})",
                log.display()
            );
            Ok(Some(Prebuild {
                app,
                target,
                child: Some(child),
                log,
                started: Instant::now(),
            }))
        }
        Err(e) => {
            eprintln!("rocksdb-newest: cannot start the background build ({e}); it runs later");
            Ok(None)
        }
    }
}

impl Prebuild {
    /// The step: waits for the background build to end, says how it went, then builds and
    /// tests the application it prepared. Returns what [`run`] returns.
    pub fn finish(mut self) -> Result<i32> {
        if let Some(mut child) = self.child.take() {
            let waited = Instant::now();
            let ok = child.wait().is_ok_and(|s| s.success());
            eprintln!(
                "rocksdb-newest: background build {} after {:.1} s ({:.1} s of it waited for); log {}",
                if ok { "done" } else { "failed" },
                self.started.elapsed().as_secs_f64(),
                waited.elapsed().as_secs_f64(),
                self.log.display()
            );
        }
        build_and_test(&self.app, &self.target)
    }
}

impl Drop for Prebuild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The whole group: cargo, its build scripts and their compilers.
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

/// `cargo` in the application, building into `target`, without the variables that make
/// `librocksdb-sys` link a system library (`ROCKSDB_LIB_DIR`, `SNAPPY_LIB_DIR`, …: the
/// workspace's `.cargo/config.toml` passes them to xtask through cargo's `[env]`).
fn cargo(app: &Path, target: &Path) -> Command {
    let mut cmd = system::cargo();
    in_app(&mut cmd, app, target);
    cmd
}

/// Runs `cmd` (cargo, or a wrapper of it) in `app`, building into `target`, with the
/// environment [`cargo`] describes.
fn in_app(cmd: &mut Command, app: &Path, target: &Path) {
    cmd.current_dir(app).env("CARGO_TARGET_DIR", target);
    for (name, _) in env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("ROCKSDB_") || name.starts_with("SNAPPY_") {
            cmd.env_remove(&*name);
        }
    }
}

/// The workspace's `rocksdb` requirement must end just above [`NEWEST`].
fn check_range_top() -> Result<()> {
    let manifest = fs::read_to_string(system::repo_root().join("Cargo.toml"))?;
    let line = manifest
        .lines()
        .find(|l| l.starts_with("rocksdb = "))
        .context("no `rocksdb = ` line in the workspace Cargo.toml")?;
    let (major, minor) = NEWEST.split_once('.').context("NEWEST")?;
    let top = format!("<{major}.{}\"", minor.parse::<u32>()? + 1);
    if !line.contains(&top) {
        bail!("the workspace's rocksdb range ({line}) should end at `{top}` to match NEWEST");
    }
    Ok(())
}

/// The `rocksdb` versions in the application's lock.
fn resolved_rocksdb(app: &Path) -> Result<Vec<String>> {
    let lock = fs::read_to_string(app.join("Cargo.lock"))?;
    let mut versions = Vec::new();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"rocksdb\""
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            versions.push(v.trim_end_matches('"').to_owned());
        }
    }
    Ok(versions)
}

/// Says so (without failing) when crates.io has a `rocksdb` newer than [`NEWEST`].
fn warn_if_newer_release(app: &Path) {
    // In a project, `cargo info` prints the locked version and, when newer, `(latest X)`.
    let Some(info) = system::output(system::cargo().current_dir(app).args(["info", "rocksdb"]))
    else {
        return;
    };
    let Some(line) = info.lines().find_map(|l| l.strip_prefix("version: ")) else {
        return;
    };
    let latest = line
        .split_once("(latest ")
        .map_or(line, |(_, rest)| rest.trim_end_matches(')'))
        .trim();
    if !latest.starts_with(&format!("{NEWEST}.")) {
        eprintln!(
            "rocksdb-newest: WARNING: crates.io has rocksdb {latest}, past the proven {NEWEST}; \
             try it (NEWEST in xtask/src/rocksdb_newest.rs and the workspace range)"
        );
    }
}

/// An empty directory at `dir` (a failed run's leftovers are removed first).
fn fresh_dir(dir: &Path) -> Result<&Path> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Writes the application's files (only those that changed, so cargo rebuilds nothing
/// needlessly): a manifest that uses the newest `rocksdb` and adds our crates by path, every
/// test file of `afk-store-rocksdb` as one of its tests, and its own test.
fn generate(app: &Path, repo: &Path) -> Result<()> {
    let store = repo.join("afk-store-rocksdb");
    // Cargo's own discovery: each `tests/*.rs`, and `tests/<dir>/main.rs` (the crate's tests
    // are grouped in `tests/it/main.rs`, one binary), named after the file or the directory.
    let mut tests: Vec<(String, PathBuf)> = Vec::new();
    for entry in fs::read_dir(store.join("tests"))?.flatten() {
        let path = entry.path();
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.extension().is_some_and(|x| x == "rs") {
            tests.push((stem, path));
        } else if path.join("main.rs").is_file() {
            tests.push((stem, path.join("main.rs")));
        }
    }
    tests.sort();
    let mut manifest = format!(
        r#"# Generated by `cargo xtask rocksdb-newest` (xtask/src/rocksdb_newest.rs); rewritten each run.
[package]
name = "afk-rocksdb-newest"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
# The application's own RocksDB: the newest release, its compression left to its users.
rocksdb = {{ version = "{NEWEST}", default-features = false }}
afk-core = {{ path = {core} }}
afk-store-rocksdb = {{ path = {store} }}
tokio = {{ version = "1", features = ["rt-multi-thread", "macros"] }}

[dev-dependencies]
afk-conformance = {{ path = {conformance} }}
afk-seal = {{ path = {seal} }}
tempfile = "3"
tokio = {{ version = "1", features = ["rt-multi-thread", "macros", "test-util"] }}

[workspace]

# As the workspace's own profile: line tables for our code, no debug info for dependencies.
# RocksDB's C++ built with `-g` makes every test binary that links it a few hundred MB.
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false
"#,
        core = toml_str(&repo.join("afk-core")),
        store = toml_str(&store),
        conformance = toml_str(&repo.join("afk-conformance")),
        seal = toml_str(&repo.join("afk-seal")),
    );
    for (name, test) in &tests {
        manifest.push_str(&format!(
            "\n[[test]]\nname = \"store_{name}\"\npath = {}\n",
            toml_str(test)
        ));
    }
    write_if_changed(&app.join("Cargo.toml"), &manifest)?;
    write_if_changed(&app.join("src/main.rs"), APP_MAIN)?;
    write_if_changed(&app.join("tests/app.rs"), APP_TEST)
}

pub(crate) fn toml_str(path: &Path) -> String {
    let s = path.to_string_lossy();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

pub(crate) fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

const APP_MAIN: &str = r#"//! An application that keeps its own data in RocksDB and its agent runs in AFK's store.
fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "app-data".into());
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let own = rocksdb::DB::open(&opts, format!("{dir}/app")).expect("open the app's database");
    own.put(b"started", b"yes").expect("put");
    let store = afk_store_rocksdb::RocksDbStore::open(afk_store_rocksdb::RocksDbConfig::new(format!("{dir}/afk"))).expect("open AFK");
    println!("{store:?}");
}
"#;

const APP_TEST: &str = r#"//! The application's own test: its RocksDB and AFK's store in one process, one library.

use afk_core::store::{Epoch, Store};
use afk_core::{RunId, ThreadId};
use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

#[tokio::test]
async fn the_app_database_and_the_afk_store_work_side_by_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let own = rocksdb::DB::open(&opts, dir.path().join("app")).expect("app db");
    own.put(b"user:1", b"ada").expect("put");

    // The default configuration (Snappy), with nothing but afk-store-rocksdb's own features.
    let path = dir.path().join("afk");
    {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("open AFK with the default config");
        let (thread, run) = (ThreadId::new("t1").unwrap(), RunId::new("r1").unwrap());
        assert_eq!(store.claim(&thread, &run).await.unwrap(), Epoch(1));
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("reopen");
    let (thread, run) = (ThreadId::new("t1").unwrap(), RunId::new("r1").unwrap());
    assert_eq!(store.claim(&thread, &run).await.unwrap(), Epoch(2));
    assert_eq!(own.get(b"user:1").unwrap().as_deref(), Some(&b"ada"[..]));
}
"#;
