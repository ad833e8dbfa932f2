//! The stores of the grid, opened by URL with `afk::open` as a service would, each fresh:
//! a named memory store, RocksDB in a temporary directory (default settings: WAL synced),
//! Redis under a fresh key prefix, S3 in a fresh bucket of the test service.

use std::sync::Arc;

use afk::store::Store;

use crate::support::servers;

/// An opened store and what the cell needs besides it.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The Redis server's URL (Redis only), to read its memory.
    pub redis_url: Option<String>,
    /// RocksDB's directory, removed when the cell ends.
    _dir: Option<tempfile::TempDir>,
}

/// The URL of `store` for this process, or `None` if its server is not configured.
pub fn url(store: &str, dir: Option<&std::path::Path>) -> Option<String> {
    let tag = servers::unique("fleet");
    match store {
        "memory" => Some(format!("memory://{tag}")),
        "rocksdb" => Some(format!("rocksdb://{}", dir?.display())),
        "redis" => {
            let base = std::env::var("AFK_TEST_REDIS_URL")
                .ok()
                .filter(|u| !u.is_empty())?;
            let sep = if base.contains('?') { '&' } else { '?' };
            Some(format!("{base}{sep}prefix={tag}"))
        }
        "s3" => {
            let env = servers::s3_env()?;
            Some(format!(
                "s3://{}/fleet?endpoint={}&region={}&force_path_style=true&access_key_id={}\
                 &secret_access_key={}&create_bucket=true",
                tag.replace('x', "-"),
                env.endpoint,
                env.region,
                env.key_id,
                env.secret
            ))
        }
        _ => None,
    }
}

/// Whether `store` can be measured here (its feature is on and its server configured).
pub fn available(store: &str) -> bool {
    match store {
        "memory" | "rocksdb" => true,
        "redis" => cfg!(feature = "redis") && url(store, None).is_some(),
        "s3" => cfg!(feature = "s3") && url(store, None).is_some(),
        _ => false,
    }
}

/// Open a fresh `store` (panics if it cannot: the parent reports the cell as failed).
pub async fn open(store: &str) -> Opened {
    let dir = (store == "rocksdb").then(|| tempfile::tempdir().expect("tempdir"));
    let url = url(store, dir.as_ref().map(|d| d.path())).expect("store configured");
    let opened = afk::open(&url)
        .await
        .unwrap_or_else(|e| panic!("open {store}: {e}"));
    Opened {
        store: opened,
        redis_url: (store == "redis")
            .then(|| std::env::var("AFK_TEST_REDIS_URL").unwrap_or_default()),
        _dir: dir,
    }
}
