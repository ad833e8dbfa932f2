//! Tests of the retry wrapper, against `MemoryStore` behind a `FaultStore`.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::error::ErrorKind;
use crate::store::{FaultStore, MemoryStore, Op};

fn ids() -> (ThreadId, RunId) {
    (ThreadId::new("t").unwrap(), RunId::new("r").unwrap())
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        multiplier: 2.0,
        max_elapsed: Duration::from_secs(60),
    }
}

fn wrap(
    policy: RetryPolicy,
    rng: RandomSource,
) -> (Arc<FaultStore<MemoryStore>>, RetryStore<dyn Store>) {
    let fs = Arc::new(FaultStore::new(MemoryStore::new()));
    let inner: Arc<dyn Store> = fs.clone();
    (fs, RetryStore::from_arc(inner, policy, rng))
}

#[tokio::test(start_paused = true)]
async fn retries_retryable_errors_until_success() {
    let (fs, store) = wrap(policy(), RandomSource::seeded(1));
    let (t, _) = ids();
    fs.fail_nth(Some(Op::Get), 1, ErrorKind::Unavailable);
    fs.fail_nth(Some(Op::Get), 2, ErrorKind::Timeout);
    assert_eq!(store.get(&t, "checkpoint:r:latest").await.unwrap(), None);
    assert_eq!(fs.calls(Op::Get), 3);
}

