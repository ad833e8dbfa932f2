//! Unit tests of the writer rules, against `MemoryStore` behind a `FaultStore`.

mod claim;
mod hold;
mod latest;
mod merge;
mod props;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::store::{FaultEvent, FaultStore, MemoryStore, Op, RetryPolicy};

pub(super) fn tid(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

pub(super) fn rid(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

/// A commit of `run` writing record `checkpoint:<run>:<i>:<phase>` and pointing latest at it.
pub(super) fn record(thread: &ThreadId, run: &RunId, epoch: Epoch, i: u64, phase: &str) -> Commit {
    let key = format!("checkpoint:{run}:{i}:{phase}");
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: vec![(key.clone(), format!("value {i}").into_bytes())],
        latest: Some(key.into_bytes()),
        attention: None,
    }
}

use crate::store::Epoch;

pub(super) type Faulty = Arc<FaultStore<MemoryStore>>;

pub(super) fn writer(config: CheckpointConfig) -> (Faulty, Writer) {
    let fs = Arc::new(FaultStore::new(MemoryStore::new()));
    let store: Arc<dyn Store> = fs.clone();
    let w = Writer::new(store, config, RandomSource::seeded(7)).unwrap();
    (fs, w)
}

pub(super) async fn claimed(fs: &Faulty, thread: &ThreadId, run: &RunId) -> Epoch {
    fs.inner().claim(thread, run).await.unwrap()
}

/// Keys of the commits the inner store applied for `run`, in apply order.
/// Runs `a` and `b` of thread `t1`, claimed on `fs`.
pub(super) async fn two_runs(fs: &Faulty) -> (ThreadId, (RunId, Epoch), (RunId, Epoch)) {
    let t = tid("t1");
    let (a, b) = (rid("a"), rid("b"));
    let (ea, eb) = (claimed(fs, &t, &a).await, claimed(fs, &t, &b).await);
    (t, (a, ea), (b, eb))
}

pub(super) fn applied(fs: &Faulty, run: &RunId) -> Vec<Vec<String>> {
    fs.log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) if &c.run == run => {
                Some(c.puts.into_iter().map(|(k, _)| k).collect())
            }
            _ => None,
        })
        .collect()
}

pub(super) async fn latest(fs: &Faulty, thread: &ThreadId, run: &RunId) -> Option<String> {
    let v = fs
        .inner()
        .get(thread, &crate::store::latest_key(run))
        .await
        .unwrap();
    v.map(|b| String::from_utf8(b).unwrap())
}

#[tokio::test(start_paused = true)]
async fn writes_in_submission_order_and_barrier_waits_for_durability() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(10));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for (i, phase) in ["pre_llm", "post_llm", "pre_tool_batch"].iter().enumerate() {
        w.submit(record(&t, &r, e, i as u64, phase), false)
            .await
            .unwrap();
    }
    assert_eq!(
        fs.persisted_commits(),
        0,
        "nothing written before the task ran"
    );
    w.barrier(&t, &r, e).await.unwrap();
    // Queued before the task ran, so merged into one commit, in submission order.
    assert_eq!(
        applied(&fs, &r),
        vec![vec![
            "checkpoint:r1:0:pre_llm".to_string(),
            "checkpoint:r1:1:post_llm".to_string(),
            "checkpoint:r1:2:pre_tool_batch".to_string(),
        ]]
    );
    assert_eq!(
        latest(&fs, &t, &r).await.as_deref(),
        Some("checkpoint:r1:2:pre_tool_batch")
    );
}

