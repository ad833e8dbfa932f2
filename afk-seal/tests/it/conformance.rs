//! The whole conformance suite against a sealed reference store: sealing changes nothing a
//! store user can see.

use std::sync::Arc;

use afk_core::MemoryStore;
use afk_seal::{Key, MemoryKeyring, SealedStore, StaticKeys};

afk_conformance::store_suite!(store());

async fn store() -> Arc<SealedStore> {
    let keys = StaticKeys::new("k1", Key::generate()).expect("keys");
    Arc::new(SealedStore::new(
        Arc::new(MemoryStore::new()),
        Arc::new(keys),
        Arc::new(MemoryKeyring::default()),
    ))
}
