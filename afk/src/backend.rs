//! The store backends compiled into this build, one feature-gated module per store crate
//! (ratatui style): enable the `afk` features `rocksdb` (default), `redis`, `s3`.
//!
//! Each module is the whole store crate, so each of its items has one path here, e.g.
//! `afk::backend::rocksdb::RocksDbStore`. The in-memory store is [`MemoryStore`](crate::MemoryStore)
//! at the crate root (it lives in `afk-core`).

/// The embedded RocksDB store, `afk-store-rocksdb` (feature `rocksdb`, on by default).
#[cfg(feature = "rocksdb")]
pub use afk_store_rocksdb as rocksdb;

/// The Redis and Redis Cluster store, `afk-store-redis` (feature `redis`).
#[cfg(feature = "redis")]
pub use afk_store_redis as redis;

/// The S3-compatible object store, `afk-store-s3` (feature `s3`).
#[cfg(feature = "s3")]
pub use afk_store_s3 as s3;
