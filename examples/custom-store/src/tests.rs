//! What the conformance suite cannot see: the file. Reopening keeps every acknowledged change
//! and the epochs; a torn last append is cut off; damage in the middle is `Corrupt`.

use std::io::Write;

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Store},
};

use super::LogStore;

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t1").expect("literal thread id"),
        RunId::new("run_1").expect("literal run id"),
    )
}

fn commit(thread: &ThreadId, run: &RunId, epoch: afk_core::store::Epoch, v: &[u8]) -> Commit {
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: vec![(format!("checkpoint:{run}:1:pre_llm"), v.to_vec())],
        latest: Some(v.to_vec()),
        attention: None,
    }
}

#[tokio::test]
async fn reopening_keeps_changes_and_epochs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let (t, r) = ids();
    let e1 = {
        let store = LogStore::open(&path).expect("open");
        let e1 = store.claim(&t, &r).await.expect("claim");
        store
            .commit(&commit(&t, &r, e1, b"one"))
            .await
            .expect("commit");
        e1
    };
    let store = LogStore::open(&path).expect("reopen");
    let latest = format!("checkpoint:{r}:latest");
    assert_eq!(
        store.get(&t, &latest).await.expect("get"),
        Some(b"one".to_vec())
    );
    let e2 = store.claim(&t, &r).await.expect("claim again");
    assert!(
        e2 > e1,
        "epochs must keep growing across reopen: {e1} then {e2}"
    );
    let stale = store.commit(&commit(&t, &r, e1, b"stale")).await;
    assert_eq!(stale.map_err(|e| e.kind()), Err(ErrorKind::Fenced));
}

#[tokio::test]
async fn a_torn_last_append_is_cut_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let (t, r) = ids();
    let full_len = {
        let store = LogStore::open(&path).expect("open");
        let e = store.claim(&t, &r).await.expect("claim");
        store
            .commit(&commit(&t, &r, e, b"one"))
            .await
            .expect("commit 1");
        let before = std::fs::metadata(&path).expect("stat").len();
        store
            .commit(&commit(&t, &r, e, b"two"))
            .await
            .expect("commit 2");
        let after = std::fs::metadata(&path).expect("stat").len();
        // Simulate a crash in the middle of the second append.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open file");
        file.set_len(before + (after - before) / 2)
            .expect("truncate");
        before
    };
    let store = LogStore::open(&path).expect("reopen after a torn append");
    let latest = format!("checkpoint:{r}:latest");
    assert_eq!(
        store.get(&t, &latest).await.expect("get"),
        Some(b"one".to_vec())
    );
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), full_len);
}

#[tokio::test]
async fn damage_before_the_end_is_corrupt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let (t, r) = ids();
    {
        let store = LogStore::open(&path).expect("open");
        let e = store.claim(&t, &r).await.expect("claim");
        store
            .commit(&commit(&t, &r, e, b"one"))
            .await
            .expect("commit");
    }
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[20] ^= 0xff; // inside the first entry's payload
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&bytes))
        .expect("rewrite");
    let err = LogStore::open(&path).expect_err("a damaged first entry must not open");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
}
