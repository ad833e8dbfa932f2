//! [`open`]: pick a store by URL scheme at run time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use afk_core::redact::redact_urls;
use afk_core::{Error, MemoryStore, Result, store::Store};

/// The URL schemes [`open`] knows, with the Cargo feature each needs (`None`: always there).
const SCHEMES: [(&str, Option<&str>); 7] = [
    ("memory", None),
    ("rocksdb", Some("rocksdb")),
    ("redis", Some("redis")),
    ("rediss", Some("redis")),
    ("redis+cluster", Some("redis")),
    ("rediss+cluster", Some("redis")),
    ("s3", Some("s3")),
];

/// Open the store a URL names:
///
/// | URL | store | feature |
/// | --- | --- | --- |
/// | `memory://` or `memory://<name>` | a process-local [`MemoryStore`]; the same name gives the same store within this process | always |
/// | `rocksdb:///abs/path`, `rocksdb://./rel/path` | `RocksDbStore` (options as query parameters) | `rocksdb` (default) |
/// | `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://` | `RedisStore` | `redis` |
/// | `s3://bucket/prefix?…` | `S3Store` | `s3` |
///
/// Each backend parses the rest of its URL itself (see its config type).
///
/// Errors: `Unsupported` naming the Cargo feature to enable when the scheme's backend is not
/// compiled in; `InvalidConfig` for a URL without a scheme or with an unknown one (the message
/// shows the URL with any password replaced by `***`, see [`redact_urls`]); the backend's own
/// errors when it cannot open (`InvalidConfig`, `Unavailable`, …).
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
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Error::invalid_config(format!(
            "store URL {} has no scheme; expected one of {}",
            redact_urls(url),
            known_schemes()
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let Some((_, feature)) = SCHEMES.iter().find(|(s, _)| *s == scheme) else {
        return Err(Error::invalid_config(format!(
            "store URL {} has an unknown scheme `{scheme}`; expected one of {}",
            redact_urls(url),
            known_schemes()
        )));
    };
    match (scheme.as_str(), feature) {
        ("memory", _) => Ok(memory(rest)),
        ("rocksdb", _) if cfg!(feature = "rocksdb") => open_rocksdb(url, create).await,
        ("s3", _) if cfg!(feature = "s3") => open_s3(url).await,
        (_, Some("redis")) if cfg!(feature = "redis") => open_redis(url).await,
        (_, feature) => Err(Error::unsupported(format!(
            "store URL scheme `{scheme}` needs the `{f}` Cargo feature of the `afk` crate \
             (afk = {{ features = [\"{f}\"] }}, or `cargo install afk-cli --features {f}` for the command line)",
            f = feature.unwrap_or("?"),
        ))),
    }
}

fn known_schemes() -> String {
    SCHEMES
        .iter()
        .map(|(s, _)| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ")
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

#[cfg(feature = "rocksdb")]
async fn open_rocksdb(url: &str, create: bool) -> Result<Arc<dyn Store>> {
    let mut config = afk_store_rocksdb::RocksDbConfig::from_url(url)?;
    // `create` only ever takes creation away: `create=false` in the URL stands.
    config.create_if_missing &= create;
    let store = tokio::task::spawn_blocking(move || afk_store_rocksdb::RocksDbStore::open(config))
        .await
        .map_err(|e| Error::unexpected("opening RocksDB panicked").with_source(e))??;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "rocksdb"))]
async fn open_rocksdb(_url: &str, _create: bool) -> Result<Arc<dyn Store>> {
    Err(Error::unexpected("rocksdb is not compiled in"))
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(afk_store_redis::RedisStore::from_url(url).await?))
}

#[cfg(not(feature = "redis"))]
async fn open_redis(_url: &str) -> Result<Arc<dyn Store>> {
    Err(Error::unexpected("redis is not compiled in"))
}

#[cfg(feature = "s3")]
async fn open_s3(url: &str) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(afk_store_s3::S3Store::from_url(url).await?))
}

#[cfg(not(feature = "s3"))]
async fn open_s3(_url: &str) -> Result<Arc<dyn Store>> {
    Err(Error::unexpected("s3 is not compiled in"))
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
