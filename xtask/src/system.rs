//! Small helpers over the operating system: running commands, installing Debian packages,
//! finding free ports and looking at processes. Only `std`; Linux with `/proc` assumed.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use anyhow::{Context, Result, bail};

/// Ports the long-running shared dev servers on this machine use; never hand them out.
const RESERVED_PORTS: [u16; 5] = [6400, 7001, 7002, 7003, 9100];

/// The repository root (the parent of the `xtask` crate).
///
/// `cargo xtask` (an alias of `cargo run`) gives the process `CARGO_MANIFEST_DIR`: the `xtask`
/// crate of the checkout it runs in. That comes first. The value compiled in names the checkout
/// that built the binary, which is another one when a shared target directory (CI's cache under
/// `/var/cache/afk-rs`) holds a build that cargo still finds fresh for this checkout: sources
/// with the same contents and older times. Then every step would run in that other checkout.
pub fn repo_root() -> PathBuf {
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .map_or(manifest.clone(), Path::to_path_buf)
}

/// Where downloaded tools (the moto virtualenv) live across clones: `$AFK_CACHE_DIR`, else
/// `/var/cache/afk-rs` when it is writable, else `target/afk-cache` in the clone.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = env::var_os("AFK_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let shared = PathBuf::from("/var/cache/afk-rs");
    if fs::create_dir_all(&shared).is_ok() && is_writable(&shared) {
        return shared;
    }
    repo_root().join("target").join("afk-cache")
}

fn is_writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".xtask-probe-{}", std::process::id()));
    let ok = fs::write(&probe, b"").is_ok();
    let _ = fs::remove_file(&probe);
    ok
}

/// The `cargo` that runs us (cargo sets `$CARGO`), else the one on `PATH`.
pub fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `cmd` with inherited stdio, echoing it first; returns its exit status.
pub fn run_status(cmd: &mut Command) -> Result<ExitStatus> {
    eprintln!("$ {}", show(cmd));
    cmd.status()
        .with_context(|| format!("cannot start `{}`", show(cmd)))
}

/// Runs `cmd` with inherited stdio and fails unless it exits with 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = run_status(cmd)?;
    if !status.success() {
        bail!("`{}` failed: {status}", show(cmd));
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout if it exits with 0.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command line for messages.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        s.push(' ');
        if arg.is_empty() || arg.contains(' ') {
            s.push_str(&format!("'{arg}'"));
        } else {
            s.push_str(&arg);
        }
    }
    s
}

/// True when `name` is an executable file on `PATH`.
pub fn on_path(name: &str) -> bool {
    env::var_os("PATH")
        .map(|paths| env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
        .unwrap_or(false)
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|uid| uid.trim() == "0")
}

/// True when the Debian package is installed. Without `dpkg-query` (not Debian) we cannot
/// tell and say yes: the build or the server start reports what is really missing.
pub fn deb_installed(package: &str) -> bool {
    if !on_path("dpkg-query") {
        return true;
    }
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_some_and(|status| status.ends_with("install ok installed"))
}

/// Makes sure the Debian `packages` are installed: as root with apt, `apt-get update` once and
/// one `apt-get install`; otherwise fails with one line that says how to install them.
pub fn ensure_debs(packages: &BTreeSet<&str>) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !deb_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    if !(is_root() && on_path("apt-get")) {
        bail!(
            "missing system packages; install them with: sudo apt-get install -y --no-install-recommends {list}"
        );
    }
    eprintln!("installing system packages: {list}");
    let apt = || {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    };
    run(apt().args(["update", "-q"]))?;
    run(apt()
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing))
}

/// `n` distinct free loopback ports. All listeners are held until every port is chosen, so
/// the ports differ; a race with another process between here and the server's bind is
/// possible but unlikely (the kernel hands out ephemeral ports round-robin).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
        let port = listener.local_addr()?.port();
        if !RESERVED_PORTS.contains(&port) {
            ports.push(port);
        }
        held.push(listener);
    }
    Ok(ports)
}

/// Polls `ready` every 100 ms until it is true or `limit` has passed.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > limit {
            bail!("{what}: not ready after {} s", limit.as_secs());
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The last `n` lines of a log file, for error messages (the set directory, logs included,
/// is removed when a failed start stops what it had started).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "{}:\n{}",
        path.display(),
        lines[lines.len().saturating_sub(n)..].join("\n")
    )
}

/// True when `pid` runs (not a zombie) and its command line contains `needle`: a pid file
/// that outlived its process never makes us signal an unrelated process.
pub fn process_matches(pid: u32, needle: &str) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if state == Some('Z') {
        return false;
    }
    fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
}

/// Sends SIGTERM to `pid` if it is still the process we started (see [`process_matches`]),
/// waits up to 10 s for it to exit, then SIGKILLs it.
pub fn stop_process(pid: u32, needle: &str) {
    if !process_matches(pid, needle) {
        return;
    }
    let _ = output(Command::new("kill").args(["-TERM", &pid.to_string()]));
    if wait_until("stop", Duration::from_secs(10), || {
        !process_matches(pid, needle)
    })
    .is_err()
    {
        let _ = output(Command::new("kill").args(["-KILL", &pid.to_string()]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_never_reserved() {
        let ports = free_ports(8).unwrap();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), 8);
        assert!(ports.iter().all(|p| !RESERVED_PORTS.contains(p)));
    }

    #[test]
    fn process_matches_checks_the_command_line() {
        let me = std::process::id();
        let exe = env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_string_lossy();
        assert!(process_matches(me, &name));
        assert!(!process_matches(me, "redis-server"));
        assert!(!process_matches(u32::MAX, &name)); // no such process
    }
}