#[tokio::test(start_paused = true)]
async fn does_not_retry_other_errors() {
    let (fs, store) = wrap(policy(), RandomSource::seeded(1));
    let (t, r) = ids();
    for kind in [
        ErrorKind::Fenced,
        ErrorKind::Corrupt,
        ErrorKind::InvalidInput,
        ErrorKind::Conflict,
    ] {
        let before = fs.calls(Op::Claim);
        fs.fail_nth(Some(Op::Claim), before + 1, kind);
        assert_eq!(store.claim(&t, &r).await.unwrap_err().kind(), kind);
        assert_eq!(
            fs.calls(Op::Claim),
            before + 1,
            "{kind} must not be retried"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts_with_the_last_error() {
    let (fs, store) = wrap(policy(), RandomSource::seeded(1));
    let (t, r) = ids();
    fs.fail_with_probability(None, 1.0, 3, ErrorKind::Unavailable);
    let err = store.claim(&t, &r).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(fs.calls(Op::Claim), 4);
}

#[tokio::test(start_paused = true)]
async fn gives_up_when_the_next_wait_would_pass_max_elapsed() {
    let p = RetryPolicy {
        max_attempts: 100,
        max_elapsed: Duration::from_millis(350),
        ..policy()
    };
    // unit 0.999.. makes every delay its full value: 100, 200, 400 ms.
    let (fs, store) = wrap(p, RandomSource::new(|| 1.0));
    let (t, r) = ids();
    fs.fail_with_probability(None, 1.0, 3, ErrorKind::Unavailable);
    let start = tokio::time::Instant::now();
    assert!(store.claim(&t, &r).await.is_err());
    // 100 ms + 200 ms waited; a third wait of 400 ms would pass 350 ms.
    assert_eq!(fs.calls(Op::Claim), 3);
    assert!(start.elapsed() <= Duration::from_millis(350));
}

#[tokio::test(start_paused = true)]
async fn jitter_comes_from_the_injected_source() {
    async fn waited(unit: f64) -> Duration {
        let (fs, store) = wrap(policy(), RandomSource::new(move || unit));
        let (t, r) = ids();
        fs.fail_with_probability(None, 1.0, 3, ErrorKind::Unavailable);
        let start = tokio::time::Instant::now();
        let _ = store.claim(&t, &r).await;
        start.elapsed()
    }
    // Three waits of 100, 200, 400 ms, each scaled into [1/2, 1) by the unit.
    assert_eq!(waited(0.0).await, Duration::from_millis(350));
    assert!(waited(0.5).await > Duration::from_millis(500));
    let a = {
        let mut r = RandomSource::seeded(42);
        (0..5).map(|_| r.next_unit()).collect::<Vec<_>>()
    };
    let b = {
        let mut r = RandomSource::seeded(42);
        (0..5).map(|_| r.next_unit()).collect::<Vec<_>>()
    };
    assert_eq!(a, b, "a seeded source is reproducible");
}

#[test]
fn backoff_grows_caps_and_stays_in_the_jitter_band() {
    let p = policy();
    assert_eq!(p.backoff(1, 0.0), Duration::from_millis(50));
    assert_eq!(p.backoff(2, 0.0), Duration::from_millis(100));
    assert_eq!(
        p.backoff(10, 0.0),
        Duration::from_millis(500),
        "capped at max_backoff"
    );
    for retry in 1..20 {
        for unit in [0.0, 0.3, 0.999, f64::NAN, 7.0] {
            let d = p.backoff(retry, unit);
            assert!(
                d <= p.max_backoff && d >= p.backoff(retry, 0.0),
                "{retry} {unit} {d:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn commit_batch_retries_only_failed_commits_without_a_later_one_of_their_run() {
    let (fs, store) = wrap(policy(), RandomSource::seeded(1));
    let t = ThreadId::new("t").unwrap();
    let (a, b) = (RunId::new("a").unwrap(), RunId::new("b").unwrap());
    let ea = fs.inner().claim(&t, &a).await.unwrap();
    let eb = fs.inner().claim(&t, &b).await.unwrap();
    let c = |run: &RunId, epoch, i: u32| Commit {
        thread: t.clone(),
        run: run.clone(),
        epoch,
        puts: vec![(format!("checkpoint:{run}:{i}:pre_llm"), vec![1])],
        latest: None,
        attention: None,
    };
    // Commit calls: 1 = a0 fails, 2 = b0 fails, 3 = a1 ok; retry: 4 = b0 ok.
    fs.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    fs.fail_nth(Some(Op::Commit), 2, ErrorKind::Unavailable);
    let results = store
        .commit_batch(&[c(&a, ea, 0), c(&b, eb, 0), c(&a, ea, 1)])
        .await;
    assert_eq!(
        results[0].as_ref().unwrap_err().kind(),
        ErrorKind::Unavailable,
        "a has a later commit"
    );
    assert!(results[1].is_ok(), "b0 retried");
    assert!(results[2].is_ok());
    assert_eq!(fs.calls(Op::Commit), 4);
}

/// `commit_owned` retries like `commit`: the inner store hands the refused commit back, the
/// next attempt carries it, and it is applied once; a refusal that is not retryable (or the
/// last attempt's) comes back with the commit unchanged.
#[tokio::test(start_paused = true)]
async fn commit_owned_retries_with_the_commit_handed_back() {
    let (fs, store) = wrap(policy(), RandomSource::seeded(1));
    let (t, r) = ids();
    let epoch = store.claim(&t, &r).await.unwrap();
    let commit = |epoch, value: &[u8]| Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![("messages:r:1".to_owned(), value.to_vec())],
        latest: Some(value.to_vec()),
        attention: None,
    };
    fs.fail_nth(Some(Op::Commit), 1, ErrorKind::Unavailable);
    fs.fail_nth(Some(Op::Commit), 2, ErrorKind::Timeout);
    store.commit_owned(commit(epoch, b"one")).await.unwrap();
    assert_eq!(fs.calls(Op::Commit), 3);
    assert_eq!(
        store.get(&t, "messages:r:1").await.unwrap(),
        Some(b"one".to_vec())
    );
    assert_eq!(
        store.get(&t, "checkpoint:r:latest").await.unwrap(),
        Some(b"one".to_vec())
    );

    // A stale epoch: `Fenced`, not retried, the commit back as it was, nothing written.
    let stale = commit(Epoch(epoch.0 - 1), b"two");
    let rejected = store.commit_owned(stale.clone()).await.unwrap_err();
    assert_eq!(rejected.error.kind(), ErrorKind::Fenced);
    assert_eq!(*rejected.commit, stale);
    assert_eq!(fs.calls(Op::Commit), 4);
    // Every attempt refused: the last error, with the commit.
    for n in 5..=8 {
        fs.fail_nth(Some(Op::Commit), n, ErrorKind::Unavailable);
    }
    let last = commit(epoch, b"three");
    let rejected = store.commit_owned(last.clone()).await.unwrap_err();
    assert_eq!(rejected.error.kind(), ErrorKind::Unavailable);
    assert_eq!(*rejected.commit, last);
    assert_eq!(fs.calls(Op::Commit), 8);
    assert_eq!(
        store.get(&t, "messages:r:1").await.unwrap(),
        Some(b"one".to_vec())
    );
}
