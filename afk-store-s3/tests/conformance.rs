//! The store conformance suite against `S3Store` on the test server, one fresh bucket per case.
//! The 100,000-key case is left out: 100,000 object PUTs take minutes on the test server (the
//! head stays small; `tests/index.rs` checks that with a long run).

mod common;

afk_conformance::store_suite!(store(), skip_large);

async fn store() -> Option<std::sync::Arc<afk_store_s3::S3Store>> {
    common::store("conf")
        .await
        .map(|(store, _)| std::sync::Arc::new(store))
}
