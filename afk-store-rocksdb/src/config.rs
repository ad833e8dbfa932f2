//! Configuration of a [`RocksDbStore`](crate::RocksDbStore): a serde struct, also parsed from a
//! `rocksdb://` URL.

use std::path::PathBuf;
use std::str::FromStr;

use afk_core::config::{Backend, StoreConfig, StoreUrl};
use afk_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::RocksDbStore;

/// The URL scheme of this store: `rocksdb://` (from [`Backend::schemes`], the one scheme table).
pub const SCHEME: &str = Backend::RocksDb.schemes()[0];

/// Block compression of the SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression.
    None,
    /// Snappy (RocksDB's own default).
    #[default]
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
    /// zlib.
    Zlib,
}

impl Compression {
    /// The name used in URLs and serde (`"none"`, `"snappy"`, `"lz4"`, `"zstd"`, `"zlib"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Zlib => "zlib",
        }
    }

    pub(crate) fn to_rocksdb(self) -> rocksdb::DBCompressionType {
        match self {
            Compression::None => rocksdb::DBCompressionType::None,
            Compression::Snappy => rocksdb::DBCompressionType::Snappy,
            Compression::Lz4 => rocksdb::DBCompressionType::Lz4,
            Compression::Zstd => rocksdb::DBCompressionType::Zstd,
            Compression::Zlib => rocksdb::DBCompressionType::Zlib,
        }
    }
}

impl FromStr for Compression {
    type Err = Error;

    /// Parse a compression name; `InvalidConfig` naming the `compression` parameter otherwise.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Compression::None),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            "zlib" => Ok(Compression::Zlib),
            _ => Err(Error::invalid_config(format!(
                "rocksdb parameter `compression` = {s:?} is not one of none, snappy, lz4, zstd, zlib"
            ))),
        }
    }
}

fn default_sync() -> bool {
    true
}

fn default_create() -> bool {
    true
}

/// How to open a RocksDB store.
///
/// As serde (JSON, TOML, …): `{"path": "/var/lib/afk", "sync": true, "compression": "lz4",
/// "block_cache_size": 67108864}`; only `path` is required. As a URL, see
/// [`RocksDbConfig::from_url`].
///
/// Built with [`RocksDbConfig::new`] (or parsed), then adjusted with the `with_*` setters (or
/// field by field); the struct is `#[non_exhaustive]`, so a new option is not a breaking change:
///
/// ```
/// use afk_store_rocksdb::{Compression, RocksDbConfig, RocksDbStore};
///
/// # fn main() -> afk_core::Result<()> {
/// # let dir = tempfile::tempdir().expect("tempdir");
/// let config = RocksDbConfig::new(dir.path().join("db"))
///     .with_compression(Compression::Lz4)
///     .with_block_cache_size(64 << 20);
/// let store = RocksDbStore::open(config)?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RocksDbConfig {
    /// Directory of the database; created if missing unless `create_if_missing` is false.
    pub path: PathBuf,
    /// Create the database when `path` holds none (default `true`). With `false`, opening a
    /// path without a database fails with `InvalidConfig` and creates nothing: what a tool
    /// that only reads wants, so that a mistyped path is an error, not a new empty store.
    #[serde(default = "default_create")]
    pub create_if_missing: bool,
    /// Sync the write-ahead log on every write (default `true`). With `true` an acknowledged
    /// commit survives a crash of the process and of the machine; with `false` it survives a
    /// crash of the process only (the OS still holds the data).
    #[serde(default = "default_sync")]
    pub sync: bool,
    /// Block compression (default snappy).
    #[serde(default)]
    pub compression: Compression,
    /// Size of the LRU block cache in bytes; `None` keeps RocksDB's default (8 MiB).
    #[serde(default)]
    pub block_cache_size: Option<u64>,
}

impl RocksDbConfig {
    /// A configuration for `path` with the defaults: sync writes, snappy, default block cache.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        RocksDbConfig {
            path: path.into(),
            create_if_missing: true,
            sync: true,
            compression: Compression::default(),
            block_cache_size: None,
        }
    }

    /// Parse `rocksdb:///abs/path` or `rocksdb://./rel/path` (also `rocksdb://../rel`), with
    /// options as query parameters (the grammar of [`afk_core::config::Query`]):
    ///
    /// - `sync`: boolean, default true,
    /// - `compression`: `none|snappy|lz4|zstd|zlib`, default snappy,
    /// - `block_cache_size`: size (`67108864`, `64MiB`), default RocksDB's (8 MiB),
    /// - `create`: boolean, default true (create the database if the path holds none).
    ///
    /// The path is percent-decoded. Errors: `InvalidConfig` naming the scheme, the path form or
    /// the bad parameter.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = StoreUrl::parse(url, Backend::RocksDb, PARAMETERS)?;
        if url.has_credentials() {
            return Err(url.invalid("a rocksdb URL takes no user or password"));
        }
        let raw = format!("{}{}", url.authority(), url.path());
        let absolute = raw.starts_with('/') && url.authority().is_empty();
        let relative = matches!(url.authority(), "." | "..");
        if !(absolute || relative) || raw.trim_end_matches('/').is_empty() {
            return Err(url.invalid(
                "no usable path: write rocksdb:///absolute/path or rocksdb://./relative/path",
            ));
        }
        let mut config = RocksDbConfig::new(raw);
        let q = url.query();
        if let Some(sync) = q.bool("sync")? {
            config.sync = sync;
        }
        if let Some(create) = q.bool("create")? {
            config.create_if_missing = create;
        }
        if let Some(c) =
            q.parse_with("compression", "one of none, snappy, lz4, zstd, zlib", |v| {
                v.parse().ok()
            })?
        {
            config.compression = c;
        }
        config.block_cache_size = q.size("block_cache_size")?;
        config.validate()?;
        Ok(config)
    }

    /// Check the settings without touching the disk: the path must not be empty.
    pub fn validate(&self) -> Result<()> {
        if self.path.as_os_str().is_empty() {
            return Err(Error::invalid_config("rocksdb: the database path is empty"));
        }
        Ok(())
    }
}

