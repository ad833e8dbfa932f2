//! Retention that respects a run's state on a real database: the sweep, through the runner,
//! deletes the runs that finished before its cutoff and nothing else; and the index of
//! finished runs it reads survives reopening.

use std::sync::Arc;

use afk_core::store::{Attention, Store, store_now_ms};
use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

use crate::common::{self, r, t};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_finished_runs_and_nothing_else() {
    let (_dir, store) = common::open();
    afk_conformance::retention::sweep_deletes_finished_runs_and_nothing_else(Arc::new(store))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn the_index_of_finished_runs_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let before = store_now_ms();
    {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("open");
        let (thread, run) = (t("t"), r("r"));
        let e = store.claim(&thread, &run).await.expect("claim");
        let mut c = common::commit("t", "r", e, &[("checkpoint:r:0:x", "v")], Some("v"));
        c.attention = Some(Attention::Closed);
        store.commit(&c).await.expect("commit");
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("reopen");
    let page = store
        .list_finished(u64::MAX, None, 10)
        .await
        .expect("list_finished");
    assert_eq!(page.runs.len(), 1, "{page:?}");
    assert_eq!(page.runs[0].run.as_str(), "r");
    assert!(page.runs[0].finished_ms >= before);
    // Thread listings never see the index.
    let threads = store.list_threads(None, 10).await.expect("list_threads");
    assert_eq!(
        threads
            .threads
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>(),
        ["t"]
    );
}
