//! The store a campaign runs against, and the server behind it: a RocksDB directory, a
//! redis-server of our own with an fsynced append-only file (killed and restarted
//! mid-campaign), or moto (in memory, so never restarted).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::ValueEnum;

use crate::services::{redis, s3};
use crate::system;

/// A store the campaign can run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Store {
    /// An embedded RocksDB database (one process at a time).
    Rocksdb,
    /// A redis-server with `appendonly yes` and `appendfsync always`.
    Redis,
    /// moto's S3-compatible server.
    S3,
}

impl Store {
    pub const ALL: [Store; 3] = [Store::Rocksdb, Store::Redis, Store::S3];

    pub fn name(self) -> &'static str {
        match self {
            Store::Rocksdb => "rocksdb",
            Store::Redis => "redis",
            Store::S3 => "s3",
        }
    }

    /// Stores several processes may share: the campaign races two runners on one run.
    pub fn races(self) -> bool {
        self != Store::Rocksdb
    }
}

/// The name of our Redis in the set directory (`<set>/redis-aof.pid`, `<set>/redis-aof/`).
const REDIS: &str = "redis-aof";

/// A store ready for the agent: its URL, and the server to kill if it has one.
#[derive(Debug)]
pub struct Target {
    pub store: Store,
    pub url: String,
    /// With `--sealed`: the keyring directory every agent process seals the store's values
    /// with (`chaos_agent --seal-keyring`).
    pub seal: Option<PathBuf>,
    set_dir: PathBuf,
    redis_port: Option<u16>,
}

impl Target {
    /// Starts what `store` needs; servers live in the set directory `set_dir` (stopped by
    /// the caller with `services::stop_set`, or by the reaper). Data of RocksDB goes in `work`.
    pub fn start(store: Store, set_dir: &Path, work: &Path) -> Result<Target> {
        let mut target = Target {
            store,
            url: String::new(),
            seal: None,
            set_dir: set_dir.to_path_buf(),
            redis_port: None,
        };
        match store {
            Store::Rocksdb => {
                let db = work.join("rocksdb");
                fs::create_dir_all(&db)?;
                target.url = format!("rocksdb://{}", db.display());
            }
            Store::Redis => {
                let [port] = system::free_ports(1)?[..] else {
                    bail!("no free port")
                };
                redis::start_persistent(set_dir, REDIS, port)?;
                target.redis_port = Some(port);
                target.url = format!(
                    "redis://127.0.0.1:{port}/?connect_timeout_ms=500&response_timeout_ms=2000"
                );
            }
            Store::S3 => {
                let endpoint = s3::start(set_dir)?;
                target.url = format!(
                    "s3://afk-chaos/c{}?endpoint={endpoint}&region=us-east-1&force_path_style=true\
                     &access_key_id=test&secret_access_key=test&create_bucket=true",
                    std::process::id()
                );
            }
        }
        Ok(target)
    }

    /// SIGKILLs our redis-server (what a power cut does to it) and waits until it is gone.
    pub fn kill_server(&self) -> Result<()> {
        let pid_file = self.set_dir.join(format!("{REDIS}.pid"));
        let pid: u32 = fs::read_to_string(&pid_file)?.trim().parse()?;
        if !system::process_matches(pid, "redis-server") {
            bail!("redis-server {pid} is not running");
        }
        let _ = system::output(Command::new("kill").args(["-KILL", &pid.to_string()]));
        system::wait_until("redis-server gone", Duration::from_secs(10), || {
            !system::process_matches(pid, "redis-server")
        })
    }

    /// Starts our redis-server again on the same port and data (it replays its AOF).
    pub fn restart_server(&self) -> Result<()> {
        let Some(port) = self.redis_port else {
            bail!("no server to restart")
        };
        redis::start_persistent(&self.set_dir, REDIS, port)
    }
}
