//! The `skip_large` form of the macro with a factory returning `Option<Arc<dyn Store>>`: the
//! other shape a backend's factory may have. Runs every regular case against `MemoryStore`.

use std::sync::Arc;

use afk_core::{MemoryStore, Store};

afk_conformance::store_suite!(store(), skip_large);

async fn store() -> Option<Arc<dyn Store>> {
    Some(Arc::new(MemoryStore::new()))
}
