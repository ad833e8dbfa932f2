//! Commits, fencing and concurrency of `RocksDbStore` on a real database in a temp dir.

use crate::common;

use std::sync::Arc;

use afk_core::{
    ErrorKind,
    store::{Epoch, Store},
};
use common::{commit, get, list_all, open, r, t};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_writes_records_and_latest_pointer_atomically() {
    let (_dir, store) = open();
    assert_eq!(get(&store, "th", "checkpoint:r1:latest").await, None);
    let e = store.claim(&t("th"), &r("r1")).await.expect("claim");
    assert_eq!(e, Epoch(1));
    let c = commit(
        "th",
        "r1",
        e,
        &[
            ("checkpoint:r1:0:pre_llm", "rec0"),
            ("effect:r1:0:c1", "eff"),
        ],
        Some("p0"),
    );
    store.commit(&c).await.expect("commit");
    assert_eq!(
        get(&store, "th", "checkpoint:r1:0:pre_llm")
            .await
            .as_deref(),
        Some("rec0")
    );
    assert_eq!(
        get(&store, "th", "effect:r1:0:c1").await.as_deref(),
        Some("eff")
    );
    assert_eq!(
        get(&store, "th", "checkpoint:r1:latest").await.as_deref(),
        Some("p0")
    );
    assert_eq!(
        get(&store, "th", "run:r1").await.as_deref(),
        Some(r#"{"epoch":1}"#)
    );
    // Other threads see nothing.
    assert_eq!(get(&store, "th2", "checkpoint:r1:latest").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_epoch_is_fenced_and_writes_nothing() {
    let (_dir, store) = open();
    let unclaimed = commit(
        "th",
        "r1",
        Epoch(0),
        &[("checkpoint:r1:0:x", "v")],
        Some("p"),
    );
    assert_eq!(
        store
            .commit(&unclaimed)
            .await
            .expect_err("unclaimed")
            .kind(),
        ErrorKind::Fenced
    );
    assert_eq!(get(&store, "th", "checkpoint:r1:0:x").await, None);
    let e1 = store.claim(&t("th"), &r("r1")).await.expect("claim");
    let e2 = store.claim(&t("th"), &r("r1")).await.expect("claim");
    assert!(e2 > e1);
    let stale = commit(
        "th",
        "r1",
        e1,
        &[("checkpoint:r1:1:post_llm", "old")],
        Some("old"),
    );
    let err = store.commit(&stale).await.expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert!(!err.is_retryable());
    assert_eq!(get(&store, "th", "checkpoint:r1:1:post_llm").await, None);
    assert_eq!(get(&store, "th", "checkpoint:r1:latest").await, None);
    // An epoch from the future is not current either.
    let future = commit("th", "r1", Epoch(e2.0 + 1), &[], Some("x"));
    assert_eq!(
        store.commit(&future).await.expect_err("fenced").kind(),
        ErrorKind::Fenced
    );
    store
        .commit(&commit("th", "r1", e2, &[], Some("new")))
        .await
        .expect("current epoch commits");
    assert_eq!(
        get(&store, "th", "checkpoint:r1:latest").await.as_deref(),
        Some("new")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_and_the_fence_key_are_rejected_whole() {
    let (_dir, store) = open();
    let e = store.claim(&t("th"), &r("r1")).await.expect("claim");
    for bad in [
        "checkpoint:r2:0:pre_llm",
        "run:r1",
        "other:r1",
        "checkpoint:r10:0:x",
        "bad key",
    ] {
        let c = commit(
            "th",
            "r1",
            e,
            &[("checkpoint:r1:0:pre_llm", "ok"), (bad, "v")],
            Some("p"),
        );
        let err = store.commit(&c).await.expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}");
    }
    assert_eq!(get(&store, "th", "checkpoint:r1:0:pre_llm").await, None);
    assert_eq!(get(&store, "th", "checkpoint:r1:latest").await, None);
    assert_eq!(
        get(&store, "th", "run:r1").await.as_deref(),
        Some(r#"{"epoch":1}"#)
    );
    assert_eq!(
        store
            .get(&t("th"), "has space")
            .await
            .expect_err("bad key")
            .kind(),
        ErrorKind::InvalidInput
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_batch_answers_each_commit() {
    let (_dir, store) = open();
    let e1 = store.claim(&t("th"), &r("a")).await.expect("claim");
    let eb = store.claim(&t("th"), &r("b")).await.expect("claim");
    let batch = vec![
        commit("th", "a", e1, &[("checkpoint:a:0:x", "a0")], Some("a0")),
        commit(
            "th",
            "b",
            Epoch(eb.0 + 5),
            &[("checkpoint:b:0:x", "b0")],
            Some("b0"),
        ),
        commit("th", "a", e1, &[("checkpoint:b:0:x", "wrong run")], None),
        commit("th", "a", e1, &[("checkpoint:a:1:x", "a1")], Some("a1")),
    ];
    let res = store.commit_batch(&batch).await;
    let kinds: Vec<Option<ErrorKind>> = res
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            None,
            Some(ErrorKind::Fenced),
            Some(ErrorKind::InvalidInput),
            None
        ]
    );
    assert_eq!(
        get(&store, "th", "checkpoint:a:0:x").await.as_deref(),
        Some("a0")
    );
    assert_eq!(
        get(&store, "th", "checkpoint:a:1:x").await.as_deref(),
        Some("a1")
    );
    assert_eq!(
        get(&store, "th", "checkpoint:a:latest").await.as_deref(),
        Some("a1")
    );
    assert_eq!(get(&store, "th", "checkpoint:b:0:x").await, None);
    assert!(store.commit_batch(&[]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_hand_out_unique_epochs_and_one_winner() {
    let (_dir, store) = open();
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let s = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            s.claim(&t("th"), &r("race")).await.expect("claim")
        }));
    }
    let mut epochs = Vec::new();
    for task in tasks {
        epochs.push(task.await.expect("join"));
    }
    epochs.sort();
    assert_eq!(epochs, (1..=16).map(Epoch).collect::<Vec<_>>());
    let mut oks = 0;
    for e in epochs {
        let key = format!("checkpoint:race:{}:x", e.0);
        match store
            .commit(&commit("th", "race", e, &[(key.as_str(), "v")], Some("p")))
            .await
        {
            Ok(()) => oks += 1,
            Err(err) => assert_eq!(err.kind(), ErrorKind::Fenced),
        }
    }
    assert_eq!(oks, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_runs_commit_concurrently_from_many_tasks() {
    let (_dir, store) = open();
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for run in 0..32 {
        let s = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let run = format!("run_{run}");
            let e = s.claim(&t("th"), &r(&run)).await.expect("claim");
            for step in 0..20 {
                let key = format!("checkpoint:{run}:{step}:post_tool");
                let latest = format!("{step}");
                s.commit(&commit(
                    "th",
                    &run,
                    e,
                    &[(key.as_str(), latest.as_str())],
                    Some(&latest),
                ))
                .await
                .expect("commit");
            }
        }));
    }
    for task in tasks {
        task.await.expect("join");
    }
    for run in 0..32 {
        let (keys, _) = list_all(&store, "th", &format!("checkpoint:run_{run}:"), 1000).await;
        assert_eq!(keys.len(), 21, "run_{run}");
        let latest = get(&store, "th", &format!("checkpoint:run_{run}:latest")).await;
        assert_eq!(latest.as_deref(), Some("19"));
    }
}

/// The store keeps the fences it read or wrote in memory; deleting a fence (by key or with the
/// run) must be seen by the next commit, which then finds the run never claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_fence_is_seen_by_the_next_commit() {
    let (_dir, store) = open();
    for delete_run in [false, true] {
        let run = if delete_run { "r2" } else { "r1" };
        let e = store.claim(&t("th"), &r(run)).await.expect("claim");
        let key = format!("checkpoint:{run}:0:pre_llm");
        let c = commit("th", run, e, &[(key.as_str(), "v")], Some("p"));
        store.commit(&c).await.expect("a claimed run commits");
        if delete_run {
            store
                .delete_run(&t("th"), &r(run))
                .await
                .expect("delete_run");
        } else {
            store
                .delete(&t("th"), &[format!("run:{run}")])
                .await
                .expect("delete the fence");
        }
        let err = store.commit(&c).await.expect_err("the fence is gone");
        assert_eq!(err.kind(), ErrorKind::Fenced, "{run}: {err}");
        assert!(err.to_string().contains("never claimed"), "{run}: {err}");
        // Claimed again, it starts over at epoch 1 and commits.
        let again = store.claim(&t("th"), &r(run)).await.expect("claim again");
        assert_eq!(again, Epoch(1), "{run}");
        store.commit(&c).await.expect("commits under the new claim");
    }
}
