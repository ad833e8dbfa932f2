//! `cargo xtask quickstart`: the README's quick start, done the way a new user does it.
//!
//! The crates are packaged (`cargo package`, as they would be published) and unpacked; an
//! application outside the clone takes the README's `[dependencies]` block and its Rust example
//! unchanged (a `[patch.crates-io]` section points the crate names at the unpacked packages, as
//! if they came from crates.io). It builds, then runs against LiteLLM's OpenAI-compatible proxy
//! serving a scripted model (`services/litellm.rs`):
//! 1. a run completes: the tool runs once, the final answer is printed;
//! 2. a run killed with SIGKILL while it waits for the model's second answer (the proxy holds
//!    that request) and started again resumes: the tool does not run again and the first
//!    model call is not made again; a third start prints the stored answer without a call.
//!
//! RocksDB: the application is built against Debian's `librocksdb` with `rocksdb` 0.20.1 in
//! its lock, as the workspace is (compiling RocksDB's C++ takes half an hour here, and
//! `cargo xtask rocksdb-newest` already proves the from-source build). Everything lives in
//! `$AFK_QUICKSTART_DIR`, by default `<cache>/quickstart`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use std::{env, thread};

use anyhow::{Context, Result, bail};

use crate::rocksdb_newest::{toml_str, write_if_changed};
use crate::services::litellm::{self, Llm};
use crate::services::{Needs, Services};
use crate::system;

/// The line the example's tool prints each time it runs.
const TOOL_LINE: &str = "weather(Oslo) runs";

/// The crates the application may reach (all published ones: unused patches are harmless).
const CRATES: [&str; 9] = [
    "afk-core",
    "afk-conformance",
    "afk-store-rocksdb",
    "afk-store-redis",
    "afk-store-s3",
    "afk-seal",
    "afk-providers",
    "afk",
    "afk-cli",
];

/// Runs the check; returns 0, or 1 after saying what went wrong.
pub fn run() -> Result<i32> {
    let mut debs = std::collections::BTreeSet::from(["libclang-dev", "librocksdb-dev"]);
    if litellm::needs_python_venv() {
        debs.insert("python3-venv");
    }
    system::ensure_debs(&debs)?;
    let root = env::var_os("AFK_QUICKSTART_DIR")
        .map_or_else(|| system::cache_dir().join("quickstart"), PathBuf::from);
    let readme = fs::read_to_string(system::repo_root().join("README.md"))?;
    let (deps, main) = quick_start(&readme)?;
    let packages = package(&root)?;
    let app = root.join("app");
    let target = root.join("target");
    generate(&app, &deps, &main, &packages)?;
    let start = Instant::now();
    if !build(&app, &target)?.success() {
        eprintln!("quickstart: the README's example does not build from the packaged crates");
        return Ok(1);
    }
    eprintln!("quickstart: build {:.1} s", start.elapsed().as_secs_f64());
    let exe = target.join("debug").join("afk-quickstart");

    let services = Services::start(
        &format!("quickstart-{}", std::process::id()),
        Needs {
            redis: false,
            s3: false,
        },
        true,
    )?;
    let start = Instant::now();
    let llm = litellm::start(services.dir())?;
    eprintln!(
        "quickstart: LiteLLM's proxy up at {} after {:.1} s",
        llm.base_url,
        start.elapsed().as_secs_f64()
    );
    let runs = root.join("runs");
    let _ = fs::remove_dir_all(&runs);
    let checks = completes(&exe, &runs.join("complete"), &llm)
        .and_then(|()| resumes_after_a_kill(&exe, &runs.join("killed"), &llm));
    match checks {
        Ok(()) => {
            eprintln!("quickstart: the README's example completes, and resumes after SIGKILL");
            Ok(0)
        }
        Err(e) => {
            eprintln!(
                "quickstart: FAILED: {e:#}\n(the runs' directories are kept in {}; LiteLLM's log: {})",
                runs.display(),
                system::log_tail(&services.dir().join("litellm.log"), 20)
            );
            Ok(1)
        }
    }
}

