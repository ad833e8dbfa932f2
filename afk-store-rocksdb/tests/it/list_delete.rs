//! Listing, multi-get and deletion of `RocksDbStore` on a real database in a temp dir.

use crate::common;

use afk_core::store::{Epoch, Store};
use common::{commit, get, list_all, open, r, t};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_is_sorted_bounded_paginated_and_isolated() {
    let (_dir, store) = open();
    let mut expected = Vec::new();
    for (thread, run) in [
        ("thread_1", "run_1"),
        ("thread_1", "run_10"),
        ("thread_10", "run_1"),
    ] {
        let e = store.claim(&t(thread), &r(run)).await.expect("claim");
        let puts: Vec<(String, String)> = (0..23)
            .map(|i| (format!("checkpoint:{run}:{i}:post_tool"), format!("v{i}")))
            .collect();
        let refs: Vec<(&str, &str)> = puts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        store
            .commit(&commit(thread, run, e, &refs, Some("l")))
            .await
            .expect("commit");
        if thread == "thread_1" && run == "run_1" {
            expected = puts.into_iter().map(|(k, _)| k).collect();
            expected.push("checkpoint:run_1:latest".to_owned());
        }
    }
    expected.sort();
    let (keys, pages) = list_all(&store, "thread_1", "checkpoint:run_1:", 5).await;
    assert_eq!(keys, expected);
    assert_eq!(pages, 5);
    let (all, _) = list_all(&store, "thread_1", "", 1000).await;
    assert_eq!(all.len(), 2 * 24 + 2, "{all:?}");
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    assert!(all.contains(&"run:run_1".to_owned()) && all.contains(&"run:run_10".to_owned()));
    let (other, _) = list_all(&store, "thread_10", "", 7).await;
    assert_eq!(other.len(), 25);
    assert!(other.iter().all(|k| !k.contains("run_10")));
    // Limit 0 is clamped to 1; an exhausted listing has no cursor.
    let page = store
        .list(&t("thread_1"), "run:", None, 0)
        .await
        .expect("list");
    assert_eq!(page.keys, vec!["run:run_1".to_owned()]);
    let page = store
        .list(&t("thread_1"), "run:", page.next_cursor.as_deref(), 10)
        .await
        .expect("list");
    assert_eq!(
        (page.keys, page.next_cursor),
        (vec!["run:run_10".to_owned()], None)
    );
    let page = store
        .list(&t("thread_1"), "nothing:", None, 10)
        .await
        .expect("list");
    assert!(page.keys.is_empty() && page.next_cursor.is_none());
    // A cursor is a key: one before the prefix starts at the prefix, one after it gives nothing.
    let from_start = store
        .list(&t("thread_1"), "run:", None, 10)
        .await
        .expect("list");
    let before = store
        .list(&t("thread_1"), "run:", Some("checkpoint:x"), 10)
        .await
        .expect("cursor before the prefix");
    assert_eq!(before, from_start);
    assert!(!before.keys.is_empty());
    let after = store
        .list(&t("thread_1"), "run:", Some("zzz"), 10)
        .await
        .expect("cursor after the prefix");
    assert!(after.keys.is_empty() && after.next_cursor.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_run_removes_every_family_and_nothing_else() {
    let (_dir, store) = open();
    for (thread, run) in [("th", "run_1"), ("th", "run_10"), ("th2", "run_1")] {
        let e = store.claim(&t(thread), &r(run)).await.expect("claim");
        let keys = [
            format!("checkpoint:{run}:0:pre_llm"),
            format!("effect:{run}:0:call_1"),
            format!("messages:{run}:00000000000000000000"),
            format!("bgtool:{run}:job_1"),
        ];
        let puts: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        store
            .commit(&commit(thread, run, e, &puts, Some("p")))
            .await
            .expect("commit");
    }
    assert_eq!(
        store
            .delete_run(&t("th"), &r("run_1"))
            .await
            .expect("delete_run"),
        6
    );
    let (left, _) = list_all(&store, "th", "", 100).await;
    assert_eq!(left.len(), 6);
    assert!(left.iter().all(|k| k.contains("run_10")), "{left:?}");
    let (other, _) = list_all(&store, "th2", "", 100).await;
    assert_eq!(other.len(), 6);
    assert_eq!(
        store
            .delete_run(&t("th"), &r("run_1"))
            .await
            .expect("again"),
        0
    );
    // The fence went with the run.
    assert_eq!(
        store.claim(&t("th"), &r("run_1")).await.expect("claim"),
        Epoch(1)
    );

    store
        .delete(
            &t("th"),
            &["checkpoint:run_10:latest".into(), "missing:key".into()],
        )
        .await
        .expect("delete");
    assert_eq!(get(&store, "th", "checkpoint:run_10:latest").await, None);
    assert_eq!(
        get(&store, "th", "checkpoint:run_10:0:pre_llm")
            .await
            .as_deref(),
        Some("v")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_many_answers_in_order() {
    let (_dir, store) = open();
    let e = store.claim(&t("th"), &r("r")).await.expect("claim");
    store
        .commit(&commit(
            "th",
            "r",
            e,
            &[("effect:r:1:a", "A"), ("effect:r:2:b", "B")],
            None,
        ))
        .await
        .expect("commit");
    let keys: Vec<String> = ["effect:r:2:b", "effect:r:9:z", "effect:r:1:a"]
        .map(String::from)
        .to_vec();
    let got = store.get_many(&t("th"), &keys).await.expect("get_many");
    assert_eq!(got, vec![Some(b"B".to_vec()), None, Some(b"A".to_vec())]);
    assert!(
        store
            .get_many(&t("th"), &[])
            .await
            .expect("empty")
            .is_empty()
    );
}
