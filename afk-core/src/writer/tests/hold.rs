//! Tests of holding: a run's commits wait in the writer, merging, until someone waits for them
//! (a barrier, a flush, a ticket) or they are [`CheckpointConfig::hold`] old.

use std::time::Duration;

use super::{applied, claimed, latest, record, rid, tid, two_runs, writer};
use crate::writer::*;

fn holding(hold: Duration) -> CheckpointConfig {
    CheckpointConfig {
        hold,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_runs_commits_wait_for_its_barrier_and_leave_as_one_commit() {
    let (fs, w) = writer(holding(Duration::from_secs(3600)));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for (i, phase) in ["step_started", "runtime_state", "pre_llm", "post_llm"]
        .into_iter()
        .enumerate()
    {
        w.submit(record(&t, &r, e, i as u64, phase), false)
            .await
            .unwrap();
        // Time passes between submissions (a model call); nothing is written meanwhile.
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    assert!(applied(&fs, &r).is_empty(), "{:?}", applied(&fs, &r));
    assert_eq!(w.stats().batches, 0);
    w.barrier(&t, &r, e).await.unwrap();
    let commits = applied(&fs, &r);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert_eq!(commits[0].len(), 4, "the barrier's commit carries all four");
    assert_eq!(w.stats().batches, 1);
    assert_eq!(
        latest(&fs, &t, &r).await.as_deref(),
        Some("checkpoint:r1:3:post_llm")
    );
}

#[tokio::test(start_paused = true)]
async fn a_commit_nobody_waits_for_is_written_once_it_is_hold_old() {
    let (fs, w) = writer(holding(Duration::from_millis(5)));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(4)).await;
    w.submit(record(&t, &r, e, 1, "post_llm"), false)
        .await
        .unwrap();
    assert!(applied(&fs, &r).is_empty());
    // Due 5 ms after the first submission, with the second merged into it.
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(applied(&fs, &r).len(), 1);
    assert_eq!(applied(&fs, &r)[0].len(), 2);
}

/// A commit due after the background task's timer fires does not wake the task (its timer
/// finds it); it is still written once it is `hold` old, not later, and not earlier.
#[tokio::test(start_paused = true)]
async fn a_commit_the_timer_will_find_is_written_on_time_without_a_wake_up() {
    let (fs, w) = writer(holding(Duration::from_millis(5)));
    let (t, (a, ea), (b, eb)) = two_runs(&fs).await;
    w.submit(record(&t, &a, ea, 0, "pre_llm"), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    // Due at 8 ms; the timer is set for a's 5 ms, so b's commit wakes nobody.
    w.submit(record(&t, &b, eb, 0, "pre_llm"), false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await; // 6 ms
    assert_eq!(applied(&fs, &a).len(), 1);
    assert!(applied(&fs, &b).is_empty(), "b is not 5 ms old yet");
    tokio::time::sleep(Duration::from_millis(3)).await; // 9 ms
    assert_eq!(applied(&fs, &b).len(), 1, "the timer found b's commit");
    assert_eq!(w.stats().inline, 0, "written by the background task");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_ticket_or_a_flush_writes_held_commits_at_once() {
    let (fs, w) = writer(holding(Duration::from_secs(3600)));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    let ticket = w
        .submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    ticket.wait().await.unwrap();
    assert_eq!(applied(&fs, &r).len(), 1);
    w.submit(record(&t, &r, e, 1, "run_terminal"), false)
        .await
        .unwrap();
    w.flush(&t, &r, e, Duration::from_secs(1)).await.unwrap();
    assert_eq!(applied(&fs, &r).len(), 2);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_run_does_not_hold_another_runs_barrier() {
    let (fs, w) = writer(holding(Duration::from_secs(3600)));
    let (t, (a, ea), (b, eb)) = two_runs(&fs).await;
    w.submit(record(&t, &a, ea, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.submit(record(&t, &b, eb, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.barrier(&t, &b, eb).await.unwrap();
    assert_eq!(applied(&fs, &b).len(), 1);
    assert!(applied(&fs, &a).is_empty(), "a is still held");
    // Dropping the writer (every handle) writes what it holds.
    drop(w);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(applied(&fs, &a).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn release_writes_held_commits_without_waiting_for_the_hold() {
    let (fs, w) = writer(holding(Duration::from_secs(3600)));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for (i, phase) in ["step_started", "pre_llm"].into_iter().enumerate() {
        w.submit(record(&t, &r, e, i as u64, phase), false)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(applied(&fs, &r).is_empty(), "held before the release");
    // What a dropped run task (an aborted run) does: nobody waits, yet the commits go now.
    w.release(&t, &r, e);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let commits = applied(&fs, &r);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert_eq!(commits[0].len(), 2);
}
