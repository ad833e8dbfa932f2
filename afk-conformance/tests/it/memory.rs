//! The whole suite against the reference store: it must pass.

use std::sync::Arc;

use afk_core::MemoryStore;

afk_conformance::store_suite!(store());

async fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// The retention sweep through the runner, on a store of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_sweep_deletes_finished_runs_and_nothing_else() {
    let store = Arc::new(MemoryStore::new());
    afk_conformance::retention::sweep_deletes_finished_runs_and_nothing_else(store)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
