//! What differs between the `rocksdb` releases this crate's version range admits (0.20.1 up to
//! 0.25; see the README, "Building"). Everything else in the crate compiles unchanged against
//! every one of them.

use rocksdb::Cache;

/// `Cache::new_lru_cache` returns `Result<Cache, Error>` up to rocksdb 0.20 and a plain
/// `Cache` from 0.21 on; [`lru_cache`] takes either.
pub(crate) trait CacheResult {
    fn into_result(self) -> Result<Cache, rocksdb::Error>;
}

impl CacheResult for Cache {
    fn into_result(self) -> Result<Cache, rocksdb::Error> {
        Ok(self)
    }
}

impl CacheResult for Result<Cache, rocksdb::Error> {
    fn into_result(self) -> Result<Cache, rocksdb::Error> {
        self
    }
}

/// An LRU block cache of `size` bytes, whichever `rocksdb` release is linked.
pub(crate) fn lru_cache(size: usize) -> Result<Cache, rocksdb::Error> {
    Cache::new_lru_cache(size).into_result()
}
