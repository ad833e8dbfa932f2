//! What sealing does per claim and per commit: a claim keeps a thread's unwrapped keys while
//! its keyring record is unchanged (no unwrap, with KMS no `Decrypt`, per run) and loads them
//! again after a rotation; the owned commit path seals in place and hands a refused commit
//! back as it was given.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use afk_core::store::{Commit, Store, latest_key};
use afk_core::{ErrorKind, MemoryStore, Result, RunId, ThreadId};
use afk_seal::format::parse;
use afk_seal::{Key, KeySource, Keyring, MemoryKeyring, RekeyOptions, SealedStore, StaticKeys};
use async_trait::async_trait;

use crate::sealing::run_through;

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

fn r(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

/// A key source that counts its unwraps (each would be a KMS `Decrypt`).
#[derive(Debug)]
struct Counting {
    keys: StaticKeys,
    unwraps: AtomicU64,
}

#[async_trait]
impl KeySource for Counting {
    fn active(&self) -> &str {
        self.keys.active()
    }
    async fn wrap(&self, thread: &ThreadId, dek_id: &str, dek: &Key) -> Result<Vec<u8>> {
        self.keys.wrap(thread, dek_id, dek).await
    }
    async fn unwrap(&self, thread: &ThreadId, dek_id: &str, wrapped: &[u8]) -> Result<Key> {
        self.unwraps.fetch_add(1, Ordering::Relaxed);
        self.keys.unwrap(thread, dek_id, wrapped).await
    }
}

/// The data key id the run's latest pointer is sealed with, as stored.
fn sealed_with(inner: &MemoryStore, thread: &ThreadId, run: &RunId) -> String {
    let key = latest_key(run);
    let raw = inner.snapshot(thread).remove(&key).unwrap();
    parse(&raw, &key).unwrap().key_id.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_keeps_the_keys_of_an_unchanged_record_and_reloads_a_rotated_one() {
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(MemoryKeyring::default());
    let kek = Key::generate();
    let source = Arc::new(Counting {
        keys: StaticKeys::new("k1", kek.clone()).unwrap(),
        unwraps: AtomicU64::new(0),
    });
    let store = Arc::new(SealedStore::new(
        inner.clone(),
        source.clone(),
        ring.clone(),
    ));
    let thread = t("t1");
    for run in ["r1", "r2", "r3"] {
        run_through(store.clone(), &thread, &r(run)).await;
    }
    assert_eq!(
        source.unwraps.load(Ordering::Relaxed),
        1,
        "each claim unwrapped the unchanged keyring record again"
    );
    // Another process rotates the thread to a new data key.
    let other = SealedStore::new(
        inner.clone(),
        Arc::new(StaticKeys::new("k1", kek).unwrap()),
        ring.clone(),
    );
    let opts = RekeyOptions {
        new_data_key: true,
        ..RekeyOptions::default()
    };
    let report = other.rekey(&thread, &opts).await.unwrap();
    assert_eq!(report.retired, ["d1"], "{report:?}");
    run_through(store.clone(), &thread, &r("r4")).await;
    assert_eq!(
        sealed_with(&inner, &thread, &r("r4")),
        "d2",
        "a claim after the rotation still sealed with the retired data key"
    );
    assert_eq!(source.unwraps.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_refused_owned_commit_comes_back_as_it_was_given() {
    let inner = Arc::new(MemoryStore::new());
    let store = SealedStore::new(
        inner.clone(),
        Arc::new(StaticKeys::new("k1", Key::generate()).unwrap()),
        Arc::new(MemoryKeyring::default()),
    );
    let (thread, run) = (t("t1"), r("r1"));
    let epoch = store.claim(&thread, &run).await.unwrap();
    let commit = |epoch| Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: vec![
            (
                "checkpoint:r1:1:step_started".to_owned(),
                b"{\"a\":1}".to_vec(),
            ),
            ("effect:r1:1:c1".to_owned(), b"{\"b\":2}".to_vec()),
        ],
        latest: Some(b"{\"a\":1}".to_vec()),
        attention: None,
    };
    store.commit_owned(commit(epoch)).await.unwrap();
    let raw = inner.snapshot(&thread);
    assert!(raw["effect:r1:1:c1"].starts_with(b"afk\x01"), "not sealed");
    assert_eq!(
        store.get(&thread, "effect:r1:1:c1").await.unwrap().unwrap(),
        b"{\"b\":2}"
    );
    // A newer claim fences the old epoch off: the commit comes back in plaintext, whole.
    store.claim(&thread, &run).await.unwrap();
    let refused = store.commit_owned(commit(epoch)).await.unwrap_err();
    assert_eq!(refused.error.kind(), ErrorKind::Fenced);
    assert!(
        *refused.commit == commit(epoch),
        "the refused commit came back changed"
    );
}