/// The README's quick start: the first ```toml block after `## Quick start` (its
/// `[dependencies]`), and the Rust block that follows.
fn quick_start(readme: &str) -> Result<(String, String)> {
    let (_, section) = readme
        .split_once("\n## Quick start")
        .context("README.md has no `## Quick start` section")?;
    let toml = fenced(section, "toml").context("no ```toml block in the quick start")?;
    if !toml.trim_start().starts_with("[dependencies]") {
        bail!("the quick start's ```toml block does not start with [dependencies]");
    }
    let rust = fenced(section, "rust").context("no ```rust block in the quick start")?;
    Ok((toml, rust))
}

/// The body of the first fenced block of `lang` in `text`.
fn fenced(text: &str, lang: &str) -> Option<String> {
    let open = format!("```{lang}\n");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find("\n```")?;
    Some(format!("{}\n", &text[start..end]))
}

/// Packages the crates (`cargo package --no-verify`: the package step of `cargo xtask ci`
/// verifies them) and unpacks each afresh; returns `(name, unpacked directory)`.
fn package(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let target = root.join("package-target");
    let mut cmd = system::cargo();
    cmd.args(["package", "--no-verify", "--allow-dirty", "--quiet"])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(system::repo_root());
    for name in CRATES {
        cmd.args(["-p", name]);
    }
    if !system::run_status(&mut cmd)?.success() {
        bail!("cargo package failed");
    }
    let unpacked = root.join("unpacked");
    let _ = fs::remove_dir_all(&unpacked);
    fs::create_dir_all(&unpacked)?;
    let mut packages = Vec::new();
    for name in CRATES {
        let file = fs::read_dir(target.join("package"))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|f| f.to_str())
                    .and_then(|f| f.strip_prefix(name))
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                    && p.extension().is_some_and(|x| x == "crate")
            })
            .max()
            .with_context(|| format!("no {name}-<version>.crate after cargo package"))?;
        system::run(
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&unpacked),
        )?;
        let dir = unpacked.join(file.file_stem().context("crate file name")?);
        packages.push((name.to_owned(), dir));
    }
    Ok(packages)
}

/// Writes the application: the README's dependencies and example as they are, the packaged
/// crates in place of crates.io's.
fn generate(app: &Path, deps: &str, main: &str, packages: &[(String, PathBuf)]) -> Result<()> {
    let mut manifest = format!(
        "# Generated by `cargo xtask quickstart` (xtask/src/quickstart.rs); rewritten each run.\n\
         [package]\nname = \"afk-quickstart\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n# The README's quick start, unchanged:\n{deps}\n\
         # The packaged crates, as if they came from crates.io:\n[patch.crates-io]\n"
    );
    for (name, dir) in packages {
        manifest.push_str(&format!("{name} = {{ path = {} }}\n", toml_str(dir)));
    }
    manifest.push_str("\n[workspace]\n");
    write_if_changed(&app.join("Cargo.toml"), &manifest)?;
    write_if_changed(&app.join("src/main.rs"), main)
}

/// Locks `rocksdb` at 0.20.1 (the release that links Debian's RocksDB 7.x) and builds.
fn build(app: &Path, target: &Path) -> Result<ExitStatus> {
    let cargo = || {
        let mut cmd = system::cargo();
        cmd.current_dir(app)
            .env("CARGO_TARGET_DIR", target)
            .env("ROCKSDB_LIB_DIR", "/usr/lib/x86_64-linux-gnu")
            .env("ROCKSDB_INCLUDE_DIR", "/usr/include")
            .env("SNAPPY_LIB_DIR", "/usr/lib/x86_64-linux-gnu");
        cmd
    };
    if !app.join("Cargo.lock").exists() {
        let status = system::run_status(cargo().arg("generate-lockfile"))?;
        if !status.success() {
            return Ok(status);
        }
    }
    let status =
        system::run_status(cargo().args(["update", "-p", "rocksdb", "--precise", "0.20.1"]))?;
    if !status.success() {
        return Ok(status);
    }
    system::run_status(cargo().arg("build"))
}

/// Starts the example in `dir` against the proxy; its stdout and stderr go to
/// `<dir>/<name>.out` and `<dir>/<name>.err`.
fn spawn(exe: &Path, dir: &Path, llm: &Llm, name: &str) -> Result<Child> {
    fs::create_dir_all(dir)?;
    Command::new(exe)
        .current_dir(dir)
        .env("OPENAI_BASE_URL", &llm.base_url)
        .env("OPENAI_API_KEY", litellm::KEY)
        .env("AFK_MODEL", litellm::MODEL)
        .stdin(Stdio::null())
        .stdout(File::create(dir.join(format!("{name}.out")))?)
        .stderr(File::create(dir.join(format!("{name}.err")))?)
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))
}

