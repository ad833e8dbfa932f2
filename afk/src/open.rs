//! [`open`]: pick a store by URL scheme at run time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use afk_core::config::Backend;
#[cfg(any(feature = "rocksdb", feature = "redis", feature = "s3"))]
use afk_core::config::StoreConfig;
use afk_core::{Error, MemoryStore, Result, store::Store};

/// Open the store a URL names:
///
/// | URL | store | feature |
/// | --- | --- | --- |
/// | `memory://` or `memory://<name>` | a process-local [`MemoryStore`]; the same name gives the same store within this process | always |
/// | `rocksdb:///abs/path`, `rocksdb://./rel/path` | `RocksDbStore` | `rocksdb` (default) |
/// | `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://` | `RedisStore` | `redis` |
/// | `s3://bucket/prefix` | `S3Store` | `s3` |
///
/// The schemes are those of [`Backend`] (the one scheme table). Each store's configuration
/// parses the rest of its URL with the shared parser ([`afk_core::config::StoreUrl`]); the
/// crate README lists every query parameter. Every store opens the same way here:
/// [`StoreConfig::open`] of its configuration (RocksDB opens on a blocking thread).
///
/// Errors: `Unsupported` naming the Cargo feature to enable when the scheme's backend is not
/// compiled in; `InvalidConfig` for a URL without a scheme, with an unknown one, or with a bad
/// part (the message shows the URL with its secrets replaced by `***`, see
/// [`afk_core::redact::redact_urls`]); the backend's own errors when it cannot open
/// (`InvalidConfig`, `Unavailable`, …).
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_as(url, true).await
}

/// [`open`] for a tool that only reads or changes what is already there: a store that opening
/// would create is refused instead. A `rocksdb://` path with no database is `InvalidConfig`
/// naming the path, and nothing is created (as with the URL parameter `create=false`), so a
/// mistyped path is an error rather than a new, empty store. The other schemes open as with
/// [`open`]: an S3 bucket is created only when its URL says `create_bucket=true`, and Redis and
/// memory stores have nothing to create.
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>> {
    open_as(url, false).await
}

async fn open_as(url: &str, create: bool) -> Result<Arc<dyn Store>> {
    let url = url.trim();
    #[cfg(not(feature = "rocksdb"))]
    let _ = create; // Only RocksDB creates a store by opening it.
    match Backend::of_url(url)? {
        Backend::Memory => Ok(memory(url.split_once("://").map_or("", |(_, rest)| rest))),
        #[cfg(feature = "rocksdb")]
        Backend::RocksDb => {
            let mut config: afk_store_rocksdb::RocksDbConfig = url.parse()?;
            // `create` only ever takes creation away: `create=false` in the URL stands.
            config.create_if_missing &= create;
            Ok(Arc::new(config.open().await?))
        }
        #[cfg(feature = "redis")]
        Backend::Redis => open_url::<afk_store_redis::RedisConfig>(url).await,
        #[cfg(feature = "s3")]
        Backend::S3 => open_url::<afk_store_s3::S3Config>(url).await,
        backend => {
            let f = backend.feature().unwrap_or("?");
            Err(Error::unsupported(format!(
                "store URL scheme `{}://` needs the `{f}` Cargo feature of the `afk` crate \
                 (afk = {{ features = [\"{f}\"] }}, or `cargo install afk-cli --features {f}` for the command line)",
                url.split_once("://")
                    .map_or("", |(s, _)| s)
                    .to_ascii_lowercase(),
            )))
        }
    }
}

/// Parse `url` as a `C` and open it.
#[cfg(any(feature = "redis", feature = "s3"))]
async fn open_url<C: StoreConfig>(url: &str) -> Result<Arc<dyn Store>> {
    let config: C = url.parse()?;
    Ok(Arc::new(config.open().await?))
}

/// The named in-memory stores of this process.
fn memory(name: &str) -> Arc<dyn Store> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<MemoryStore>>>> = OnceLock::new();
    let map = STORES.get_or_init(Default::default);
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(name.trim_end_matches('/').to_owned())
        .or_insert_with(|| Arc::new(MemoryStore::new()))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_urls_share_a_store_by_name() {
        let a = open("memory://shared-test").await.unwrap();
        let b = open("memory://shared-test").await.unwrap();
        let c = open("memory://other-test").await.unwrap();
        let t = afk_core::ThreadId::new("t").unwrap();
        let r = afk_core::RunId::new("r").unwrap();
        a.claim(&t, &r).await.unwrap();
        assert_eq!(b.list(&t, "", None, 10).await.unwrap().keys, ["run:r"]);
        assert!(c.list(&t, "", None, 10).await.unwrap().keys.is_empty());
    }
}
