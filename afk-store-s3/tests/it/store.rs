//! Store-level behaviour of `S3Store` against a real S3-compatible server.

use crate::common;

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use afk_store_s3::{S3Config, S3Store};

fn ids(thread: &str, run: &str) -> (ThreadId, RunId) {
    (
        ThreadId::new(thread).expect("thread id"),
        RunId::new(run).expect("run id"),
    )
}

fn commit(
    t: &ThreadId,
    r: &RunId,
    epoch: Epoch,
    puts: &[(&str, &[u8])],
    latest: Option<&[u8]>,
) -> Commit {
    Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: puts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
            .collect(),
        latest: latest.map(<[u8]>::to_vec),
        attention: None,
    }
}

#[tokio::test]
async fn commit_then_get_and_list() {
    let Some((store, _)) = common::store("basic").await else {
        return;
    };
    let (t, r) = ids("thread_a", "run_1");
    let e = store.claim(&t, &r).await.unwrap();
    assert_eq!(e, Epoch(1));
    store
        .commit(&commit(
            &t,
            &r,
            e,
            &[
                ("checkpoint:run_1:0:pre_llm", b"one"),
                ("effect:run_1:0:c1", b"two"),
            ],
            Some(b"{\"step\":0}"),
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .get(&t, "checkpoint:run_1:0:pre_llm")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        store.get(&t, "effect:run_1:0:c1").await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    assert_eq!(
        store
            .get(&t, "checkpoint:run_1:latest")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"{\"step\":0}"[..])
    );
    assert_eq!(
        store.get(&t, "run:run_1").await.unwrap().as_deref(),
        Some(&br#"{"epoch":1}"#[..])
    );
    assert_eq!(
        store.get(&t, "checkpoint:run_1:9:missing").await.unwrap(),
        None
    );
    // Keys of no run can never have been written: absent, like in the reference store.
    assert_eq!(store.get(&t, "other:thing").await.unwrap(), None);
    let page = store.list(&t, "", None, 100).await.unwrap();
    assert_eq!(
        page.keys,
        [
            "checkpoint:run_1:0:pre_llm",
            "checkpoint:run_1:latest",
            "effect:run_1:0:c1",
            "run:run_1"
        ]
    );
    assert_eq!(page.next_cursor, None);
    let many = store
        .get_many(
            &t,
            &[
                "effect:run_1:0:c1".into(),
                "x:y".into(),
                "checkpoint:run_2:latest".into(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(many, vec![Some(b"two".to_vec()), None, None]);
    // Another thread sees nothing.
    let other = ThreadId::new("thread_b").unwrap();
    assert_eq!(
        store.get(&other, "checkpoint:run_1:latest").await.unwrap(),
        None
    );
    assert!(
        store
            .list(&other, "", None, 10)
            .await
            .unwrap()
            .keys
            .is_empty()
    );
}

#[tokio::test]
async fn stale_and_unclaimed_commits_are_fenced_and_write_nothing() {
    let Some((store, cfg)) = common::store("fence").await else {
        return;
    };
    let (t, r) = ids("t", "run_f");
    let err = store
        .commit(&commit(
            &t,
            &r,
            Epoch(1),
            &[("checkpoint:run_f:0:x", b"v")],
            None,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let e1 = store.claim(&t, &r).await.unwrap();
    let e2 = store.claim(&t, &r).await.unwrap();
    assert!(e2 > e1);
    let err = store
        .commit(&commit(
            &t,
            &r,
            e1,
            &[("checkpoint:run_f:0:x", b"v")],
            Some(b"p"),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(store.get(&t, "checkpoint:run_f:0:x").await.unwrap(), None);
    assert_eq!(
        store.get(&t, "checkpoint:run_f:latest").await.unwrap(),
        None
    );
    // The fenced commit's objects were removed: only the head is left.
    let raw = common::raw_client(&cfg).await;
    let objs = common::objects(&raw, &cfg.bucket, "afk/test/t/run_f/").await;
    assert_eq!(objs, ["afk/test/t/run_f/head"]);
    // Keys of another run, or the fence itself, are refused before anything is written.
    let err = store
        .commit(&commit(&t, &r, e2, &[("checkpoint:other:0:x", b"v")], None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = store
        .commit(&commit(&t, &r, e2, &[("run:run_f", b"v")], None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn overwritten_keys_keep_one_object_and_latest_of_any_size_round_trips() {
    let Some((store, cfg)) = common::store("overwrite").await else {
        return;
    };
    let (t, r) = ids("t", "run_o");
    let e = store.claim(&t, &r).await.unwrap();
    let big_latest: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    for round in 0..3u8 {
        let value = vec![round; 100];
        store
            .commit(&commit(
                &t,
                &r,
                e,
                &[("checkpoint:run_o:1:runtime_state", &value)],
                Some(&big_latest),
            ))
            .await
            .unwrap();
        assert_eq!(
            store
                .get(&t, "checkpoint:run_o:1:runtime_state")
                .await
                .unwrap(),
            Some(value)
        );
    }
    assert_eq!(
        store.get(&t, "checkpoint:run_o:latest").await.unwrap(),
        Some(big_latest)
    );
    // Superseded versions were deleted: head + one object per live key (the latest is an
    // object here: 10 KB, not UTF-8).
    let raw = common::raw_client(&cfg).await;
    let objs = common::objects(&raw, &cfg.bucket, "afk/test/t/run_o/").await;
    assert_eq!(objs.len(), 3, "{objs:?}");
    let head = common::raw_head(&raw, &cfg, "t", "run_o").await;
    assert_eq!(head["seq"], 4, "{head}");
    assert_eq!(head["epoch"], 1);
}

#[tokio::test]
async fn list_sorts_paginates_and_filters_across_runs() {
    let Some((store, _)) = common::store("list").await else {
        return;
    };
    let t = ThreadId::new("t").unwrap();
    let mut expected = Vec::new();
    for run in ["run_1", "run_10", "run_2"] {
        let r = RunId::new(run).unwrap();
        let e = store.claim(&t, &r).await.unwrap();
        let keys: Vec<String> = (0..7).map(|i| format!("messages:{run}:{i:020}")).collect();
        let puts: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), &b"m"[..])).collect();
        store.commit(&commit(&t, &r, e, &puts, None)).await.unwrap();
        expected.extend(keys);
        expected.push(format!("run:{run}"));
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(&t, "", cursor.as_deref(), 4).await.unwrap();
        assert!(page.keys.len() <= 4);
        seen.extend(page.keys);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    let only_1 = store.list(&t, "messages:run_1:", None, 100).await.unwrap();
    assert_eq!(only_1.keys.len(), 7);
    assert!(only_1.keys.iter().all(|k| k.starts_with("messages:run_1:")));
    let prefix_1 = store.list(&t, "messages:run_1", None, 100).await.unwrap();
    assert_eq!(prefix_1.keys.len(), 14, "run_1 and run_10 both match");
    assert_eq!(
        store.list(&t, "run:", None, 100).await.unwrap().keys,
        ["run:run_1", "run:run_10", "run:run_2"]
    );
}

#[tokio::test]
async fn delete_keys_fence_and_runs() {
    let Some((store, cfg)) = common::store("delete").await else {
        return;
    };
    let t = ThreadId::new("t").unwrap();
    let (r1, r10) = (RunId::new("run_1").unwrap(), RunId::new("run_10").unwrap());
    for r in [&r1, &r10] {
        let e = store.claim(&t, r).await.unwrap();
        let k = format!("checkpoint:{r}:0:a");
        store
            .commit(&commit(&t, r, e, &[(k.as_str(), b"a")], Some(b"l")))
            .await
            .unwrap();
    }
    store
        .delete(&t, &["checkpoint:run_1:0:a".into(), "nope:x".into()])
        .await
        .unwrap();
    assert_eq!(store.get(&t, "checkpoint:run_1:0:a").await.unwrap(), None);
    assert_eq!(
        store
            .get(&t, "checkpoint:run_1:latest")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"l"[..])
    );
    // Deleting the fence un-claims the run: commits are fenced, the next claim starts at 1.
    store.delete(&t, &["run:run_1".into()]).await.unwrap();
    assert_eq!(store.get(&t, "run:run_1").await.unwrap(), None);
    let err = store
        .commit(&commit(
            &t,
            &r1,
            Epoch(1),
            &[("checkpoint:run_1:1:a", b"a")],
            None,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(store.claim(&t, &r1).await.unwrap(), Epoch(1));
    // delete_run counts logical keys (latest + fence here) and removes every object.
    assert_eq!(store.delete_run(&t, &r1).await.unwrap(), 2);
    let raw = common::raw_client(&cfg).await;
    assert!(
        common::objects(&raw, &cfg.bucket, "afk/test/t/run_1/")
            .await
            .is_empty()
    );
    assert_eq!(store.delete_run(&t, &r1).await.unwrap(), 0);
    // run_10 is untouched.
    assert_eq!(
        store
            .get(&t, "checkpoint:run_10:0:a")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(store.delete_run(&t, &r10).await.unwrap(), 3);
    assert!(store.list(&t, "", None, 10).await.unwrap().keys.is_empty());
}

#[tokio::test]
async fn a_missing_bucket_is_a_clear_error_naming_it() {
    let Some(cfg) = common::config("", "nobucket") else {
        return;
    };
    let cfg = cfg.with_create_bucket(false);
    let err = S3Store::open(cfg.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains(&cfg.bucket), "{err}");
    let secret = cfg.secret_access_key.as_ref().unwrap().expose().to_owned();
    assert!(secret.len() < 5 || !err.to_string().contains(&secret));
}

#[tokio::test]
async fn capabilities_say_s3_durable_multi_process() {
    let Some((store, _)) = common::store("caps").await else {
        return;
    };
    let caps = store.capabilities();
    assert_eq!(caps.name, "s3");
    assert!(caps.durable && caps.multi_process && !caps.ttl);
    assert_eq!(caps.max_value_size, Some(afk_store_s3::MAX_VALUE_SIZE));
    assert!(store.conditional_writes());
    let _unused: Option<S3Config> = None;
}

/// `claim_if_new` decides from the run's head alone: a fresh run costs one head read and one
/// head write (not the pointer's read first), a run with a pointer one head read and no write,
/// and the refusal leaves the epoch in use able to commit.
#[tokio::test]
async fn claim_if_new_reads_the_head_once() {
    let Some((store, _)) = common::store("if-new").await else {
        return;
    };
    let (t, r) = ids("thread_n", "run_n");
    let before = store.traffic();
    let e = store.claim_if_new(&t, &r).await.unwrap();
    let after = store.traffic();
    assert_eq!(e, Some(Epoch(1)));
    assert_eq!(
        (after.gets - before.gets, after.puts - before.puts),
        (1, 1),
        "fresh run: {before:?} -> {after:?}"
    );
    assert_eq!(after.head_puts - before.head_puts, 1);
    let c = commit(&t, &r, Epoch(1), &[], Some(b"p0"));
    store.commit(&c).await.unwrap();
    let before = store.traffic();
    assert_eq!(store.claim_if_new(&t, &r).await.unwrap(), None);
    let after = store.traffic();
    assert_eq!(
        (after.gets - before.gets, after.puts - before.puts),
        (1, 0),
        "run with a pointer: {before:?} -> {after:?}"
    );
    let c = commit(
        &t,
        &r,
        Epoch(1),
        &[("checkpoint:run_n:1:x", b"1")],
        Some(b"p1"),
    );
    store.commit(&c).await.expect("the refusal fenced nothing");
}
