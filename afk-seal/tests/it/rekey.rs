//! Key rotation ([`SealedStore::rekey`]), each promise checked against the bytes the store
//! underneath holds: after a rotation the old key-encryption key can go; a new data key
//! re-seals every value and the old one opens nothing any more; other threads are untouched;
//! a run held by a live owner is skipped and the old data key kept until it is done.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::runner::ManualClock;
use afk_core::schema::{MarkState, RunMark};
use afk_core::store::{Attention, Call, Commit, HookStore, Hooks, Store, StoreExt};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_seal::format::parse;
use afk_seal::{DirKeyring, Key, Keyring, RekeyOptions, SealedStore, StaticKeys};

use crate::sealing::run_through;

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

fn r(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

/// Every value of a thread, opened through `store` (fences aside).
async fn plain(store: &SealedStore, thread: &ThreadId) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for k in store.list_all(thread, "").await.unwrap() {
        if !k.starts_with("run:") {
            out.insert(k.clone(), store.get(thread, &k).await.unwrap().unwrap());
        }
    }
    out
}

/// The data key id each stored value of a thread names (fences aside).
fn key_ids(inner: &MemoryStore, thread: &ThreadId) -> BTreeMap<String, String> {
    inner
        .snapshot(thread)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("run:"))
        .map(|(k, v)| {
            let id = parse(&v, &k).unwrap().key_id.to_owned();
            (k, id)
        })
        .collect()
}

fn new_data_key() -> RekeyOptions {
    RekeyOptions {
        new_data_key: true,
        ..RekeyOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rekey_the_old_key_encryption_key_can_go() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let (k1, k2) = (Key::generate(), Key::generate());
    let old = Arc::new(StaticKeys::new("k1", k1.clone()).unwrap());
    let store = Arc::new(SealedStore::new(inner.clone(), old, ring.clone()));
    let (a, b, run) = (t("a"), t("b"), r("r1"));
    run_through(store.clone(), &a, &run).await;
    run_through(store.clone(), &b, &run).await;
    let before = (plain(&store, &a).await, plain(&store, &b).await);

    let both = StaticKeys::new("k2", k2.clone()).unwrap().with("k1", k1);
    let rotated = SealedStore::new(inner.clone(), Arc::new(both.unwrap()), ring.clone());
    let report = rotated.rekey(&a, &RekeyOptions::default()).await.unwrap();
    assert_eq!(
        (report.rewrapped, report.kek.as_str()),
        (1, "k2"),
        "{report:?}"
    );
    assert!(report.finished() && report.resealed == 0, "{report:?}");
    let again = rotated.rekey(&a, &RekeyOptions::default()).await.unwrap();
    assert_eq!(again.rewrapped, 0, "{again:?}");

    // Only k2 left: thread a opens whole, thread b (not rekeyed) names k1.
    let only = Arc::new(StaticKeys::new("k2", k2).unwrap());
    let after = SealedStore::new(inner.clone(), only, ring);
    assert_eq!(plain(&after, &a).await, before.0);
    let err = after.get(&b, "checkpoint:r1:latest").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("k1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_data_key_reseals_every_value_and_the_old_one_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let store = Arc::new(SealedStore::new(
        inner.clone(),
        source.clone(),
        ring.clone(),
    ));
    let (a, b) = (t("a"), t("b"));
    for run in ["r1", "r2"] {
        run_through(store.clone(), &a, &r(run)).await;
    }
    run_through(store.clone(), &b, &r("r1")).await;
    let before = plain(&store, &a).await;
    let raw_a = inner.snapshot(&a);
    let raw_b = inner.snapshot(&b);
    assert!(key_ids(&inner, &a).values().all(|id| id == "d1"));

    let report = store.rekey(&a, &new_data_key()).await.unwrap();
    assert!(report.created && report.finished(), "{report:?}");
    assert_eq!(report.data_key, "d2");
    assert_eq!(report.resealed as usize, before.len(), "{report:?}");
    assert_eq!(report.retired, ["d1"]);
    let ids = key_ids(&inner, &a);
    assert!(ids.values().all(|id| id == "d2"), "{ids:?}");
    assert_eq!(plain(&store, &a).await, before);
    // Another process (a fresh store) reads the same.
    let fresh = SealedStore::new(inner.clone(), source.clone(), ring.clone());
    assert_eq!(plain(&fresh, &a).await, before);
    // Thread b untouched, byte for byte.
    assert_eq!(inner.snapshot(&b), raw_b);

    // A value sealed with the old data key (a backup's copy) opens no more.
    let (k, old) = raw_a
        .iter()
        .find(|(k, _)| k.starts_with("messages:r1:"))
        .unwrap();
    let copy = Arc::new(MemoryStore::new());
    let e = copy.claim(&a, &r("r1")).await.unwrap();
    copy.commit(&Commit {
        thread: a.clone(),
        run: r("r1"),
        epoch: e,
        puts: vec![(k.clone(), old.clone())],
        latest: None,
        attention: None,
    })
    .await
    .unwrap();
    let err = SealedStore::new(copy, source, ring)
        .get(&a, k)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("d1"), "{err}");

    // Run again: nothing to do; a second rotation makes d3.
    let again = store.rekey(&a, &RekeyOptions::default()).await.unwrap();
    assert_eq!((again.resealed, again.created), (0, false), "{again:?}");
    let third = store.rekey(&a, &new_data_key()).await.unwrap();
    assert_eq!(
        (third.data_key.as_str(), third.retired.clone()),
        ("d3", vec!["d2".into()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_held_by_a_live_owner_is_skipped_and_the_old_data_key_kept() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let store = Arc::new(SealedStore::new(inner.clone(), source, ring));
    let (a, done, held) = (t("a"), r("done"), r("held"));
    run_through(store.clone(), &a, &done).await;
    // A run a live owner holds: its lease runs until 10 s.
    let epoch = store.claim(&a, &held).await.unwrap();
    let mut mark = RunMark::new(MarkState::Running);
    (mark.owner, mark.lease_until_ms, mark.epoch) = (Some("w1".into()), 10_000, epoch.0);
    store
        .commit(&Commit {
            thread: a.clone(),
            run: held.clone(),
            epoch,
            puts: vec![("messages:held:0".into(), b"{}".to_vec())],
            latest: None,
            attention: Some(Attention::Open(mark.encode())),
        })
        .await
        .unwrap();
    let clock = ManualClock::new(1_000);
    let opts = RekeyOptions {
        clock: clock.clone(),
        ..new_data_key()
    };
    let report = store.rekey(&a, &opts).await.unwrap();
    assert!(!report.finished(), "{report:?}");
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].run, "held");
    assert_eq!(report.skipped[0].owner.as_deref(), Some("w1"));
    assert_eq!(report.pending, ["d1"]);
    // The held run was not claimed: its owner's epoch still commits.
    let c = Commit {
        thread: a.clone(),
        run: held.clone(),
        epoch,
        puts: vec![("messages:held:1".into(), b"{}".to_vec())],
        latest: None,
        attention: None,
    };
    store.commit(&c).await.unwrap();
    assert_eq!(key_ids(&inner, &a)["messages:held:0"], "d1");
    // Once the lease has expired (plus the skew), a rerun finishes the rotation.
    clock.set_ms(16_000);
    let report = store.rekey(&a, &opts).await.unwrap();
    assert!(report.finished() && !report.created, "{report:?}");
    assert_eq!(report.retired, ["d1"]);
    assert!(key_ids(&inner, &a).values().all(|id| id == "d2"));
    // The index entry moved to the rekey's epoch, so a worker can still take the run over.
    let entry = inner.attention(&a, &held).await.unwrap().unwrap();
    assert!(RunMark::decode(&entry).unwrap().epoch > epoch.0);
}

