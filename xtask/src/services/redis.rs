//! Redis: one single node and one 3-master cluster, Debian's `redis-server` 7.0.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::system;

/// Starts one daemonized `redis-server` without persistence; it writes `<dir>/<name>.pid`.
fn start_node(dir: &Path, name: &str, port: u16, cluster_bus: Option<u16>) -> Result<()> {
    start_node_with(dir, name, port, cluster_bus, &["--appendonly", "no"])
}

/// Starts (or, after it was killed, restarts) one daemonized `redis-server` that fsyncs its
/// append-only file before acknowledging each write (`appendonly yes`, `appendfsync always`),
/// its data in `<dir>/<name>/`; it writes `<dir>/<name>.pid`. Used by `xtask chaos`, which
/// kills it with SIGKILL and starts it again on the same port and data.
pub fn start_persistent(dir: &Path, name: &str, port: u16) -> Result<()> {
    start_node_with(
        dir,
        name,
        port,
        None,
        &["--appendonly", "yes", "--appendfsync", "always"],
    )
}

fn start_node_with(
    dir: &Path,
    name: &str,
    port: u16,
    cluster_bus: Option<u16>,
    persistence: &[&str],
) -> Result<()> {
    let data = dir.join(name);
    fs::create_dir_all(&data)?;
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(persistence)
        .args(["--daemonize", "yes"])
        .arg("--dir")
        .arg(&data)
        .arg("--logfile")
        .arg(dir.join(format!("{name}.log")))
        .arg("--pidfile")
        .arg(dir.join(format!("{name}.pid")));
    if let Some(bus) = cluster_bus {
        // An explicit bus port: the default (port + 10000) may be taken or above 65535.
        cmd.args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--cluster-port", &bus.to_string()]);
    }
    system::run(&mut cmd)?;
    system::wait_until(
        &format!("redis {name} on port {port}"),
        Duration::from_secs(10),
        || cli(port, &["ping"]).is_some_and(|out| out.trim() == "PONG"),
    )
    .with_context(|| system::log_tail(&dir.join(format!("{name}.log")), 10))
}

/// `redis-cli -p <port> <args>`, quietly; its stdout if it succeeded.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    system::output(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
    )
}

/// Starts the single node; returns its URL.
pub fn start_single(dir: &Path) -> Result<String> {
    let [port] = system::free_ports(1)?[..] else {
        bail!("no free port")
    };
    start_node(dir, "redis", port, None)?;
    Ok(format!("redis://127.0.0.1:{port}"))
}

/// Starts three cluster-enabled nodes, joins them into a cluster of three masters without
/// replicas and waits (at most 30 s) until every node reports `cluster_state:ok`. Returns the
/// comma-separated node URLs.
pub fn start_cluster(dir: &Path) -> Result<String> {
    let ports = system::free_ports(6)?;
    let (nodes, buses) = ports.split_at(3);
    for (i, (&port, &bus)) in nodes.iter().zip(buses).enumerate() {
        start_node(dir, &format!("cluster-{}", i + 1), port, Some(bus))?;
    }
    let addrs: Vec<String> = nodes.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create").args(&addrs);
    create.args(["--cluster-replicas", "0", "--cluster-yes"]);
    let out = create
        .output()
        .context("cannot run redis-cli --cluster create")?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}{}",
            system::show(&create),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    system::wait_until("redis cluster state ok", Duration::from_secs(30), || {
        nodes.iter().all(|&port| {
            cli(port, &["cluster", "info"]).is_some_and(|info| info.contains("cluster_state:ok"))
        })
    })?;
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
    Ok(urls.join(","))
}
