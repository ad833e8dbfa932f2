//! The writer tracks each claim (epoch) of a run on its own.

use std::time::Duration;

use super::{record, rid, tid, writer};
use crate::store::Op;
use crate::writer::*;

#[tokio::test(start_paused = true)]
async fn a_failed_claim_does_not_fail_the_next_claim_of_the_run() {
    let (fs, w) = writer(CheckpointConfig {
        retry: crate::store::RetryPolicy::none(),
        ..CheckpointConfig::default()
    });
    let (t, r) = (tid("t1"), rid("r1"));
    let e1 = fs.inner().claim(&t, &r).await.unwrap();
    fs.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    w.submit(record(&t, &r, e1, 0, "pre_llm"), false)
        .await
        .unwrap();
    let err = w.barrier(&t, &r, e1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(w.run_error(&t, &r, e1).is_some());

    // The run is claimed again (a resume): its commits are accepted and written.
    let e2 = fs.inner().claim(&t, &r).await.unwrap();
    w.submit(record(&t, &r, e2, 1, "pre_llm"), false)
        .await
        .unwrap();
    w.flush(&t, &r, e2, Duration::from_secs(5)).await.unwrap();
    assert!(w.run_error(&t, &r, e2).is_none());
    // The failed claim's state was forgotten when the new claim started.
    assert!(w.run_error(&t, &r, e1).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_older_claims_queued_commits_fail_fenced_without_touching_the_newer() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(10));
    let (t, r) = (tid("t1"), rid("r1"));
    let e1 = fs.inner().claim(&t, &r).await.unwrap();
    for i in 0..3 {
        w.submit(record(&t, &r, e1, i, "pre_llm"), false)
            .await
            .unwrap();
    }
    // Claimed again while the first claim's commits are still queued (an aborted task).
    let e2 = fs.inner().claim(&t, &r).await.unwrap();
    w.submit(record(&t, &r, e2, 9, "post_llm"), false)
        .await
        .unwrap();
    w.barrier(&t, &r, e2).await.unwrap();
    let old = w.barrier(&t, &r, e1).await.unwrap_err();
    assert_eq!(old.kind(), ErrorKind::Fenced, "{old}");
    let latest = fs
        .inner()
        .get(&t, &crate::store::latest_key(&r))
        .await
        .unwrap()
        .map(|b| String::from_utf8(b).unwrap());
    assert_eq!(latest.as_deref(), Some("checkpoint:r1:9:post_llm"));
}
