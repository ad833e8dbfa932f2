//! Tests of merging and pipelining: a run's queued commits become one atomic commit, one
//! commit per run is in flight, runs do not wait for each other, and store limits bound merges.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{applied, claimed, latest, record, rid, tid, two_runs, writer};
use crate::store::{Call, Capabilities, FaultStore, HookStore, Hooks, MemoryStore};
use crate::writer::*;

#[tokio::test(start_paused = true)]
async fn merges_unwritten_commits_and_keeps_every_record() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(100));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    let mut last = None;
    for i in 1..=5 {
        last = Some(
            w.submit(record(&t, &r, e, i, "runtime_state"), true)
                .await
                .unwrap(),
        );
    }
    last.unwrap().wait().await.unwrap();
    assert_eq!(w.stats().coalesced, 5);
    let commits = applied(&fs, &r);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert_eq!(commits[0].len(), 6, "the merged commit keeps every record");
    assert_eq!(
        latest(&fs, &t, &r).await.as_deref(),
        Some("checkpoint:r1:5:runtime_state")
    );
}

#[tokio::test(start_paused = true)]
async fn commits_of_every_phase_merge_in_submission_order() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(100));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    w.submit(record(&t, &r, e, 1, "runtime_state"), true)
        .await
        .unwrap();
    w.submit(record(&t, &r, e, 1, "pre_llm"), false)
        .await
        .unwrap();
    w.submit(record(&t, &r, e, 2, "runtime_state"), true)
        .await
        .unwrap();
    w.barrier(&t, &r, e).await.unwrap();
    assert_eq!(w.stats().coalesced, 2);
    let commits = applied(&fs, &r);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert_eq!(
        commits[0],
        [
            "checkpoint:r1:1:runtime_state",
            "checkpoint:r1:1:pre_llm",
            "checkpoint:r1:2:runtime_state"
        ]
    );
    assert_eq!(
        latest(&fs, &t, &r).await.as_deref(),
        Some("checkpoint:r1:2:runtime_state")
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_keeps_one_commit_in_flight_and_merges_what_queues_behind_it() {
    // Without holding, the first commit leaves at once (see `tests/hold.rs` for holding).
    let (fs, w) = writer(CheckpointConfig {
        hold: Duration::ZERO,
        ..Default::default()
    });
    fs.set_latency(Duration::from_millis(100));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    // Let the task hand the first commit to the store; the rest queue behind it.
    tokio::time::sleep(Duration::from_millis(1)).await;
    for i in 1..=4 {
        w.submit(record(&t, &r, e, i, "post_llm"), false)
            .await
            .unwrap();
    }
    w.barrier(&t, &r, e).await.unwrap();
    let commits = applied(&fs, &r);
    assert_eq!(commits.len(), 2, "{commits:?}");
    assert_eq!(commits[0], ["checkpoint:r1:0:pre_llm"]);
    assert_eq!(commits[1].len(), 4);
    assert_eq!(w.stats().coalesced, 3);
}

#[tokio::test(start_paused = true)]
async fn runs_do_not_wait_for_each_others_store_calls() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(100));
    let (t, (a, ea), (b, eb)) = two_runs(&fs).await;
    w.submit(record(&t, &a, ea, 0, "pre_llm"), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let start = tokio::time::Instant::now();
    w.submit(record(&t, &b, eb, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.barrier(&t, &b, eb).await.unwrap();
    // Paused clock: b's barrier writes b's commit itself, one commit call of the fault store
    // (one latency); it does not wait for a's call to end first (a batch call of the
    // background task costs two latencies, the batch and then the commit: 190 ms are left).
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    w.barrier(&t, &a, ea).await.unwrap();
    assert_eq!(w.stats().batches, 2);
}

/// Limits a store reports (the in-memory store has none) and enforces, on each commit.
#[derive(Debug)]
struct Limits {
    max_keys: Option<usize>,
    max_value: Option<usize>,
}

#[async_trait]
impl Hooks for Limits {
    type Note = ();

    fn capabilities(&self, mut inner: Capabilities) -> Capabilities {
        inner.max_commit_keys = self.max_keys;
        inner.max_value_size = self.max_value;
        inner
    }

    /// Each commit of a batch or an owned commit through the limits of `commit`.
    fn through_primitives(&self) -> bool {
        true
    }

    async fn before(&self, call: Call<'_>) -> Result<()> {
        let Call::Commit(commit) = call else {
            return Ok(());
        };
        if self
            .max_keys
            .is_some_and(|m| commit.puts.len() + usize::from(commit.latest.is_some()) > m)
        {
            return Err(Error::new(ErrorKind::InvalidInput, "too many keys"));
        }
        if let Some(m) = self.max_value
            && commit.puts.iter().any(|(_, v)| v.len() > m)
        {
            return Err(Error::new(ErrorKind::InvalidInput, "value too large"));
        }
        Ok(())
    }
}

fn limited(
    max_keys: Option<usize>,
    max_value: Option<usize>,
) -> (Arc<FaultStore<MemoryStore>>, Writer) {
    let fs = Arc::new(FaultStore::new(MemoryStore::new()));
    let limits = Limits {
        max_keys,
        max_value,
    };
    let store: Arc<dyn Store> = Arc::new(HookStore::new(fs.clone(), limits));
    let w = Writer::new(store, CheckpointConfig::default(), RandomSource::seeded(7)).unwrap();
    (fs, w)
}

#[tokio::test(start_paused = true)]
async fn merging_respects_the_stores_key_limit() {
    let (fs, w) = limited(Some(3), None);
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for i in 0..7 {
        w.submit(record(&t, &r, e, i, "pre_llm"), false)
            .await
            .unwrap();
    }
    w.barrier(&t, &r, e).await.unwrap();
    let sizes: Vec<usize> = applied(&fs, &r).iter().map(Vec::len).collect();
    // Three keys a commit, the latest pointer included: two records and the pointer.
    assert_eq!(sizes, [2, 2, 2, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_commit_over_the_value_limit_fails_alone() {
    let (fs, w) = limited(None, Some(64));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    let first = w
        .submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    let mut big = record(&t, &r, e, 1, "post_llm");
    big.puts[0].1 = vec![b'x'; 100];
    let second = w.submit(big, false).await.unwrap();
    first.wait().await.unwrap();
    assert_eq!(
        second.wait().await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(applied(&fs, &r), [["checkpoint:r1:0:pre_llm"]]);
    assert_eq!(w.stats().coalesced, 0);
}
