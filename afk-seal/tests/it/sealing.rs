//! What sealing promises, each checked against the bytes the store underneath holds: no
//! plaintext at rest; a value moved to another key, run or thread, tampered or cut is refused;
//! plaintext is refused unless migrating; erasing a thread's keys leaves its data unreadable
//! everywhere and other threads readable; a key source without the key names the key id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Outcome, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::{Commit, Store, latest_key};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_seal::{DirKeyring, Key, Keyring, MemoryKeyring, Mode, SealedStore, StaticKeys};
use serde_json::json;

const SECRET: &str = "card 4111-1111-1111-1111";

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

fn r(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

fn keys(id: &str, key: &Key) -> Arc<StaticKeys> {
    Arc::new(StaticKeys::new(id, key.clone()).unwrap())
}

fn sealed(
    inner: &Arc<MemoryStore>,
    source: Arc<StaticKeys>,
    ring: Arc<dyn Keyring>,
) -> SealedStore {
    SealedStore::new(inner.clone(), source, ring)
}

/// A real run through the sealed store, whose input, tool arguments and answers hold SECRET.
pub(crate) async fn run_through(store: Arc<dyn Store>, thread: &ThreadId, run: &RunId) {
    let answers: Vec<LlmResponse> = [
        json!({"text": format!("charging {SECRET}"), "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2, "note": SECRET}}]}),
        json!({"text": format!("done with {SECRET}"), "tool_calls": []}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let agent = Agent::new("payer", "Pay.", "m", ScriptedLlm::new(answers))
        .with_tool(ScriptedTool::add(InvocationCounter::new()));
    let out = Runner::new(store, RunnerConfig::default())
        .run_with_id(&agent, thread, run.clone(), format!("pay with {SECRET}"))
        .result()
        .await
        .unwrap();
    let Outcome::Completed(result) = out else {
        panic!("{out:?}")
    };
    assert!(result.final_text.contains(SECRET), "{}", result.final_text);
}

fn commit(
    thread: &ThreadId,
    run: &RunId,
    epoch: afk_core::store::Epoch,
    key: &str,
    v: &[u8],
) -> Commit {
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: vec![(key.to_owned(), v.to_vec())],
        latest: None,
        attention: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_leaves_no_plaintext_at_rest_and_reads_back_whole() {
    let inner = Arc::new(MemoryStore::new());
    let store = Arc::new(sealed(
        &inner,
        keys("k1", &Key::generate()),
        Arc::new(MemoryKeyring::default()),
    ));
    let (thread, run) = (t("t1"), r("r1"));
    run_through(store.clone(), &thread, &run).await;
    let raw = inner.snapshot(&thread);
    assert!(raw.len() > 5, "{raw:?}");
    for (k, v) in &raw {
        assert!(
            !v.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{k} holds the secret in the clear"
        );
        if !k.starts_with("run:") {
            assert!(v.starts_with(b"afk\x01"), "{k} is not sealed");
        }
    }
    // Read back through the seal: the same run, resumable (a terminal run's result).
    let latest = store
        .get(&thread, &latest_key(&run))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&latest).contains(SECRET));
}

#[tokio::test]
async fn a_value_moved_tampered_or_cut_is_corrupt_naming_its_key() {
    let inner = Arc::new(MemoryStore::new());
    let store = sealed(
        &inner,
        keys("k1", &Key::generate()),
        Arc::new(MemoryKeyring::default()),
    );
    let (t1, t2, run, other) = (t("t1"), t("t2"), r("r1"), r("r2"));
    let key = "checkpoint:r1:1:step_started";
    let e = store.claim(&t1, &run).await.unwrap();
    store
        .commit(&commit(&t1, &run, e, key, b"{\"step\":1}"))
        .await
        .unwrap();
    store
        .commit(&commit(
            &t2,
            &run,
            store.claim(&t2, &run).await.unwrap(),
            key,
            b"x",
        ))
        .await
        .unwrap();
    let raw = inner.snapshot(&t1)[key].clone();
    // Copied, as stored, to another key, another run, another thread.
    let e2 = inner.claim(&t1, &other).await.unwrap();
    let places = [
        (t1.clone(), run.clone(), e, "checkpoint:r1:2:step_started"),
        (
            t1.clone(),
            other.clone(),
            e2,
            "checkpoint:r2:1:step_started",
        ),
        (
            t2.clone(),
            run.clone(),
            inner.claim(&t2, &run).await.unwrap(),
            key,
        ),
    ];
    for (thread, run, epoch, to) in places {
        inner
            .commit(&commit(&thread, &run, epoch, to, &raw))
            .await
            .unwrap();
        let err = store.get(&thread, to).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{thread}/{to}: {err}");
        assert_eq!(err.key(), Some(to));
    }
    for bad in [raw[..raw.len() - 1].to_vec(), {
        let mut b = raw.clone();
        let n = b.len();
        b[n - 20] ^= 1;
        b
    }] {
        let e = inner.claim(&t1, &run).await.unwrap();
        inner
            .commit(&commit(&t1, &run, e, key, &bad))
            .await
            .unwrap();
        let err = store.get(&t1, key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    }
}

#[tokio::test]
async fn plaintext_is_refused_unless_migrating_and_decrypt_only_writes_plaintext() {
    let inner = Arc::new(MemoryStore::new());
    let (thread, run) = (t("t"), r("r"));
    let key = "effect:r:1:c1";
    let e = inner.claim(&thread, &run).await.unwrap();
    inner
        .commit(&commit(&thread, &run, e, key, b"{\"plain\":1}"))
        .await
        .unwrap();
    let (source, ring) = (
        keys("k1", &Key::generate()),
        Arc::new(MemoryKeyring::default()),
    );
    let strict = sealed(&inner, source.clone(), ring.clone());
    let err = strict.get(&thread, key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("plaintext"), "{err}");
    let migrating = sealed(&inner, source.clone(), ring.clone()).with_mode(Mode::Migrate);
    assert_eq!(
        migrating.get(&thread, key).await.unwrap().unwrap(),
        b"{\"plain\":1}"
    );
    // A migrating write seals; the strict store reads it.
    migrating
        .commit(&commit(&thread, &run, e, key, b"{\"sealed\":1}"))
        .await
        .unwrap();
    assert!(inner.snapshot(&thread)[key].starts_with(b"afk\x01"));
    assert_eq!(
        strict.get(&thread, key).await.unwrap().unwrap(),
        b"{\"sealed\":1}"
    );
    // Decrypt-only: writes plaintext, still reads sealed values.
    let back = sealed(&inner, source, ring).with_mode(Mode::DecryptOnly);
    assert_eq!(
        back.get(&thread, key).await.unwrap().unwrap(),
        b"{\"sealed\":1}"
    );
    back.commit(&commit(&thread, &run, e, key, b"{\"plain\":2}"))
        .await
        .unwrap();
    assert_eq!(inner.snapshot(&thread)[key], b"{\"plain\":2}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_thread_leaves_its_data_unreadable_everywhere_and_others_readable() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let source = keys("k1", &Key::generate());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let store = Arc::new(sealed(&inner, source.clone(), ring.clone()));
    let (gone, kept, run) = (t("user_a"), t("user_b"), r("r1"));
    run_through(store.clone(), &gone, &run).await;
    run_through(store.clone(), &kept, &run).await;
    // A copy of the data (a backup) taken before the erasure.
    let backup = Arc::new(MemoryStore::new());
    for (thread, keys) in inner.dump() {
        for (k, v) in keys {
            let rr = afk_core::store::run_of_key(&k)
                .map(r)
                .unwrap_or_else(|| run.clone());
            let e = backup.claim(&thread, &rr).await.unwrap();
            if k == latest_key(&rr) {
                let mut c = commit(&thread, &rr, e, "x", b"");
                c.puts.clear();
                c.latest = Some(v);
                backup.commit(&c).await.unwrap();
            } else if !k.starts_with("run:") {
                backup
                    .commit(&commit(&thread, &rr, e, &k, &v))
                    .await
                    .unwrap();
            }
        }
    }
    assert!(store.erase(&gone).await.unwrap());
    assert!(!store.erase(&gone).await.unwrap(), "erased twice");
    let lk = latest_key(&run);
    let err = store.get(&gone, &lk).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(store.get(&kept, &lk).await.unwrap().is_some());
    // Another process, and the backup: the same.
    for data in [inner.clone(), backup.clone()] {
        let other = sealed(&data, source.clone(), ring.clone());
        assert_eq!(
            other.get(&gone, &lk).await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        let v = other.get(&kept, &lk).await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&v).contains(SECRET));
    }
}

/// Unwrapped keys are used for a bounded time: once it has run out, the keyring record is read
/// again, so a thread erased by another process stops this one's reads too, not only at its
/// next claim or restart.
#[tokio::test]
async fn held_keys_expire_so_an_erasure_elsewhere_stops_reads_within_the_time_to_live() {
    use afk_core::runner::ManualClock;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let source = keys("k1", &Key::generate());
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let clock = ManualClock::new(1_000_000);
    let worker = Arc::new(
        sealed(&inner, source.clone(), ring.clone())
            .with_clock(clock.clone())
            .with_key_ttl(Duration::from_secs(60)),
    );
    let (thread, run) = (t("user_a"), r("r1"));
    run_through(worker.clone(), &thread, &run).await;
    let lk = latest_key(&run);
    assert!(worker.get(&thread, &lk).await.unwrap().is_some());

    assert!(sealed(&inner, source, ring).erase(&thread).await.unwrap());
    clock.advance_ms(59_999);
    assert!(
        worker.get(&thread, &lk).await.unwrap().is_some(),
        "held keys are used until their time to live runs out"
    );
    clock.advance_ms(1);
    let err = worker.get(&thread, &lk).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("no data key"), "{err}");
}

#[tokio::test]
async fn a_key_source_without_the_key_names_the_key_id() {
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(MemoryKeyring::default());
    let (thread, run) = (t("t"), r("r"));
    let key = "checkpoint:r:0:run_started";
    let k1 = Key::generate();
    let store = sealed(&inner, keys("k1", &k1), ring.clone());
    let e = store.claim(&thread, &run).await.unwrap();
    store
        .commit(&commit(&thread, &run, e, key, b"v"))
        .await
        .unwrap();
    let err = sealed(&inner, keys("k2", &Key::generate()), ring.clone())
        .get(&thread, key)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("k1"), "{err}");
    // The same id, another key: the wrapped data key does not authenticate.
    let err = sealed(&inner, keys("k1", &Key::generate()), ring.clone())
        .get(&thread, key)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    // Rotation: a new active key, the old one kept, reads the old data.
    let rotated = StaticKeys::new("k2", Key::generate())
        .unwrap()
        .with("k1", k1)
        .unwrap();
    let store = SealedStore::new(inner.clone(), Arc::new(rotated), ring);
    assert_eq!(store.get(&thread, key).await.unwrap().unwrap(), b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_writes_of_a_thread_agree_on_one_data_key() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(MemoryStore::new());
    let source = keys("k1", &Key::generate());
    let (thread, run) = (t("t"), r("r"));
    let e = inner.claim(&thread, &run).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
        let s = sealed(&inner, source.clone(), ring);
        let (thread, run) = (thread.clone(), run.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("messages:r:{i}");
            s.commit(&commit(&thread, &run, e, &key, key.as_bytes()))
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let ring: Arc<dyn Keyring> = Arc::new(DirKeyring::open(dir.path()).unwrap());
    let fresh = sealed(&inner, source, ring);
    for i in 0..8 {
        let key = format!("messages:r:{i}");
        assert_eq!(
            fresh.get(&thread, &key).await.unwrap().unwrap(),
            key.as_bytes()
        );
    }
}

/// The keys held in memory are bounded: with room for two threads, a third pushes the least
/// recently used one out, and every thread's values still open (its record is read again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwrapped_keys_are_kept_for_a_bounded_number_of_threads() {
    let inner = Arc::new(MemoryStore::new());
    let key = Key::generate();
    let ring: Arc<dyn Keyring> = Arc::new(MemoryKeyring::default());
    let store = sealed(&inner, keys("k1", &key), ring).with_key_cache(2);
    assert_eq!(afk_seal::KEY_CACHE, 4096);
    let threads = [t("c1"), t("c2"), t("c3")];
    for (i, thread) in threads.iter().enumerate() {
        let run = r("r1");
        let epoch = store.claim(thread, &run).await.unwrap();
        let value = format!("{SECRET} #{i}");
        store
            .commit(&commit(
                thread,
                &run,
                epoch,
                "effect:r1:1:c",
                value.as_bytes(),
            ))
            .await
            .unwrap();
        assert!(store.cached_threads() <= 2, "after thread {i}");
    }
    assert_eq!(store.cached_threads(), 2);
    for (i, thread) in threads.iter().enumerate() {
        let got = store.get(thread, "effect:r1:1:c").await.unwrap().unwrap();
        assert_eq!(got, format!("{SECRET} #{i}").into_bytes());
    }
    assert_eq!(store.cached_threads(), 2);
}
