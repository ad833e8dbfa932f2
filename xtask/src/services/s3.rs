//! The S3-compatible server: moto's `moto_server` (PyPI), installed on demand into a
//! virtualenv under the cache directory. It keeps objects in memory, accepts any credentials,
//! and answers a failed `If-None-Match: *` or `If-Match` with 412 (see CONTRIBUTING.md, "Test servers").
//! It runs through `moto_server.py`, which makes each write atomic as on S3 (moto 5.2.5 checks
//! `If-Match` and stores the object later, without a lock, in a threaded server).

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::system;

/// The moto release whose conditional-write behaviour was measured.
const MOTO: &str = "moto[server]==5.2.5";

fn venv() -> PathBuf {
    system::cache_dir().join("moto-venv")
}

/// The wrapper around moto's server that serializes writes (`moto_server.py`, written into the
/// virtualenv with a shebang naming its python).
const SERIALIZED: &str = include_str!("moto_server.py");

/// moto's own `moto_server` script in xtask's virtualenv.
fn moto_bin() -> PathBuf {
    venv().join("bin").join("moto_server")
}

/// The server to start: moto behind the write-serializing wrapper, in xtask's virtualenv (tests
/// that need a throwaway server of their own, like the S3 restart test, get it as
/// `AFK_TEST_MOTO_SERVER`). Its name contains `moto_server`, which `services down` looks for.
pub fn moto_server() -> PathBuf {
    venv().join("bin").join("afk_moto_server")
}

/// Writes the wrapper (every time: it is small, and an older one is replaced), through a
/// rename so that another xtask starting it meanwhile never runs half a file.
fn write_wrapper() -> Result<()> {
    let python = venv().join("bin").join("python3");
    let script = format!("#!{}\n{SERIALIZED}", python.display());
    let path = moto_server();
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    fs::write(&tmp, script).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// True when the virtualenv is missing and `python3` cannot create one.
pub fn needs_python_venv() -> bool {
    super::needs_python_venv(&moto_bin())
}

/// Installs moto into its virtualenv unless that was done before; writes the wrapper.
fn install() -> Result<()> {
    super::pip_install(&venv(), &moto_bin(), MOTO)?;
    write_wrapper()
}

/// Installs moto if needed and starts it on a free port in its own process group; writes
/// `<dir>/moto.pid` and waits (at most 60 s) until it answers HTTP. Returns the endpoint URL.
pub fn start(dir: &Path) -> Result<String> {
    install()?;
    let [port] = system::free_ports(1)?[..] else {
        bail!("no free port")
    };
    let log_path = dir.join("moto.log");
    let log = File::create(&log_path)?;
    let child = Command::new(moto_server())
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start moto_server")?;
    fs::write(dir.join("moto.pid"), child.id().to_string())?;
    system::wait_until(
        &format!("moto on port {port}"),
        Duration::from_secs(60),
        || super::http_status(port, "/").is_some(),
    )
    .with_context(|| system::log_tail(&log_path, 10))?;
    Ok(format!("http://127.0.0.1:{port}"))
}
