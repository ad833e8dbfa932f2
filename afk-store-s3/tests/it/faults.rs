//! Ambiguous head writes, produced by a fault-injecting proxy between the store and the test
//! server: a write that landed but whose answer was lost, one that never landed, one whose
//! answer came after the client's timeout. The commit contract (afk-core `Store::commit`): all
//! or nothing, an unknown outcome resolved before returning, `Unavailable` only when nothing
//! was written.

use crate::common;
use crate::proxy;

use common::{ids, step};

use std::future::Future;
use std::time::Duration;

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Epoch, Store},
};
use afk_store_s3::{S3Config, S3Store};
use aws_sdk_s3::Client;
use proxy::{Fault, Proxy};

/// Generous bound on every store call: a call that takes longer hangs, and fails the test.
const BOUND: Duration = Duration::from_secs(90);
/// Attempt timeout given to the store (the delay fault holds answers longer than this).
const ATTEMPT_MS: u64 = 1_000;

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

/// A proxy in front of the test server and a store behind it making `attempts` attempts per
/// request; `None` when the test is skipped.
async fn setup(tag: &str, attempts: u32) -> Option<(Proxy, S3Store, S3Config, Client)> {
    let (endpoint, ..) = common::server()?;
    let proxy = Proxy::start(&endpoint).await;
    let cfg: S3Config = common::config(&proxy.endpoint(), tag)?
        .with_attempt_timeout_ms(ATTEMPT_MS)
        .with_operation_timeout_ms(30_000)
        .with_max_attempts(attempts);
    let store = bounded("open", S3Store::open(cfg.clone()))
        .await
        .expect("open through the proxy");
    // Look behind the store directly at the server, not through the proxy.
    let mut direct = cfg.clone();
    direct.endpoint = Some(endpoint);
    let raw = common::raw_client(&direct).await;
    Some((proxy, store, cfg, raw))
}

/// A run claimed and committed once (head seq 2), through the proxy without faults.
async fn started_run(store: &S3Store, run: &str) -> (ThreadId, RunId, Epoch) {
    let (t, r) = ids(run);
    let epoch = bounded("claim", store.claim(&t, &r))
        .await
        .expect("store call through the proxy");
    bounded("commit 0", store.commit(&step(&t, &r, epoch, 0)))
        .await
        .expect("store call through the proxy");
    (t, r, epoch)
}

/// The record objects the server holds for a run.
async fn record_objects(raw: &Client, cfg: &S3Config, run: &str) -> Vec<String> {
    let dir = format!("{}/t/{run}/o/", cfg.prefix);
    common::objects(raw, &cfg.bucket, &dir).await
}

/// Step `i` was applied exactly once: one head swap after the first commit, its value and
/// latest pointer readable, its key listed once, and one record object (the pack of its two
/// values) per commit on the server plus `garbage` objects of failed attempts.
async fn assert_applied_once(
    store: &S3Store,
    raw: &Client,
    cfg: &S3Config,
    run: &str,
    i: u32,
    garbage: usize,
) {
    let (t, r) = ids(run);
    let head = common::raw_head(raw, cfg, "t", run).await;
    assert_eq!(head["seq"], 3, "claim, commit 0, commit {i}: {head}");
    let key = format!("checkpoint:{r}:{i}:pre_llm");
    let value = bounded("get", store.get(&t, &key))
        .await
        .expect("store call through the proxy");
    assert_eq!(value, Some(format!("value {i}").into_bytes()));
    let message = bounded("get", store.get(&t, &format!("messages:{r}:{i:020}")))
        .await
        .expect("store call through the proxy");
    assert_eq!(message, Some(format!("message {i}").into_bytes()));
    let latest = bounded(
        "get latest",
        store.get(&t, &format!("checkpoint:{r}:latest")),
    )
    .await
    .expect("store call through the proxy");
    assert_eq!(latest, Some(format!("{{\"step\":{i}}}").into_bytes()));
    let listed = bounded("list", store.list(&t, &key, None, 100))
        .await
        .expect("store call through the proxy");
    assert_eq!(listed.keys, vec![key]);
    let objects = record_objects(raw, cfg, run).await;
    assert_eq!(
        objects.len(),
        2 + garbage,
        "one record object per commit, {garbage} left by failed attempts: {objects:?}"
    );
}

/// Nothing of step `i` is visible: the head is still the one of commit 0.
async fn assert_not_applied(store: &S3Store, raw: &Client, cfg: &S3Config, run: &str, i: u32) {
    let (t, r) = ids(run);
    let head = common::raw_head(raw, cfg, "t", run).await;
    assert_eq!(head["seq"], 2, "only claim and commit 0: {head}");
    let key = format!("checkpoint:{r}:{i}:pre_llm");
    assert_eq!(
        bounded("get", store.get(&t, &key))
            .await
            .expect("store call through the proxy"),
        None
    );
    let latest = bounded(
        "get latest",
        store.get(&t, &format!("checkpoint:{r}:latest")),
    )
    .await
    .expect("store call through the proxy");
    assert_eq!(latest, Some(b"{\"step\":0}".to_vec()));
}

