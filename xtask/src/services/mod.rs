//! The real servers the integration tests talk to: a single Redis, a 3-master Redis Cluster
//! and moto's S3-compatible server, each on free loopback ports; and, for the quick start's
//! check, LiteLLM's OpenAI-compatible proxy (`litellm`, started into a set by its caller).
//!
//! A *set* of servers lives in `.afk-services/<set>/` at the repository root: one `<name>.pid`
//! per process, its log, and `env` with the variables the tests read. `services up` uses the
//! set `manual`; every `xtask test` run uses its own set `test-<pid>`, so a test run never
//! touches servers someone started by hand. Only processes named in our own pid files are ever
//! signalled, and only while their command line still matches (see `system::stop_process`).

pub mod litellm;
pub mod redis;
pub mod s3;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::system;

/// Which servers a command needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// A single Redis and a 3-master Redis Cluster.
    pub redis: bool,
    /// moto's S3 server.
    pub s3: bool,
}

impl Needs {
    /// Every server.
    pub const ALL: Needs = Needs {
        redis: true,
        s3: true,
    };

    /// Debian packages these servers need that are not there yet.
    pub fn debs(self) -> BTreeSet<&'static str> {
        let mut debs = BTreeSet::new();
        if self.redis {
            debs.extend(["redis-server", "redis-tools"]);
        }
        if self.s3 && s3::needs_python_venv() {
            debs.insert("python3-venv");
        }
        debs
    }
}

/// True when `bin` (a program of a virtualenv xtask installs) is missing and `python3` cannot
/// create a virtualenv (Debian's python3 without `python3-venv`).
pub fn needs_python_venv(bin: &Path) -> bool {
    !bin.is_file()
        && system::output(Command::new("python3").args(["-c", "import venv, ensurepip"])).is_none()
}

/// Creates the virtualenv `venv` and installs `package` into it with pip, unless `bin` (a
/// program the package installs there) exists already.
pub fn pip_install(venv: &Path, bin: &Path, package: &str) -> Result<()> {
    if bin.is_file() {
        return Ok(());
    }
    eprintln!(
        "installing {package} into {} (about 1-2 min, once)",
        venv.display()
    );
    let _ = fs::remove_dir_all(venv); // a half-made venv from an interrupted install
    system::run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    system::run(Command::new(venv.join("bin").join("pip")).args(["install", "-q", package]))
}

/// The status code of `GET <path>` on a loopback `port`, or `None` when nothing answers HTTP.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    let text = std::str::from_utf8(&head).ok()?;
    text.strip_prefix("HTTP/")?.split_once(' ')?.1.parse().ok()
}

/// The directory holding every set of this clone.
pub fn state_root() -> PathBuf {
    system::repo_root().join(".afk-services")
}

/// Servers started by this process. Dropping it stops them unless [`Services::keep`] was
/// called, so a failed start or a failed test run never leaves servers behind.
#[derive(Debug)]
pub struct Services {
    dir: PathBuf,
    env: Vec<(String, String)>,
    stop_on_drop: bool,
}

impl Services {
    /// Installs what is missing, then starts the servers `needs` names in set `set`. With
    /// `reaper`, the servers are also stopped when this process is killed (see
    /// [`spawn_reaper`]); `services up` leaves that off so its servers outlive it.
    pub fn start(set: &str, needs: Needs, reaper: bool) -> Result<Services> {
        system::ensure_debs(&needs.debs())?;
        let dir = state_root().join(set);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if reaper {
            spawn_reaper(set)?;
        }
        let mut services = Services {
            dir,
            env: Vec::new(),
            stop_on_drop: true,
        };
        if needs.redis {
            let url = redis::start_single(&services.dir)?;
            services.env.push(("AFK_TEST_REDIS_URL".into(), url));
            let urls = redis::start_cluster(&services.dir)?;
            services
                .env
                .push(("AFK_TEST_REDIS_CLUSTER_URLS".into(), urls));
        }
        if needs.s3 {
            let endpoint = s3::start(&services.dir)?;
            services.env.push(("AFK_TEST_S3_ENDPOINT".into(), endpoint));
            for (key, value) in [
                ("AFK_TEST_S3_REGION", "us-east-1"),
                ("AFK_TEST_S3_ACCESS_KEY_ID", "test"),
                ("AFK_TEST_S3_SECRET_ACCESS_KEY", "test"),
            ] {
                services.env.push((key.into(), value.into()));
            }
            services.env.push((
                "AFK_TEST_MOTO_SERVER".into(),
                s3::moto_server().display().to_string(),
            ));
        }
        let env_file: String = services
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        fs::write(services.dir.join("env"), env_file)?;
        Ok(services)
    }

