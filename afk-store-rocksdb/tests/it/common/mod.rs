//! Helpers shared by the store-level tests.
#![allow(dead_code)] // each test file uses a different subset

use afk_core::{
    RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

pub fn open() -> (tempfile::TempDir, RocksDbStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RocksDbStore::open(RocksDbConfig::new(dir.path().join("db"))).expect("open");
    (dir, store)
}

pub fn t(s: &str) -> ThreadId {
    ThreadId::new(s).expect("valid thread id")
}

pub fn r(s: &str) -> RunId {
    RunId::new(s).expect("valid run id")
}

pub fn commit(
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
        attention: None,
    }
}

pub async fn get(store: &RocksDbStore, thread: &str, key: &str) -> Option<String> {
    store
        .get(&t(thread), key)
        .await
        .expect("get")
        .map(|v| String::from_utf8(v).expect("utf8 value"))
}

pub async fn list_all(
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