#[tokio::test]
async fn replacing_a_record_is_a_compare_and_swap_that_never_brings_back_an_erased_one() {
    let dir = tempfile::tempdir().unwrap();
    let memory: Arc<dyn Keyring> = Arc::new(afk_seal::MemoryKeyring::default());
    let on_disk: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    for ring in [memory, on_disk] {
        let a = t("a");
        assert_eq!(ring.create(&a, b"one").await.unwrap(), b"one");
        assert!(!ring.replace(&a, b"other", b"two").await.unwrap());
        assert!(ring.replace(&a, b"one", b"two").await.unwrap());
        assert_eq!(ring.load(&a).await.unwrap().unwrap(), b"two");
        assert!(ring.erase(&a).await.unwrap());
        assert!(!ring.replace(&a, b"two", b"three").await.unwrap());
        assert_eq!(ring.load(&a).await.unwrap(), None, "{ring:?}");
    }
}

#[tokio::test]
async fn a_run_whose_entry_is_older_than_its_last_claim_is_still_resealed() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let store = SealedStore::new(inner.clone(), source, ring);
    let (a, run) = (t("a"), r("r"));
    let epoch = store.claim(&a, &run).await.unwrap();
    let mut mark = RunMark::new(MarkState::Ready);
    mark.epoch = epoch.0;
    let c = Commit {
        thread: a.clone(),
        run: run.clone(),
        epoch,
        puts: vec![("messages:r:0".into(), b"{}".to_vec())],
        latest: None,
        attention: Some(Attention::Open(mark.encode())),
    };
    store.commit(&c).await.unwrap();
    // Claimed again by a tool that writes no entry (as `afk migrate` does).
    store.claim(&a, &run).await.unwrap();
    let report = store.rekey(&a, &new_data_key()).await.unwrap();
    assert!(report.finished(), "{report:?}");
    assert_eq!(
        (report.resealed, report.retired.clone()),
        (1, vec!["d1".into()])
    );
    assert_eq!(key_ids(&inner, &a)["messages:r:0"], "d2");
}

