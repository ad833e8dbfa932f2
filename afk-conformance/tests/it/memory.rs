//! The whole suite against the reference store: it must pass.

use std::sync::Arc;

use afk_core::MemoryStore;

afk_conformance::store_suite!(store());

async fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}
