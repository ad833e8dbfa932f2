//! The store conformance suite against `S3Store` on the test server, one fresh bucket per case.
//! The 100,000-key case is left out: one run's head would hold 100,000 keys (see the README).

mod common;

afk_conformance::store_suite!(store(), skip_large);

async fn store() -> Option<std::sync::Arc<afk_store_s3::S3Store>> {
    common::store("conf")
        .await
        .map(|(store, _)| std::sync::Arc::new(store))
}
