//! Tests of the fault-injecting wrapper.

use std::time::Duration;

use super::*;
use crate::store::MemoryStore;

fn setup() -> (FaultStore<MemoryStore>, ThreadId, RunId) {
    (
        FaultStore::new(MemoryStore::new()),
        ThreadId::new("t").unwrap(),
        RunId::new("r").unwrap(),
    )
}

fn commit(t: &ThreadId, r: &RunId, epoch: Epoch, i: u32) -> Commit {
    let key = format!("checkpoint:{r}:{i}:pre_llm");
    Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![(key.clone(), vec![i as u8])],
        latest: Some(key.into_bytes()),
        attention: None,
    }
}

#[tokio::test]
async fn fails_the_nth_call_of_an_op_or_of_any() {
    let (fs, t, r) = setup();
    fs.fail_nth(Some(Op::Get), 2, ErrorKind::Unavailable);
    fs.fail_nth(None, 4, ErrorKind::Corrupt);
    assert!(fs.get(&t, "run:r").await.is_ok());
    assert_eq!(
        fs.get(&t, "run:r").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert!(fs.claim(&t, &r).await.is_ok());
    assert_eq!(
        fs.claim(&t, &r).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    assert_eq!(
        (fs.calls(Op::Get), fs.calls(Op::Claim), fs.total_calls()),
        (2, 2, 4)
    );
    assert_eq!(fs.injected_failures(), 2);
    assert!(
        fs.inner().get(&t, "run:r").await.unwrap().is_some(),
        "one claim went through"
    );
}

#[tokio::test]
async fn probability_is_seeded() {
    async fn pattern(seed: u64) -> Vec<bool> {
        let (fs, t, _) = setup();
        fs.fail_with_probability(Some(Op::Get), 0.5, seed, ErrorKind::Unavailable);
        let mut out = Vec::new();
        for _ in 0..64 {
            out.push(fs.get(&t, "run:r").await.is_err());
        }
        out
    }
    let a = pattern(9).await;
    assert_eq!(a, pattern(9).await);
    assert!(a.iter().any(|f| *f) && a.iter().any(|f| !*f), "{a:?}");
}

#[tokio::test(start_paused = true)]
async fn adds_latency() {
    let (fs, t, _) = setup();
    fs.set_latency(Duration::from_millis(250));
    let start = tokio::time::Instant::now();
    fs.get(&t, "run:r").await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

#[tokio::test]
async fn silent_crash_acknowledges_without_persisting() {
    let (fs, t, r) = setup();
    let e = fs.claim(&t, &r).await.unwrap();
    fs.crash_after_commits(2, CrashMode::Silent);
    for i in 0..4 {
        fs.commit(&commit(&t, &r, e, i)).await.unwrap();
    }
    assert!(fs.crashed());
    assert_eq!((fs.persisted_commits(), fs.dropped_commits()), (2, 2));
    let latest = fs.get(&t, "checkpoint:r:latest").await.unwrap().unwrap();
    assert_eq!(latest, b"checkpoint:r:1:pre_llm");
    assert_eq!(fs.get(&t, "checkpoint:r:3:pre_llm").await.unwrap(), None);
}

#[tokio::test]
async fn down_crash_fails_everything_after_the_limit() {
    let (fs, t, r) = setup();
    let e = fs.claim(&t, &r).await.unwrap();
    fs.crash_after_commits(1, CrashMode::Down);
    fs.commit(&commit(&t, &r, e, 0)).await.unwrap();
    assert_eq!(
        fs.commit(&commit(&t, &r, e, 1)).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(
        fs.get(&t, "run:r").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    let batch = fs.commit_batch(&[commit(&t, &r, e, 2)]).await;
    assert_eq!(
        batch[0].as_ref().unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(fs.persisted_commits(), 1);
}

#[tokio::test]
async fn logs_claims_and_applied_commits_in_order() {
    let (fs, t, r) = setup();
    let e1 = fs.claim(&t, &r).await.unwrap();
    fs.commit(&commit(&t, &r, e1, 0)).await.unwrap();
    let e2 = fs.claim(&t, &r).await.unwrap();
    assert_eq!(
        fs.commit(&commit(&t, &r, e1, 1)).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    let log = fs.log();
    assert_eq!(log.len(), 3, "the fenced commit is not logged");
    assert!(matches!(&log[0], FaultEvent::Claim { epoch, .. } if *epoch == e1));
    assert!(matches!(&log[1], FaultEvent::Commit(c) if c.epoch == e1));
    assert!(matches!(&log[2], FaultEvent::Claim { epoch, .. } if *epoch == e2));
}

#[tokio::test]
async fn a_batch_fault_fails_every_commit_of_the_batch() {
    let (fs, t, r) = setup();
    let e = fs.claim(&t, &r).await.unwrap();
    fs.fail_nth(Some(Op::CommitBatch), 1, ErrorKind::Unavailable);
    let out = fs
        .commit_batch(&[commit(&t, &r, e, 0), commit(&t, &r, e, 1)])
        .await;
    assert!(out.iter().all(|r| {
        r.as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::Unavailable)
    }));
    assert_eq!(fs.persisted_commits(), 0);
    let out = fs
        .commit_batch(&[commit(&t, &r, e, 0), commit(&t, &r, e, 1)])
        .await;
    assert!(out.iter().all(Result::is_ok));
    assert_eq!(fs.calls(Op::Commit), 2);
}

#[tokio::test]
async fn a_held_call_waits_for_its_release_and_others_pass() {
    let (fs, t, r) = setup();
    let fs = std::sync::Arc::new(fs);
    let hold = fs.hold_nth(Op::Claim, 2);
    assert_eq!(
        fs.claim(&t, &r).await.unwrap(),
        Epoch(1),
        "the first claim is not held"
    );
    let held = tokio::spawn({
        let (fs, t, r) = (fs.clone(), t.clone(), r.clone());
        async move { fs.claim(&t, &r).await }
    });
    tokio::time::timeout(Duration::from_secs(60), hold.reached())
        .await
        .expect("the second claim was never held");
    // Held before the inner store: no second epoch yet, and other calls go on meanwhile.
    fs.commit(&commit(&t, &r, Epoch(1), 1)).await.unwrap();
    assert!(!held.is_finished());
    hold.release();
    assert_eq!(held.await.unwrap().unwrap(), Epoch(2));
    hold.reached().await; // still resolves once reached
    assert_eq!(
        fs.commit(&commit(&t, &r, Epoch(1), 2))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Fenced
    );
    // Released before it arrives: the call does not wait.
    let early = fs.hold_nth(Op::Get, 1);
    early.release();
    assert!(fs.get(&t, "run:r").await.unwrap().is_some());
}
