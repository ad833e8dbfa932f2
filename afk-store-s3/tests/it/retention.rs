//! Retention that respects a run's state on S3: the sweep, through the runner, deletes the
//! runs that finished before its cutoff and nothing else (a prefix of its own). Skipped like
//! the others when no S3 endpoint is configured.

use std::sync::Arc;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_finished_runs_and_nothing_else() {
    let Some((store, _cfg)) = common::store("retention").await else {
        return;
    };
    afk_conformance::retention::sweep_deletes_finished_runs_and_nothing_else(Arc::new(store))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
