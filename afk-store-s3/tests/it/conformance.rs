//! The store conformance suite against `S3Store` on the test server, one fresh bucket per case.
//! The 100,000-key case is left out: 100,000 object PUTs take minutes on the test server (the
//! head stays small; `tests/it/index.rs` checks that with a long run).
//! The crash level reopens a bucket named after the directory it is given.

use crate::common;

afk_conformance::store_suite!(store(), reopen = open_at, skip_large);

/// A store on the bucket named after `dir` (created on first use), or `None` when skipped.
async fn open_at(dir: std::path::PathBuf) -> Option<std::sync::Arc<afk_store_s3::S3Store>> {
    let mut cfg = common::config("", "crash")?;
    cfg.bucket = dir.file_name()?.to_str()?.to_owned();
    let store = afk_store_s3::S3Store::open(cfg)
        .await
        .expect("open S3 store");
    Some(std::sync::Arc::new(store))
}

async fn store() -> Option<std::sync::Arc<afk_store_s3::S3Store>> {
    common::store("conf")
        .await
        .map(|(store, _)| std::sync::Arc::new(store))
}