/// The head write lands but its answer is lost on every attempt the SDK makes (closed or reset
/// connection): the store reads the head back, finds its nonce and reports success, once.
#[tokio::test]
async fn landed_head_write_with_lost_answer_commits_exactly_once() {
    for attempts in [1, 3] {
        let Some((proxy, store, cfg, raw)) = setup("lost", attempts).await else {
            return;
        };
        for (n, fault) in [Fault::DropAfterForward, Fault::ResetAfterForward]
            .into_iter()
            .enumerate()
        {
            let run = format!("run_lost_{n}");
            let (t, r, epoch) = started_run(&store, &run).await;
            proxy.arm(fault, attempts as usize);
            let before = proxy.head_puts();
            let out = bounded("commit", store.commit(&step(&t, &r, epoch, 1))).await;
            proxy.disarm();
            assert_eq!(
                proxy.applied().len(),
                (n + 1) * attempts as usize,
                "{fault:?}: every attempt was faulted"
            );
            assert!(proxy.head_puts() > before);
            out.unwrap_or_else(|e| {
                panic!("{fault:?}, {attempts} attempts: landed commit reported {e:?}")
            });
            assert_applied_once(&store, &raw, &cfg, &run, 1, 0).await;
        }
    }
}

/// A claim whose head write landed but whose answer was lost is one claim, not two.
#[tokio::test]
async fn landed_claim_with_lost_answer_claims_once() {
    let Some((proxy, store, cfg, raw)) = setup("claim", 1).await else {
        return;
    };
    let (t, r) = ids("run_claim");
    proxy.arm(Fault::ResetAfterForward, 1);
    let epoch = bounded("claim", store.claim(&t, &r)).await;
    assert_eq!(proxy.applied(), vec![Fault::ResetAfterForward]);
    assert_eq!(epoch.unwrap(), Epoch(1));
    let head = common::raw_head(&raw, &cfg, "t", "run_claim").await;
    assert_eq!(
        (&head["epoch"], &head["seq"]),
        (&1.into(), &1.into()),
        "{head}"
    );
}

/// The head write never reaches the server, on every attempt: the commit fails with a
/// retryable `Unavailable` and nothing of it is visible; retried later, it applies once.
#[tokio::test]
async fn head_write_that_never_landed_is_unavailable_and_invisible() {
    let Some((proxy, store, cfg, raw)) = setup("never", 3).await else {
        return;
    };
    let (t, r, epoch) = started_run(&store, "run_never").await;
    proxy.arm(Fault::DropBeforeForward, usize::MAX);
    let err = bounded("commit", store.commit(&step(&t, &r, epoch, 1)))
        .await
        .expect_err("no head write reached the server");
    proxy.disarm();
    assert!(!proxy.applied().is_empty());
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert_not_applied(&store, &raw, &cfg, "run_never", 1).await;
    bounded("commit retried", store.commit(&step(&t, &r, epoch, 1)))
        .await
        .unwrap();
    // The failed attempt's record object stays (its head write might still land late, as a
    // request in flight cannot be cancelled): no head names it, and delete_run removes it.
    assert_applied_once(&store, &raw, &cfg, "run_never", 1, 1).await;
    bounded("delete_run", store.delete_run(&t, &r))
        .await
        .unwrap();
    assert_eq!(
        record_objects(&raw, &cfg, "run_never").await,
        Vec::<String>::new()
    );
}

/// The first attempts never reach the server, a later one does: the commit succeeds, once.
#[tokio::test]
async fn head_write_lost_on_early_attempts_commits_once() {
    let Some((proxy, store, cfg, raw)) = setup("early", 3).await else {
        return;
    };
    let (t, r, epoch) = started_run(&store, "run_early").await;
    proxy.arm(Fault::DropBeforeForward, 2);
    bounded("commit", store.commit(&step(&t, &r, epoch, 1)))
        .await
        .unwrap();
    assert_eq!(proxy.applied().len(), 2);
    assert_applied_once(&store, &raw, &cfg, "run_early", 1, 0).await;
}

/// The head write lands at once but its answer comes after the attempt timeout: the store
/// resolves the timeout by reading the head back (with or without SDK retries).
#[tokio::test]
async fn answer_after_the_attempt_timeout_commits_exactly_once() {
    for attempts in [1, 3] {
        let Some((proxy, store, cfg, raw)) = setup("slow", attempts).await else {
            return;
        };
        let run = format!("run_slow_{attempts}");
        let (t, r, epoch) = started_run(&store, &run).await;
        proxy.arm(Fault::Delay(Duration::from_millis(3 * ATTEMPT_MS)), 1);
        let out = bounded("commit", store.commit(&step(&t, &r, epoch, 1))).await;
        assert_eq!(proxy.applied().len(), 1);
        out.unwrap_or_else(|e| panic!("{attempts} attempts: landed commit reported {e:?}"));
        assert_applied_once(&store, &raw, &cfg, &run, 1, 0).await;
    }
}
