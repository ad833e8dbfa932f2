//! The options of the macro, all three in one list, with a factory returning
//! `Option<Arc<dyn Store>>`: the other shape a backend's factory may have. Runs every regular
//! case against `MemoryStore` (the optional groups are left out).

use std::sync::Arc;

use afk_core::{MemoryStore, store::Store};

afk_conformance::store_suite!(store(), skip_corpus, skip_large, skip_resume);

async fn store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(MemoryStore::new()))
}
