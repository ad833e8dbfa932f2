//! Store-level behaviour of `RocksDbStore` against a real RocksDB database in a temp dir.

use std::sync::Arc;

use afk_core::{Commit, Epoch, ErrorKind, RunId, Store, ThreadId};
use afk_store_rocksdb::{Compression, RocksDbConfig, RocksDbStore};

fn open() -> (tempfile::TempDir, RocksDbStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RocksDbStore::open(dir.path().join("db")).expect("open");
    (dir, store)
}

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).expect("valid thread id")
}

fn r(s: &str) -> RunId {
    RunId::new(s).expect("valid run id")
}

fn commit(
    thread: &str,
    run: &str,
    epoch: Epoch,
    puts: &[(&str, &str)],
    latest: Option<&str>,
) -> Commit {
    Commit {
        thread: t(thread),
        run: r(run),
        epoch,
        puts: puts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect(),
        latest: latest.map(|l| l.as_bytes().to_vec()),
    }
}

async fn get(store: &RocksDbStore, thread: &str, key: &str) -> Option<String> {
    store
        .get(&t(thread), key)
        .await
        .expect("get")
        .map(|v| String::from_utf8(v).expect("utf8 value"))
}

async fn list_all(
    store: &RocksDbStore,
    thread: &str,
    prefix: &str,
    limit: usize,
) -> (Vec<String>, usize) {
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store
            .list(&t(thread), prefix, cursor.as_deref(), limit)
            .await
            .expect("list");
        pages += 1;
        assert!(page.keys.len() <= limit.max(1));
        keys.extend(page.keys);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return (keys, pages),
        }
    }
}

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
    let err = store
        .list(&t("thread_1"), "run:", Some("checkpoint:x"), 10)
        .await
        .expect_err("cursor");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_reopen_and_a_second_open_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let store = RocksDbStore::open(&path).expect("open");
        let err = RocksDbStore::open(&path).expect_err("second open");
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        let lock = path.join("LOCK").display().to_string();
        assert!(err.message().contains(&lock), "{}", err.message());
        assert!(err.message().contains("one process"), "{}", err.message());
        let e = store.claim(&t("th"), &r("r")).await.expect("claim");
        store
            .commit(&commit(
                "th",
                "r",
                e,
                &[("checkpoint:r:0:x", "v")],
                Some("p"),
            ))
            .await
            .expect("commit");
    }
    let store = RocksDbStore::open(&path).expect("reopen after drop");
    assert_eq!(
        get(&store, "th", "checkpoint:r:0:x").await.as_deref(),
        Some("v")
    );
    assert_eq!(
        store.claim(&t("th"), &r("r")).await.expect("claim"),
        Epoch(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_option_opens_and_capabilities_follow_sync() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, compression) in [
        Compression::None,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Zlib,
    ]
    .into_iter()
    .enumerate()
    {
        let url = format!(
            "rocksdb://{}?compression={}&sync={}&block_cache_size=1MiB",
            dir.path().join(format!("db{i}")).display(),
            compression.as_str(),
            i % 2 == 0
        );
        let store = RocksDbStore::from_url(&url).expect(&url);
        assert_eq!(store.config().compression, compression);
        let caps = store.capabilities();
        assert_eq!(caps.name, "rocksdb");
        assert_eq!(caps.durable, i % 2 == 0);
        assert!(!caps.multi_process && caps.batch_commit);
        let e = store.claim(&t("th"), &r("r")).await.expect("claim");
        let big = "x".repeat(1 << 20);
        store
            .commit(&commit(
                "th",
                "r",
                e,
                &[("checkpoint:r:0:x", big.as_str())],
                None,
            ))
            .await
            .expect("commit");
        assert_eq!(
            get(&store, "th", "checkpoint:r:0:x").await.map(|v| v.len()),
            Some(1 << 20)
        );
    }
    let cfg = RocksDbConfig {
        sync: false,
        ..RocksDbConfig::new(dir.path().join("cfg"))
    };
    assert!(
        !RocksDbStore::open_config(cfg)
            .expect("open")
            .capabilities()
            .durable
    );
    let err = RocksDbStore::from_url("rocksdb://relative").expect_err("bad url");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}