#[tokio::test(start_paused = true)]
async fn coalescing_off_writes_every_snapshot() {
    let config = CheckpointConfig {
        coalesce_runtime_state: false,
        ..Default::default()
    };
    let (fs, w) = writer(config);
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for i in 0..4 {
        w.submit(record(&t, &r, e, i, "runtime_state"), true)
            .await
            .unwrap();
    }
    w.barrier(&t, &r, e).await.unwrap();
    assert_eq!(w.stats().coalesced, 0);
    assert_eq!(applied(&fs, &r).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn batches_hold_at_most_one_commit_per_run() {
    // Merging off, so each run has two commits to write.
    let (fs, w) = writer(CheckpointConfig {
        coalesce_runtime_state: false,
        ..Default::default()
    });
    let t = tid("t1");
    let runs = [rid("a"), rid("b"), rid("c")];
    let mut epochs = Vec::new();
    for r in &runs {
        epochs.push(claimed(&fs, &t, r).await);
    }
    for i in 0..2 {
        for (r, e) in runs.iter().zip(&epochs) {
            w.submit(record(&t, r, *e, i, "pre_llm"), false)
                .await
                .unwrap();
        }
    }
    // Past the hold, the background task writes them (a barrier on a run with nothing in
    // flight would write that run's commit itself).
    tokio::time::sleep(Duration::from_millis(50)).await;
    for (r, e) in runs.iter().zip(&epochs) {
        w.barrier(&t, r, *e).await.unwrap();
    }
    let s = w.stats();
    assert_eq!((s.batches, s.max_batch_len, s.written), (2, 3, 6), "{s:?}");
    assert_eq!(fs.calls(Op::CommitBatch), 2);
}

#[tokio::test(start_paused = true)]
async fn max_batch_size_bounds_a_store_call() {
    // Not held: all five are due at once.
    let config = CheckpointConfig {
        max_batch_size: 2,
        hold: Duration::ZERO,
        ..Default::default()
    };
    let (fs, w) = writer(config);
    let t = tid("t1");
    let runs: Vec<RunId> = (0..5).map(|i| rid(&format!("r{i}"))).collect();
    let mut epochs = Vec::new();
    for r in &runs {
        let e = claimed(&fs, &t, r).await;
        epochs.push(e);
        w.submit(record(&t, r, e, 0, "pre_llm"), false)
            .await
            .unwrap();
    }
    // Let the background task write them (a barrier on a run with nothing in flight would
    // write that run's commit itself).
    tokio::time::sleep(Duration::from_millis(50)).await;
    for (r, e) in runs.iter().zip(&epochs) {
        w.barrier(&t, r, *e).await.unwrap();
    }
    assert_eq!(w.stats().max_batch_len, 2);
    assert_eq!(w.stats().batches, 3);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried() {
    let (fs, w) = writer(CheckpointConfig::default());
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    fs.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    fs.fail_nth(Some(Op::Commit), 2, ErrorKind::Unavailable);
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.flush(&t, &r, e, Duration::from_secs(10)).await.unwrap();
    assert_eq!(fs.calls(Op::Commit), 3);
    assert_eq!(applied(&fs, &r).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_failing_every_write_fails_the_run_within_the_flush_timeout() {
    let (fs, w) = writer(CheckpointConfig::default());
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    fs.fail_with_probability(Some(Op::Commit), 1.0, 1, ErrorKind::Unavailable);
    let start = tokio::time::Instant::now();
    w.submit(record(&t, &r, e, 0, "run_terminal"), false)
        .await
        .unwrap();
    let err = w
        .flush(&t, &r, e, w.config().flush_timeout)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("injected failure"), "{err}");
    assert!(start.elapsed() < w.config().flush_timeout);
    assert_eq!(
        fs.calls(Op::Commit),
        u64::from(w.config().retry.max_attempts)
    );
    // The run stays failed: nothing later of it is accepted or reported durable.
    let again = w
        .submit(record(&t, &r, e, 1, "run_terminal"), false)
        .await
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Unavailable);
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert!(w.run_error(&t, &r, e).is_some());
    // Another run is unaffected once the store recovers.
    fs.clear_failures();
    let r2 = rid("r2");
    let e2 = claimed(&fs, &t, &r2).await;
    w.submit(record(&t, &r2, e2, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.flush(&t, &r2, e2, Duration::from_secs(10)).await.unwrap();
    let err = w.shutdown(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        err.message()
            .contains("1 checkpoint commits could not be written"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fenced_run_fails_all_its_queued_commits_with_fenced() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(50));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    let mut tickets = Vec::new();
    for i in 0..3 {
        tickets.push(
            w.submit(record(&t, &r, e, i, "pre_llm"), false)
                .await
                .unwrap(),
        );
    }
    let newer = claimed(&fs, &t, &r).await;
    assert!(newer > e);
    for ticket in &tickets {
        assert_eq!(ticket.wait().await.unwrap_err().kind(), ErrorKind::Fenced);
    }
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    let s = w.stats();
    assert_eq!((s.failed, s.coalesced), (1, 2), "one merged commit: {s:?}");
    assert_eq!(fs.calls(Op::Commit), 1, "fenced is not retried");
    assert!(applied(&fs, &r).is_empty());
    let err = w
        .submit(record(&t, &r, e, 9, "pre_llm"), false)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
}

#[tokio::test(start_paused = true)]
async fn flush_times_out_on_a_slow_store_and_the_write_still_lands() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_secs(60));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    w.submit(record(&t, &r, e, 0, "run_terminal"), false)
        .await
        .unwrap();
    let err = w
        .flush(&t, &r, e, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    w.barrier(&t, &r, e).await.unwrap();
    assert_eq!(applied(&fs, &r).len(), 1);
}

/// A flush that waits longer than its timeout while the store keeps answering other runs'
/// writes is a busy process, not a dead store: it waits on and succeeds.
#[tokio::test(start_paused = true)]
async fn a_flush_waiting_while_the_store_answers_others_does_not_time_out() {
    let (fs, w) = writer(CheckpointConfig::default());
    let (t, (a, ea), (b, eb)) = two_runs(&fs).await;
    let hold = fs.hold_nth(Op::Commit, fs.calls(Op::Commit) + 1);
    w.submit(record(&t, &a, ea, 0, "run_terminal"), false)
        .await
        .unwrap();
    let flush = {
        let (w, t, a) = (w.clone(), t.clone(), a.clone());
        tokio::spawn(async move { w.flush(&t, &a, ea, Duration::from_secs(1)).await })
    };
    hold.reached().await;
    // Run b writes every 200 ms for 5 s, five times the flush's timeout.
    for i in 0..25 {
        w.submit(record(&t, &b, eb, i, "pre_llm"), false)
            .await
            .unwrap();
        w.barrier(&t, &b, eb).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!flush.is_finished(), "the held write has not answered yet");
    hold.release();
    flush
        .await
        .unwrap()
        .expect("the store kept answering: no timeout");
    assert_eq!(applied(&fs, &a).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_then_refuses_new_commits() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_millis(20));
    let t = tid("t1");
    let runs = [rid("a"), rid("b")];
    for r in &runs {
        let e = claimed(&fs, &t, r).await;
        for i in 0..3 {
            w.submit(record(&t, r, e, i, "pre_llm"), false)
                .await
                .unwrap();
        }
    }
    w.shutdown(Duration::from_secs(5)).await.unwrap();
    // One merged commit per run, holding all three of its records.
    assert_eq!(fs.persisted_commits(), 2);
    for r in &runs {
        assert_eq!(applied(&fs, r).concat().len(), 3);
    }
    let err = w
        .submit(record(&t, &runs[0], Epoch(1), 9, "pre_llm"), false)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(!err.is_retryable());
    w.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_is_bounded_and_reports_what_was_not_written() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_secs(10));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for i in 0..3 {
        w.submit(record(&t, &r, e, i, "pre_llm"), false)
            .await
            .unwrap();
    }
    let err = w.shutdown(Duration::from_secs(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("3 commits not written"), "{err}");
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

#[tokio::test(start_paused = true)]
async fn an_aborted_writer_answers_errors_instead_of_hanging() {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(Duration::from_secs(1));
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    let ticket = w
        .submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    tokio::task::yield_now().await;
    w.abort();
    let err = ticket.wait().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("checkpoint writer stopped"), "{err}");
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        w.flush(&t, &r, e, Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Unavailable
    );
    assert!(
        w.submit(record(&t, &r, e, 1, "pre_llm"), false)
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_store_stops_the_writer_without_hanging() {
    let (fs, w) = writer(CheckpointConfig::default());
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    fs.panic_on_nth(Op::Commit, 1);
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    let err = w.barrier(&t, &r, e).await.unwrap_err();
    assert!(err.message().contains("panicked"), "{err}");
    assert!(w.shutdown(Duration::from_secs(1)).await.is_err());
}

/// A queue with one place.
fn one_place() -> CheckpointConfig {
    CheckpointConfig {
        queue_maxsize: 1,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_applies_backpressure_and_a_dropped_submit_loses_nothing() {
    let (fs, w) = writer(one_place());
    fs.set_latency(Duration::from_secs(1));
    let (t, (r, e), (r2, e2)) = two_runs(&fs).await;
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.release(&t, &r, e); // due now: the task takes commit 0 and starts writing it
    tokio::task::yield_now().await;
    w.submit(record(&t, &r, e, 1, "pre_llm"), false)
        .await
        .unwrap();
    // The queue's one place is taken by r1's commit 1: r1's next commit merges into it and
    // takes no place, but r2's first needs one of its own.
    w.submit(record(&t, &r, e, 2, "pre_llm"), false)
        .now_or_never()
        .expect("a commit that merges does not wait")
        .unwrap();
    let blocked = w
        .submit(record(&t, &r2, e2, 0, "pre_llm"), false)
        .now_or_never();
    assert!(blocked.is_none(), "a full queue must make submit wait");
    w.barrier(&t, &r, e).await.unwrap();
    assert_eq!(applied(&fs, &r).len(), 2, "commit 0, then 1 and 2 merged");
    assert_eq!(applied(&fs, &r).concat().len(), 3);
    assert!(
        applied(&fs, &r2).is_empty(),
        "the dropped submit was never accepted"
    );
    w.submit(record(&t, &r2, e2, 0, "pre_llm"), false)
        .await
        .unwrap();
    w.barrier(&t, &r2, e2).await.unwrap();
    assert_eq!(applied(&fs, &r2).len(), 1);
}

/// A run `r1` with `phases` submitted (steps 0, 1, …) whose barrier was aborted while writing
/// them itself on a store with `latency` per call, 10 ms into that write.
async fn barrier_aborted_mid_write(
    latency: Duration,
    phases: &[&str],
) -> (Faulty, Writer, ThreadId, RunId, Epoch) {
    let (fs, w) = writer(CheckpointConfig::default());
    fs.set_latency(latency);
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    for (i, phase) in phases.iter().enumerate() {
        w.submit(record(&t, &r, e, i as u64, phase), false)
            .await
            .unwrap();
    }
    let barrier = tokio::spawn({
        let (w, t, r) = (w.clone(), t.clone(), r.clone());
        async move { w.barrier(&t, &r, e).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fs.calls(Op::Commit),
        1,
        "the barrier's own write is in flight"
    );
    assert_eq!(fs.calls(Op::CommitBatch), 0);
    barrier.abort();
    assert!(barrier.await.unwrap_err().is_cancelled());
    assert!(applied(&fs, &r).is_empty(), "not applied yet");
    (fs, w, t, r, e)
}

/// A barrier writes its run's queued commit itself; aborted while that write is in flight (the
/// run's task was aborted), the write still ends and is recorded, as the background task's
/// would be: nothing the run queued is lost or left unaccounted.
#[tokio::test(start_paused = true)]
async fn an_aborted_barrier_still_finishes_and_records_its_write() {
    let (fs, w, t, r, e) =
        barrier_aborted_mid_write(Duration::from_millis(100), &["pre_llm", "post_llm"]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(applied(&fs, &r).concat().len(), 2, "the write went on");
    let s = w.stats();
    assert_eq!((s.durable, s.written, s.failed), (2, 1, 0), "{s:?}");
    // The run is not left busy: its next commit is written as usual.
    w.submit(record(&t, &r, e, 2, "pre_tool_batch"), false)
        .await
        .unwrap();
    w.flush(&t, &r, e, Duration::from_secs(5)).await.unwrap();
    assert_eq!(applied(&fs, &r).concat().len(), 3);
}

/// The write an aborted barrier left going on is cut off too when its runtime goes away: the
/// run claim then fails (whether the store applied it is unknown) instead of staying busy with
/// nobody to finish it.
#[test]
fn a_write_cut_off_with_its_runtime_fails_its_claim() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (w, t, r, e) = rt.block_on(async {
        let (_fs, w, t, r, e) =
            barrier_aborted_mid_write(Duration::from_secs(10), &["pre_llm"]).await;
        assert!(w.run_error(&t, &r, e).is_none(), "still going on");
        (w, t, r, e)
    });
    drop(rt);
    let err = w.run_error(&t, &r, e).expect("the claim failed");
    assert!(err.message().contains("without a result"), "{err}");
}

/// A submit waiting for room goes on once the task hands the queued entry to the store.
/// Submits waiting for room wait in line: each place freed wakes one of them, not all (with
/// thousands of runs waiting, waking all of them for every place cost more than the writes).
#[tokio::test(start_paused = true)]
async fn submits_waiting_for_room_are_woken_one_per_place_freed() {
    const RUNS: usize = 50;
    let (fs, w) = writer(one_place());
    fs.set_latency(Duration::from_millis(10));
    let t = tid("t1");
    let mut tasks = Vec::new();
    for i in 0..RUNS {
        let r = rid(&format!("r{i}"));
        let e = claimed(&fs, &t, &r).await;
        let (w, t) = (w.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let ticket = w
                .submit(record(&t, &r, e, 0, "pre_llm"), false)
                .await
                .unwrap();
            ticket.wait().await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let stats = w.stats();
    assert_eq!(stats.written, RUNS as u64);
    // Every run but the first waited; each should be woken about once.
    assert!(
        stats.room_wakeups <= 2 * RUNS as u64,
        "{} wake-ups for {RUNS} submits waiting for one place",
        stats.room_wakeups
    );
    assert!(
        stats.room_wakeups > 0,
        "the submits never waited: the test proves nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_submit_waiting_for_room_goes_on_when_the_queue_drains() {
    let (fs, w) = writer(one_place());
    fs.set_latency(Duration::from_millis(100));
    let (t, (r, e), (r2, e2)) = two_runs(&fs).await;
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    // Waits for room: woken, the task hands the held entry of a full queue to the store at
    // once, which makes room.
    let mut waiting = Box::pin(w.submit(record(&t, &r2, e2, 0, "pre_llm"), false));
    assert!(
        futures::poll!(&mut waiting).is_pending(),
        "the queue is full"
    );
    waiting.await.unwrap();
    w.barrier(&t, &r2, e2).await.unwrap();
    w.barrier(&t, &r, e).await.unwrap();
    assert_eq!(applied(&fs, &r).len(), 1);
    assert_eq!(applied(&fs, &r2).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn sync_mode_writes_inline_with_the_same_failure_rules() {
    let config = CheckpointConfig {
        async_writes: false,
        ..Default::default()
    };
    let (fs, w) = writer(config);
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    let ticket = w
        .submit(record(&t, &r, e, 0, "pre_llm"), true)
        .await
        .unwrap();
    assert_eq!(applied(&fs, &r).len(), 1, "written before submit returned");
    ticket.wait().await.unwrap();
    fs.fail_nth(Some(Op::Commit), 2, ErrorKind::Unavailable);
    w.submit(record(&t, &r, e, 1, "pre_llm"), false)
        .await
        .unwrap();
    assert_eq!(fs.calls(Op::Commit), 3, "retried once");
    fs.fail_nth(Some(Op::Commit), 4, ErrorKind::Corrupt);
    let err = w
        .submit(record(&t, &r, e, 2, "pre_llm"), false)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert_eq!(fs.calls(Op::Commit), 4, "not retried");
    let later = w
        .submit(record(&t, &r, e, 3, "pre_llm"), false)
        .await
        .unwrap_err();
    assert_eq!(later.kind(), ErrorKind::Corrupt, "the run stays failed");
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(
        w.flush(&t, &r, e, Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(fs.calls(Op::Commit), 4);
}

#[test]
fn async_mode_outside_a_runtime_is_a_config_error() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let err = Writer::new(store, CheckpointConfig::default(), RandomSource::seeded(1)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

#[tokio::test(start_paused = true)]
async fn no_retry_policy_fails_at_the_first_error() {
    let config = CheckpointConfig {
        retry: RetryPolicy::none(),
        ..Default::default()
    };
    let (fs, w) = writer(config);
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    fs.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    assert_eq!(
        w.barrier(&t, &r, e).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(fs.calls(Op::Commit), 1);
}

/// Every way a write fails says each thing once: the fault store's crash and injected failure,
/// the retry wrapper giving up, and the writer reporting a failed run again to a later caller.
#[tokio::test(start_paused = true)]
async fn failed_writes_say_each_thing_once() {
    let says_once = |e: &Error| {
        let s = e.to_string();
        assert_eq!(crate::repeated_phrase(&s, 12), None, "{s}");
        s
    };
    // The fault store crashed (what the demo shows), first answer and replayed answers.
    let (fs, w) = writer(CheckpointConfig::default());
    let (t, r) = (tid("t1"), rid("r1"));
    let e = claimed(&fs, &t, &r).await;
    fs.crash_after_commits(0, crate::store::CrashMode::Down);
    w.submit(record(&t, &r, e, 0, "pre_llm"), false)
        .await
        .unwrap();
    let first = w
        .flush(&t, &r, e, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        says_once(&first).starts_with("unavailable: FaultStore: "),
        "{first}"
    );
    let again = w.barrier(&t, &r, e).await.unwrap_err();
    assert_eq!(says_once(&again), first.to_string());
    let refused = w
        .submit(record(&t, &r, e, 1, "pre_llm"), false)
        .await
        .unwrap_err();
    says_once(&refused);
    says_once(&w.shutdown(Duration::from_secs(1)).await.unwrap_err());

    // The retry wrapper gives up after its attempts.
    let fs = Arc::new(FaultStore::new(MemoryStore::new()));
    let e = claimed(&fs, &t, &r).await;
    fs.fail_with_probability(Some(Op::Commit), 1.0, 1, ErrorKind::Unavailable);
    let retry = crate::store::RetryStore::from_arc(
        fs.clone(),
        RetryPolicy::default().with_max_attempts(3),
        RandomSource::seeded(1),
    );
    let gave_up = retry
        .commit(&record(&t, &r, e, 0, "pre_llm"))
        .await
        .unwrap_err();
    assert!(
        says_once(&gave_up).contains("injected failure"),
        "{gave_up}"
    );
    let batch = retry.commit_batch(&[record(&t, &r, e, 0, "pre_llm")]).await;
    says_once(batch[0].as_ref().unwrap_err());
}