/// What one start of the example did.
struct Start {
    stdout: String,
    tool_runs: usize,
    /// The model requests the proxy answered during it.
    requests: Vec<String>,
}

/// Runs the example to its end (at most 2 minutes); fails unless it exits with 0.
fn run_to_end(exe: &Path, dir: &Path, llm: &Llm, name: &str) -> Result<Start> {
    let before = llm.requests().len();
    let mut child = spawn(exe, dir, llm, name)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name}: still running after 2 minutes");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let start = read_start(dir, name, llm, before)?;
    if !status.success() {
        bail!(
            "{name}: exit {status}; stderr:\n{}",
            fs::read_to_string(dir.join(format!("{name}.err")))?
        );
    }
    Ok(start)
}

fn read_start(dir: &Path, name: &str, llm: &Llm, before: usize) -> Result<Start> {
    let stderr = fs::read_to_string(dir.join(format!("{name}.err")))?;
    Ok(Start {
        stdout: fs::read_to_string(dir.join(format!("{name}.out")))?,
        tool_runs: stderr.lines().filter(|l| l.contains(TOOL_LINE)).count(),
        requests: llm.requests().split_off(before),
    })
}

fn expect(start: &Start, name: &str, tool_runs: usize, requests: &[&str]) -> Result<()> {
    if !start.stdout.contains(litellm::FINAL) {
        bail!(
            "{name}: stdout lacks the model's final answer {:?}: {:?}",
            litellm::FINAL,
            start.stdout
        );
    }
    if start.tool_runs != tool_runs {
        bail!(
            "{name}: the tool ran {} times, expected {tool_runs}",
            start.tool_runs
        );
    }
    if start.requests != requests {
        bail!(
            "{name}: model requests {:?}, expected {requests:?}",
            start.requests
        );
    }
    Ok(())
}

/// A run from start to end: one tool call, two model calls, the answer printed.
fn completes(exe: &Path, dir: &Path, llm: &Llm) -> Result<()> {
    let first = run_to_end(exe, dir, llm, "complete")?;
    expect(&first, "complete", 1, &["call", "final"])
}

/// A run killed while the model's second answer is pending, then started twice more.
fn resumes_after_a_kill(exe: &Path, dir: &Path, llm: &Llm) -> Result<()> {
    let before = llm.requests().len();
    let _ = fs::remove_file(llm.held());
    fs::write(&llm.hold, b"")?;
    let mut child = spawn(exe, dir, llm, "killed")?;
    system::wait_until(
        "the model's second answer being held",
        Duration::from_secs(120),
        || llm.held().exists(),
    )?;
    // The tool's result was committed before the second model call started (the writer
    // batches for a few milliseconds); the kill lands well after.
    thread::sleep(Duration::from_secs(2));
    if child.try_wait()?.is_some() {
        bail!("killed: the example ended before the kill");
    }
    child.kill().context("SIGKILL")?; // std's kill is SIGKILL
    child.wait()?;
    let killed = read_start(dir, "killed", llm, before)?;
    if killed.tool_runs != 1 || killed.requests != ["call", "final"] {
        bail!(
            "killed: before the kill the tool ran {} times and the model answered {:?}; expected \
             1 and [call, final]",
            killed.tool_runs,
            killed.requests
        );
    }
    let resumed = run_to_end(exe, dir, llm, "resumed")?;
    expect(&resumed, "resumed", 0, &["final"])?;
    let again = run_to_end(exe, dir, llm, "again")?;
    expect(&again, "again", 0, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_start_is_read_from_the_readme() {
        let readme = fs::read_to_string(system::repo_root().join("README.md")).unwrap();
        let (deps, main) = quick_start(&readme).unwrap();
        assert!(deps.contains("afk = "), "{deps}");
        assert!(main.contains("fn main"), "{main}");
        // The example's tool prints the line the check counts.
        assert!(main.contains("\"weather({}) runs"), "{main}");
    }
}
