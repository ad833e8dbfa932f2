//! The vocabulary every store configuration shares: one URL parser ([`StoreUrl`], [`Query`])
//! with one grammar for booleans, sizes and durations, one scheme table ([`Backend`]), the
//! [`Secret`] type for credentials, and the [`StoreConfig`] trait each store's configuration
//! implements (`FromStr`, [`StoreConfig::validate`], [`StoreConfig::open`]).
//!
//! ```
//! use afk_core::config::{Backend, Query};
//!
//! let q = Query::parse(Backend::RocksDb, "sync=off&block_cache_size=64MiB", &["sync", "block_cache_size"])?;
//! assert_eq!(q.bool("sync")?, Some(false));
//! assert_eq!(q.size("block_cache_size")?, Some(64 << 20));
//! let e = Query::parse(Backend::RocksDb, "sink=1", &["sync", "block_cache_size"]).unwrap_err();
//! assert_eq!(e.to_string(), "invalid_config: unknown rocksdb URL parameter `sink`; known: sync, block_cache_size");
//! # Ok::<(), afk_core::Error>(())
//! ```

mod secret;
mod url;

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;

pub use secret::{REDACTED, Secret};
pub use url::{
    BOOL_GRAMMAR, Backend, DURATION_GRAMMAR, NUMBER_GRAMMAR, Query, SIZE_GRAMMAR, StoreUrl,
    TimeUnit, parse_bool, parse_duration, parse_size,
};

use crate::error::{Error, Result};
use crate::store::Store;

/// The configuration of a store backend, the same shape for every store: parsed from a URL
/// (`FromStr`, through [`StoreUrl`]), checked without contacting anything
/// ([`StoreConfig::validate`]), and opened asynchronously ([`StoreConfig::open`]; a store that
/// opens with blocking I/O, like RocksDB, does so off the async threads).
#[async_trait]
pub trait StoreConfig:
    FromStr<Err = Error> + Clone + fmt::Debug + Send + Sync + Sized + 'static
{
    /// The store this configuration opens.
    type Store: Store + 'static;

    /// The backend, and so the URL schemes, of this configuration.
    const BACKEND: Backend;

    /// Check the combination of settings without contacting anything; `InvalidConfig` names
    /// the problem. [`FromStr`] calls it, so a parsed configuration is valid.
    fn validate(&self) -> Result<()>;

    /// Open the store (connect, or open the database).
    async fn open(self) -> Result<Self::Store>;
}

#[cfg(test)]
mod tests;
