//! Shared test helpers: server addresses from the environment (skip or require), unique
//! names, and a throwaway redis-server for tests that restart or reconfigure a server.
#![allow(dead_code)]

pub mod certs;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use afk_core::store::{Commit, Epoch};
use afk_core::{RunId, ThreadId};
use afk_store_redis::{RedisConfig, RedisStore};

pub use afk_conformance::require_env;

/// A name unique to this process and call.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{tag}{}x{}x{}",
        std::process::id(),
        nanos % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn thread(tag: &str) -> ThreadId {
    ThreadId::new(unique(tag)).expect("valid thread id")
}

pub fn run(id: &str) -> RunId {
    RunId::new(id).expect("valid run id")
}

/// Config for `url` under a fresh key prefix, so concurrent test runs never meet.
pub fn config(url: &str) -> RedisConfig {
    RedisConfig::from_url(url)
        .expect("test URL parses")
        .with_prefix(unique("t"))
}

/// The topologies configured in the environment: `("single", config)`, `("cluster", config)`.
pub fn topologies() -> Vec<(&'static str, RedisConfig)> {
    let mut out = Vec::new();
    if let Some(u) = require_env("AFK_TEST_REDIS_URL") {
        out.push(("single", config(&u)));
    }
    if let Some(u) = require_env("AFK_TEST_REDIS_CLUSTER_URLS") {
        out.push(("cluster", config(&u)));
    }
    out
}

pub fn commit(
    thread: &ThreadId,
    run: &RunId,
    epoch: Epoch,
    puts: &[(&str, &[u8])],
    latest: Option<&[u8]>,
) -> Commit {
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: puts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        latest: latest.map(<[u8]>::to_vec),
        attention: None,
    }
}

pub async fn connect(cfg: RedisConfig) -> RedisStore {
    RedisStore::open(cfg)
        .await
        .expect("connect to the test server")
}

/// A redis-server of our own on a free loopback port, killed on drop.
pub struct OwnServer {
    pub port: u16,
    /// `port` is a TLS port (`--tls-port`) and the plain port is off.
    tls: bool,
    extra: Vec<String>,
    child: Option<Child>,
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

impl OwnServer {
    /// Start `redis-server` on a free port with no persistence, plus `extra` arguments.
    pub fn start(extra: &[&str]) -> OwnServer {
        let mut s = OwnServer {
            port: free_port(),
            tls: false,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        s.restart();
        s
    }

    /// Start `redis-server` speaking TLS only (`--port 0 --tls-port <port>`), plus `extra`
    /// arguments (the certificate files, see [`certs::TestPki::server_args`]).
    pub fn start_tls(extra: &[String]) -> OwnServer {
        let mut s = OwnServer {
            port: free_port(),
            tls: true,
            extra: extra.to_vec(),
            child: None,
        };
        s.restart();
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill the server (no-op when already down).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether it accepts connections and, on a plain port, answers `PING` with anything but
    /// `LOADING` (a server replaying its append-only file is not back yet; one with a password
    /// answers `NOAUTH`, which is fine).
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.tls {
            return true;
        }
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = [0u8; 64];
        conn.write_all(b"PING\r\n").is_ok()
            && conn.read(&mut reply).is_ok_and(|n| n > 0)
            && !reply.starts_with(b"-LOADING")
    }

    /// Stop the server process (`SIGSTOP`) without closing its connections: a server that is
    /// there and silent. [`OwnServer::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Let a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} failed");
    }

    /// Start it again on the same port; waits until it answers (see [`OwnServer::answers`]).
    pub fn restart(&mut self) {
        self.kill();
        let dir = std::env::temp_dir();
        let child = Command::new("redis-server")
            .args(if self.tls {
                vec!["--port".to_string(), "0".into(), "--tls-port".into()]
            } else {
                vec!["--port".to_string()]
            })
            .args([
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        let start = Instant::now();
        while !self.answers() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server would not die of the kill until it goes on.
            self.resume();
        }
        self.kill();
    }
}

/// A plain redis connection to `url`, for looking at the physical layout.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// One command on a plain connection (a cluster connection on Cluster, which routes it by its
/// first key), for looking at the physical layout.
pub async fn raw_query<T: redis::FromRedisValue>(cfg: &RedisConfig, cmd: redis::Cmd) -> T {
    let nodes: Vec<String> = cfg
        .nodes
        .iter()
        .map(|(h, p)| format!("redis://{h}:{p}/{}", cfg.db))
        .collect();
    if cfg.cluster {
        let client = redis::cluster::ClusterClient::new(nodes).expect("cluster client");
        let mut c = client
            .get_async_connection()
            .await
            .expect("cluster connection");
        cmd.query_async(&mut c).await.expect("raw query")
    } else {
        let mut c = raw(&nodes[0]).await;
        cmd.query_async(&mut c).await.expect("raw query")
    }
}