/// Writes, once the re-seal pass has committed and the verification pass starts listing, the
/// value a process that still holds the old data key in memory would write.
#[derive(Debug)]
struct LateWriter {
    inner: Arc<MemoryStore>,
    late: (String, Vec<u8>),
    committed: std::sync::atomic::AtomicBool,
    written: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Hooks for LateWriter {
    type Note = ();
    async fn before(&self, call: Call<'_>) -> afk_core::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        match call {
            Call::Commit(_) => self.committed.store(true, SeqCst),
            Call::List {
                thread, prefix: "", ..
            } if self.committed.load(SeqCst) && !self.written.swap(true, SeqCst) => {
                let run = r("r1");
                let epoch = self.inner.claim(thread, &run).await?;
                let c = Commit {
                    thread: thread.clone(),
                    run,
                    epoch,
                    puts: vec![self.late.clone()],
                    latest: None,
                    attention: None,
                };
                self.inner.commit(&c).await?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The old data key is retired only after a pass that opens every value of the thread with
/// the new one: a value sealed with the old key after the re-seal pass (a process that still
/// held it in memory) keeps it in the record, so that value still opens.
#[tokio::test]
async fn a_value_sealed_with_the_old_key_meanwhile_holds_the_old_data_key_back() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let plain_store = SealedStore::new(inner.clone(), source.clone(), ring.clone());
    let (a, run) = (t("a"), r("r1"));
    let epoch = plain_store.claim(&a, &run).await.unwrap();
    let c = Commit {
        thread: a.clone(),
        run: run.clone(),
        epoch,
        puts: vec![("messages:r1:0".into(), b"zero".to_vec())],
        latest: None,
        attention: None,
    };
    plain_store.commit(&c).await.unwrap();
    let old = inner.snapshot(&a)["messages:r1:0"].clone();
    let hooks = LateWriter {
        inner: inner.clone(),
        late: ("messages:r1:0".into(), old),
        committed: Default::default(),
        written: Default::default(),
    };
    let hooked = Arc::new(HookStore::new(inner.clone() as Arc<dyn Store>, hooks));
    let store = SealedStore::new(hooked, source, ring);
    let report = store.rekey(&a, &new_data_key()).await.unwrap();
    assert_eq!(
        (report.resealed, report.pending.clone()),
        (1, vec!["d1".into()]),
        "{report:?}"
    );
    assert!(!report.finished());
    assert_eq!(key_ids(&inner, &a)["messages:r1:0"], "d1");
    assert_eq!(
        store.get(&a, "messages:r1:0").await.unwrap().unwrap(),
        b"zero"
    );
    // A rerun re-seals it and retires the old key.
    let report = store.rekey(&a, &new_data_key()).await.unwrap();
    assert!(report.finished() && report.retired == ["d1"], "{report:?}");
}

/// `rekey_all` goes on past a thread that fails: the threads before and after it are rotated,
/// and the failing one is reported with its own typed error.
#[tokio::test]
async fn rekey_all_goes_past_a_failing_thread_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let store = Arc::new(SealedStore::new(inner.clone(), source, ring.clone()));
    let (a, b, c) = (t("a"), t("b"), t("c"));
    for thread in [&a, &b, &c] {
        run_through(store.clone(), thread, &r("r1")).await;
    }
    let record = ring.load(&b).await.unwrap().unwrap();
    assert!(ring.replace(&b, &record, b"{not a record").await.unwrap());

    let all = store.rekey_all(&new_data_key()).await.unwrap();
    let done: Vec<&str> = all.threads.iter().map(|r| r.thread.as_str()).collect();
    assert_eq!(done, ["a", "c"], "{all:?}");
    assert!(
        all.threads
            .iter()
            .all(|r| r.finished() && r.retired == ["d1"])
    );
    assert_eq!(all.failed.len(), 1, "{all:?}");
    assert_eq!(all.failed[0].thread, b);
    assert_eq!(all.failed[0].error.kind(), ErrorKind::Corrupt, "{all:?}");
    assert!(
        all.failed[0].error.message().contains("thread b"),
        "{all:?}"
    );
    assert!(!all.finished());
    assert_eq!(key_ids(&inner, &c).values().next().unwrap(), "d2");
}
