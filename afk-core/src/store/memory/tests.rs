//! Unit tests of the reference store. The full contract is checked by `afk-conformance`, which
//! runs its whole suite against `MemoryStore`; these cover what is specific to it.

use super::*;
use crate::error::ErrorKind;

fn ids() -> (ThreadId, RunId) {
    (ThreadId::new("t1").unwrap(), RunId::new("run_1").unwrap())
}

fn commit(thread: &ThreadId, run: &RunId, epoch: Epoch, puts: &[(&str, &[u8])]) -> Commit {
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: puts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        latest: Some(b"ptr".to_vec()),
        attention: None,
    }
}

#[tokio::test]
async fn fence_is_a_visible_json_key() {
    let (t, r) = ids();
    let store = MemoryStore::new();
    assert_eq!(store.claim(&t, &r).await.unwrap(), Epoch(1));
    assert_eq!(store.claim(&t, &r).await.unwrap(), Epoch(2));
    let fence = store.get(&t, "run:run_1").await.unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&fence).unwrap();
    assert_eq!(v, serde_json::json!({"epoch": 2}));
    assert_eq!(
        store.list(&t, "", None, 10).await.unwrap().keys,
        vec!["run:run_1"]
    );
}

#[tokio::test]
async fn commit_applies_puts_and_pointer_and_copies_values() {
    let (t, r) = ids();
    let store = MemoryStore::new();
    let e = store.claim(&t, &r).await.unwrap();
    let mut c = commit(&t, &r, e, &[("checkpoint:run_1:0:pre_llm", b"rec")]);
    store.commit(&c).await.unwrap();
    c.puts[0].1[0] = b'X'; // mutating the caller's buffer does not reach the store
    let snap = store.snapshot(&t);
    assert_eq!(snap.get("checkpoint:run_1:0:pre_llm").unwrap(), b"rec");
    assert_eq!(snap.get("checkpoint:run_1:latest").unwrap(), b"ptr");
    assert_eq!(store.len(), 3);
}

#[tokio::test]
async fn unclaimed_stale_and_invalid_commits_write_nothing() {
    let (t, r) = ids();
    let store = MemoryStore::new();
    let c = commit(&t, &r, Epoch(0), &[("checkpoint:run_1:0:pre_llm", b"rec")]);
    assert_eq!(
        store.commit(&c).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert!(store.is_empty());

    let e1 = store.claim(&t, &r).await.unwrap();
    let e2 = store.claim(&t, &r).await.unwrap();
    let c = commit(&t, &r, e1, &[("checkpoint:run_1:0:pre_llm", b"rec")]);
    assert_eq!(
        store.commit(&c).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );

    for bad in [
        "checkpoint:run_2:0:x",
        "checkpoint:run_1:latest",
        "run:run_1",
        "a b",
        "",
    ] {
        let c = commit(&t, &r, e2, &[("checkpoint:run_1:1:ok", b"v"), (bad, b"v")]);
        let err = store.commit(&c).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}: {err}");
    }
    let dup = commit(
        &t,
        &r,
        e2,
        &[("effect:run_1:1:c", b"a"), ("effect:run_1:1:c", b"b")],
    );
    assert_eq!(
        store.commit(&dup).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        store.snapshot(&t).keys().collect::<Vec<_>>(),
        vec!["run:run_1"]
    );
}

#[tokio::test]
async fn corrupt_fence_is_reported_not_overwritten() {
    let (t, r) = ids();
    let store = MemoryStore::new();
    store.claim(&t, &r).await.unwrap();
    store
        .lock()
        .get_mut(&t)
        .unwrap()
        .insert("run:run_1".into(), b"garbage".to_vec());
    let err = store.claim(&t, &r).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert_eq!(err.key(), Some("run:run_1"));
    let c = commit(&t, &r, Epoch(1), &[]);
    assert_eq!(
        store.commit(&c).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

#[tokio::test]
async fn list_pages_follow_the_cursor_and_prefix() {
    let (t, r) = ids();
    let store = MemoryStore::new();
    let e = store.claim(&t, &r).await.unwrap();
    let puts: Vec<(String, Vec<u8>)> = (0..25)
        .map(|i| (format!("messages:run_1:{i:05}"), vec![i as u8]))
        .collect();
    store
        .commit(&Commit {
            thread: t.clone(),
            run: r.clone(),
            epoch: e,
            puts,
            latest: None,
            attention: None,
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(&t, "messages:", cursor.as_deref(), 10)
            .await
            .unwrap();
        assert!(page.keys.len() <= 10);
        seen.extend(page.keys);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let want: Vec<String> = (0..25).map(|i| format!("messages:run_1:{i:05}")).collect();
    assert_eq!(seen, want);
    // A cursor before the prefix starts at the prefix; limit 0 is clamped to 1.
    let page = store
        .list(&t, "messages:", Some("checkpoint:zzz"), 0)
        .await
        .unwrap();
    assert_eq!(page.keys, vec!["messages:run_1:00000"]);
    assert!(store.list(&t, "bad prefix", None, 10).await.is_err());
}

#[tokio::test]
async fn delete_run_leaves_prefix_sharing_runs() {
    let t = ThreadId::new("t1").unwrap();
    let store = MemoryStore::new();
    for run in ["run_1", "run_10"] {
        let r = RunId::new(run).unwrap();
        let e = store.claim(&t, &r).await.unwrap();
        let key = format!("checkpoint:{run}:0:pre_llm");
        store
            .commit(&commit(&t, &r, e, &[(&key, b"x")]))
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .delete_run(&t, &RunId::new("run_1").unwrap())
            .await
            .unwrap(),
        3
    );
    let left: Vec<String> = store.snapshot(&t).into_keys().collect();
    assert_eq!(
        left,
        vec![
            "checkpoint:run_10:0:pre_llm",
            "checkpoint:run_10:latest",
            "run:run_10"
        ]
    );
    assert_eq!(
        store
            .delete_run(&t, &RunId::new("run_10").unwrap())
            .await
            .unwrap(),
        3
    );
    assert!(store.dump().is_empty());
}