/// The query parameters of a `rocksdb://` URL, in the order the unknown-parameter message lists them.
pub const PARAMETERS: &[&str] = &["sync", "compression", "block_cache_size", "create"];

impl FromStr for RocksDbConfig {
    type Err = Error;

    /// Same as [`RocksDbConfig::from_url`].
    fn from_str(s: &str) -> Result<Self> {
        RocksDbConfig::from_url(s)
    }
}

#[async_trait::async_trait]
impl StoreConfig for RocksDbConfig {
    type Store = RocksDbStore;
    const BACKEND: Backend = Backend::RocksDb;

    fn validate(&self) -> Result<()> {
        RocksDbConfig::validate(self)
    }

    /// [`RocksDbStore::open`] on a blocking thread, so that the async threads stay free while
    /// RocksDB opens (it replays its log, which may take a while).
    async fn open(self) -> Result<RocksDbStore> {
        tokio::task::spawn_blocking(move || RocksDbStore::open(self))
            .await
            .map_err(crate::error::join)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use afk_core::ErrorKind;

    #[test]
    fn absolute_and_relative_paths() {
        let c = RocksDbConfig::from_url("rocksdb:///var/lib/afk%20db").expect("valid url");
        assert_eq!(c, RocksDbConfig::new("/var/lib/afk db"));
        let c = RocksDbConfig::from_url("rocksdb://./data/afk").expect("valid url");
        assert_eq!(c.path, PathBuf::from("./data/afk"));
        assert!(c.sync);
        assert_eq!(c.compression, Compression::Snappy);
        assert_eq!(c.block_cache_size, None);
        let c: RocksDbConfig = "rocksdb://../up".parse().expect("valid url");
        assert_eq!(c.path, PathBuf::from("../up"));
    }

    #[test]
    fn query_options() {
        let c = RocksDbConfig::from_url(
            "rocksdb:///d?sync=off&compression=zstd&block_cache_size=64MiB",
        )
        .expect("valid url");
        assert!(!c.sync);
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!(c.block_cache_size, Some(64 << 20));
        let c = RocksDbConfig::from_url("rocksdb:///d?block_cache_size=1000&sync=1")
            .expect("valid url");
        assert_eq!(c.block_cache_size, Some(1000));
        assert!(c.sync);
        assert!(c.create_if_missing);
        let c = RocksDbConfig::from_url("rocksdb:///d?create=false").expect("valid url");
        assert!(!c.create_if_missing);
    }

    #[test]
    fn bad_urls_name_the_problem() {
        let cases = [
            ("redis://x", "is not a rocksdb URL (expected rocksdb://)"),
            ("rocksdb://host/path", "rocksdb:///absolute/path"),
            ("rocksdb://", "no usable path"),
            ("rocksdb:///d?sync=maybe", "`sync`"),
            ("rocksdb:///d?create=perhaps", "`create`"),
            ("rocksdb:///d?compression=brotli", "`compression`"),
            ("rocksdb:///d?block_cache_size=lots", "`block_cache_size`"),
            (
                "rocksdb:///d?block_cache_size=99999999999GiB",
                "`block_cache_size`",
            ),
            (
                "rocksdb:///d?cache=1",
                "unknown rocksdb URL parameter `cache`; known: sync, compression, block_cache_size, create",
            ),
            ("rocksdb://u:pw@/d", "takes no user or password"),
            ("rocksdb:///d%zz", "not valid percent-encoded UTF-8"),
            ("rocksdb:///d?sync=1&sync=0", "`sync` is given twice"),
            ("rocksdb:///d#frag", "fragment"),
        ];
        for (url, needle) in cases {
            let err = RocksDbConfig::from_url(url).expect_err(url);
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(err.message().contains(needle), "{url}: {}", err.message());
        }
    }

    #[test]
    fn serde_defaults_and_strictness() {
        let c: RocksDbConfig = serde_json::from_str(r#"{"path": "/d"}"#).expect("valid json");
        assert_eq!(c, RocksDbConfig::new("/d"));
        let c: RocksDbConfig = serde_json::from_str(
            r#"{"path": "/d", "sync": false, "compression": "lz4", "block_cache_size": 1024}"#,
        )
        .expect("valid json");
        assert!(!c.sync);
        assert_eq!(c.compression, Compression::Lz4);
        assert_eq!(c.block_cache_size, Some(1024));
        assert!(
            serde_json::from_str::<RocksDbConfig>(r#"{"path": "/d", "syncc": false}"#).is_err()
        );
        assert!(
            serde_json::from_str::<RocksDbConfig>(r#"{"path": "/d", "compression": "brotli"}"#)
                .is_err()
        );
    }
}
