//! Chainable setters of [`RocksDbConfig`], one per option, like afk-core's configs: a user
//! outside this crate cannot write the `#[non_exhaustive]` struct as a literal, so
//! `RocksDbConfig::new(path).with_…(…)` is how a config is built in code.

use crate::config::{Compression, RocksDbConfig};

impl RocksDbConfig {
    /// Sync the write-ahead log on every write or not ([`RocksDbConfig::sync`]).
    #[must_use]
    pub fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// Set the block compression ([`RocksDbConfig::compression`]). Opening fails with
    /// `InvalidConfig` when this build of RocksDB lacks it (see the crate's `snappy` feature).
    #[must_use]
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Create the database if the path holds none, or refuse to
    /// ([`RocksDbConfig::create_if_missing`]).
    #[must_use]
    pub fn with_create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Set the LRU block cache to `bytes` ([`RocksDbConfig::block_cache_size`]).
    #[must_use]
    pub fn with_block_cache_size(mut self, bytes: u64) -> Self {
        self.block_cache_size = Some(bytes);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_its_field_and_only_it() {
        let base = RocksDbConfig::new("/tmp/db");
        let mut want = base.clone();
        want.sync = false;
        assert_eq!(base.clone().with_sync(false), want);
        let mut want = base.clone();
        want.compression = Compression::Zstd;
        assert_eq!(base.clone().with_compression(Compression::Zstd), want);
        let mut want = base.clone();
        want.create_if_missing = false;
        assert_eq!(base.clone().with_create_if_missing(false), want);
        let mut want = base.clone();
        want.block_cache_size = Some(1 << 20);
        assert_eq!(base.with_block_cache_size(1 << 20), want);
    }
}
