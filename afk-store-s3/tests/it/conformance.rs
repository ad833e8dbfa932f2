//! The store conformance suite against `S3Store` on the test server, one fresh bucket per case.
//! The 100,000-key case is left out: 100,000 object PUTs take minutes on the test server (the
//! head stays small; `tests/it/index.rs` checks that with a long run).
//! The crash level reopens a bucket named after the directory it is given. The suite runs
//! again on the bucket sealed at rest (`afk-seal`).

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

/// The suite again on a bucket sealed at rest (`afk-seal`): sealing changes nothing a store
/// user can see.
mod sealed {
    use std::path::PathBuf;
    use std::sync::Arc;

    use afk_seal::{DirKeyring, Key, MemoryKeyring, SealedStore, StaticKeys};

    afk_conformance::store_suite!(store(), reopen = open_at, skip_large);

    /// The bucket named after `dir` and a keyring in `dir`, under one fixed key-encryption key
    /// (the crash level's child process and this one open the same data).
    async fn open_at(dir: PathBuf) -> Option<Arc<SealedStore>> {
        let inner = super::open_at(dir.clone()).await?;
        let keys = StaticKeys::new("k1", Key::from_bytes([42; 32])).expect("keys");
        let ring = DirKeyring::open(dir.join("keys")).expect("keyring");
        Some(Arc::new(SealedStore::new(
            inner,
            Arc::new(keys),
            Arc::new(ring),
        )))
    }

    async fn store() -> Option<Arc<SealedStore>> {
        let inner = super::store().await?;
        let keys = StaticKeys::new("k1", Key::generate()).expect("keys");
        Some(Arc::new(SealedStore::new(
            inner,
            Arc::new(keys),
            Arc::new(MemoryKeyring::default()),
        )))
    }
}
