//! The store backends compiled into this build, one feature-gated re-export per crate
//! (ratatui style): enable the `afk` features `rocksdb` (default), `redis`, `s3`.
//!
//! [`MemoryStore`] is always there (it lives in `afk-core`).

pub use afk_core::MemoryStore;

/// The embedded RocksDB store (feature `rocksdb`, on by default).
#[cfg(feature = "rocksdb")]
pub use afk_store_rocksdb::{self as rocksdb, RocksDbConfig, RocksDbStore};

/// The Redis and Redis Cluster store (feature `redis`).
#[cfg(feature = "redis")]
pub use afk_store_redis::{self as redis, RedisConfig, RedisStore};

/// The S3-compatible object store (feature `s3`).
#[cfg(feature = "s3")]
pub use afk_store_s3::{self as s3, S3Config, S3Store};