    /// The set's directory (pid files, logs, `env`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The variables the tests read, as `(name, value)`.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// One `export …` line for a shell.
    pub fn export_line(&self) -> String {
        let pairs: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("export {}", pairs.join(" "))
    }

    /// Leaves the servers running when this value is dropped (for `services up`).
    pub fn keep(mut self) {
        self.stop_on_drop = false;
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        if self.stop_on_drop {
            stop_set(&self.dir);
        }
    }
}

/// Stops the servers if this process dies without running `Drop`.
///
/// Ctrl-C sends SIGINT to the whole foreground process group: cargo-nextest and the tests,
/// but also this process, which (with only `std`) cannot catch it and dies without running
/// destructors. So a small shell reaper in its own process group (out of reach of Ctrl-C)
/// polls our pid and, once we are gone, runs `xtask services down --set <set>`. After a
/// normal exit `Drop` has already stopped everything and the reaper finds nothing to do.
pub fn spawn_reaper(set: &str) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    Command::new("sh")
        .args(["-c", r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" services down --set "$3""#])
        .arg("reaper")
        .arg(std::process::id().to_string())
        .arg(exe)
        .arg(set)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("cannot start the reaper")?;
    Ok(())
}

/// The pid files of a set: `(path, name)`.
fn pid_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let name = path.file_name()?.to_str()?.strip_suffix(".pid")?.to_owned();
            Some((path, name))
        })
        .collect();
    files.sort();
    files
}

/// The string a process's command line must contain to be the one a pid file names
/// (`agent*.pid`: the processes of `xtask chaos`).
fn needle(name: &str) -> &'static str {
    if name.starts_with("moto") {
        "moto_server"
    } else if name.starts_with("litellm") {
        "litellm"
    } else if name.starts_with("agent") {
        "chaos_agent"
    } else {
        "redis-server"
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Stops every process of the set in `dir` and removes the directory.
pub fn stop_set(dir: &Path) {
    for (path, name) in pid_files(dir) {
        if let Some(pid) = read_pid(&path) {
            system::stop_process(pid, needle(&name));
        }
    }
    let _ = fs::remove_dir_all(dir);
}

/// Every set directory under `.afk-services/`.
pub fn sets() -> Vec<PathBuf> {
    let mut sets: Vec<PathBuf> = fs::read_dir(state_root())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    sets
}

/// Prints, per set, which processes run and the variables.
pub fn print_status() {
    let sets = sets();
    if sets.is_empty() {
        println!("no servers started by xtask in this clone");
    }
    for dir in sets {
        let set = dir.file_name().unwrap_or_default().to_string_lossy();
        println!("set {set} ({}):", dir.display());
        for (path, name) in pid_files(&dir) {
            match read_pid(&path) {
                Some(pid) if system::process_matches(pid, needle(&name)) => {
                    println!("  {name:<10} running, pid {pid}");
                }
                _ => println!("  {name:<10} NOT running"),
            }
        }
        if let Ok(env) = fs::read_to_string(dir.join("env")) {
            println!(
                "  export {}",
                env.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }
}
