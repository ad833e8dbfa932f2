//! Keyed effect hashes in a sealed store: a stored `input_hash`/`output_hash` is not the plain
//! SHA-256 of the call (so it confirms no guessed argument), differs between threads for the
//! same argument, and still matches on resume, after a rotation to a new data key, for rows
//! written before hashes were keyed, and while encryption is rolled back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use afk_core::hash::{EffectHashes, input_hash, output_hash};
use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{
    Agent, EffectPolicy, ManualClock, Outcome, Runner, RunnerConfig, rehash_effect_rows,
};
use afk_core::schema::{EffectRow, LlmResponse};
use afk_core::store::{Commit, CrashMode, FaultStore, Store, StoreExt, latest_key};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_seal::{Key, Keyring, MemoryKeyring, Mode, RekeyOptions, SealedStore, StaticKeys};
use serde_json::{Value, json};

const CARD: &str = "4111111111111111";

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

fn r(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

fn args() -> Value {
    json!({"card": CARD, "amount": 5})
}

/// Arms a crash of the store the current process writes through, right after the charge
/// ran: its result row is the last commit that lands.
#[derive(Debug, Default)]
struct Kill(Mutex<Option<Arc<FaultStore>>>);

/// A one-call agent: `charge` (at most once) with [`args`], then the answer. With `kill`
/// armed, the process goes down after the charge's result row is durable.
fn agent(counter: &InvocationCounter, kill: Arc<Kill>) -> Agent {
    let answers: Vec<LlmResponse> = [
        json!({"text": "charging", "tool_calls": [
            {"id": "c1", "tool_name": "charge", "arguments": args()}]}),
        json!({"text": "charged", "tool_calls": []}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let charge = ScriptedTool::new(
        "charge",
        EffectPolicy::AtMostOnce,
        counter.clone(),
        move |_| {
            if let Some(f) = kill.0.lock().unwrap().take() {
                f.crash_after_commits(f.persisted_commits() + 1, CrashMode::Down);
            }
            Ok(json!({"charged": 5}))
        },
    );
    Agent::new("payer", "Pay.", "m", ScriptedLlm::new(answers)).with_tool(charge)
}

/// A memory store, a keyring and a key-encryption key: what each test opens its sealed store
/// over, once per process it plays (nothing held in memory across them).
struct Setup {
    inner: Arc<MemoryStore>,
    ring: Arc<MemoryKeyring>,
    kek: Key,
}

impl Setup {
    fn new() -> Self {
        Setup {
            inner: Arc::new(MemoryStore::new()),
            ring: Arc::new(MemoryKeyring::default()),
            kek: Key::generate(),
        }
    }

    /// The sealed store, as a new process opens it.
    fn open(&self) -> Arc<SealedStore> {
        self.open_in(Mode::Sealed)
    }

    /// [`Setup::open`] in `mode`.
    fn open_in(&self, mode: Mode) -> Arc<SealedStore> {
        let source = Arc::new(StaticKeys::new("k1", self.kek.clone()).unwrap());
        let ring = self.ring.clone() as Arc<dyn Keyring>;
        Arc::new(SealedStore::new(self.inner.clone(), source, ring).with_mode(mode))
    }
}

async fn complete(store: Arc<dyn Store>, thread: &ThreadId, run: &RunId) -> InvocationCounter {
    let counter = InvocationCounter::new();
    let out = Runner::new(store, RunnerConfig::default())
        .run_with_id(&agent(&counter, Arc::default()), thread, run.clone(), "pay")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    counter
}

/// The charge's effect row, read through `store`.
async fn row(store: &dyn Store, thread: &ThreadId, run: &RunId) -> EffectRow {
    let key = afk_core::keys::effect_key(run, 1, "c1").unwrap();
    let bytes = store
        .get(thread, &key)
        .await
        .unwrap()
        .expect("the effect row");
    serde_json::from_slice(&bytes).unwrap()
}

/// A run whose process went down right after the charge's result row landed: the row is
/// durable, the step after it is not.
async fn crash_after_the_charge(
    store: Arc<dyn Store>,
    thread: &ThreadId,
    run: &RunId,
) -> InvocationCounter {
    let counter = InvocationCounter::new();
    let fault = Arc::new(FaultStore::from_arc(store));
    let kill = Arc::new(Kill(Mutex::new(Some(fault.clone()))));
    // Each commit written as it is made: the result row is a commit of its own.
    let mut config = RunnerConfig::default();
    config.checkpoint.async_writes = false;
    let out = Runner::new(fault, config)
        .run_with_id(&agent(&counter, kill), thread, run.clone(), "pay")
        .result()
        .await;
    assert!(out.is_err(), "the process should have gone down: {out:?}");
    assert_eq!(counter.get("c1"), 1);
    counter
}

/// Resume `run` to its end through `store`; the charge must not run again.
async fn resume_without_charging(store: Arc<dyn Store>, thread: &ThreadId, run: &RunId) {
    let counter = InvocationCounter::new();
    let out = Runner::new(store, RunnerConfig::default())
        .resume(&agent(&counter, Arc::default()), thread, run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(result) = out else {
        panic!("{out:?}")
    };
    assert_eq!(result.final_text, "charged");
    assert_eq!(counter.get("c1"), 0, "the charge ran again on resume");
}

#[tokio::test]
async fn a_sealed_stores_hashes_are_keyed_and_differ_by_thread() {
    let store = Setup::new().open();
    let (a, b, run) = (t("ta"), t("tb"), r("r1"));
    complete(store.clone(), &a, &run).await;
    complete(store.clone(), &b, &run).await;
    let (ra, rb) = (row(&*store, &a, &run).await, row(&*store, &b, &run).await);
    let plain_in = input_hash("charge", &args());
    let plain_out = output_hash(&json!({"charged": 5}));
    for row in [&ra, &rb] {
        assert_ne!(
            row.input_hash, plain_in,
            "input_hash is SHA-256 of the argument"
        );
        assert_ne!(row.output_hash.as_deref(), Some(plain_out.as_str()));
        assert_eq!(row.input_hash.len(), 64);
    }
    assert_ne!(ra.input_hash, rb.input_hash, "two threads, one hash");
    assert_ne!(ra.output_hash, rb.output_hash);
    // The same thread keeps its key: what it stores is what it computes.
    let hashes = store.effect_hashes(&a).await.unwrap();
    assert!(hashes.is_keyed());
    assert_eq!(hashes.input_hash("charge", &args()), ra.input_hash);
    // A plain store keeps AFK's plain SHA-256.
    let plain = Arc::new(MemoryStore::new());
    complete(plain.clone(), &a, &run).await;
    assert_eq!(row(&*plain, &a, &run).await.input_hash, plain_in);
}

#[tokio::test]
async fn a_resume_in_a_sealed_store_does_not_run_an_effect_twice() {
    let s = Setup::new();
    let (thread, run) = (t("t1"), r("r1"));
    crash_after_the_charge(s.open(), &thread, &run).await;
    // A new process, a new `SealedStore` (nothing held in memory): it finds the keyed row.
    let store = s.open();
    assert_ne!(
        row(&*store, &thread, &run).await.input_hash,
        input_hash("charge", &args())
    );
    resume_without_charging(store, &thread, &run).await;
}

#[tokio::test]
async fn hashes_keep_matching_after_a_rotation_to_a_new_data_key() {
    let s = Setup::new();
    let (thread, run) = (t("t1"), r("r1"));
    crash_after_the_charge(s.open(), &thread, &run).await;
    let store = s.open();
    let before = row(&*store, &thread, &run).await.input_hash;
    // The crashed process's lease has long run out by this clock.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let opts = RekeyOptions {
        new_data_key: true,
        clock: ManualClock::new(now + 3_600_000),
        ..RekeyOptions::default()
    };
    let report = store.rekey(&thread, &opts).await.unwrap();
    assert!(report.finished(), "{report:?}");
    assert_eq!(report.retired, ["d1"]);
    let store = s.open();
    assert_eq!(
        store
            .effect_hashes(&thread)
            .await
            .unwrap()
            .input_hash("charge", &args()),
        before,
        "the rotation changed the thread's hash key"
    );
    resume_without_charging(store, &thread, &run).await;
}

#[tokio::test]
async fn erasing_a_thread_destroys_its_hash_key() {
    let s = Setup::new();
    let (thread, run) = (t("t1"), r("r1"));
    let store = s.open();
    complete(store.clone(), &thread, &run).await;
    let before = row(&*store, &thread, &run).await.input_hash;
    assert!(store.erase(&thread).await.unwrap());
    // A thread of the same id starts afresh: a new hash key, so the old hashes are no one's.
    let again = s.open().effect_hashes(&thread).await.unwrap();
    assert_ne!(again.input_hash("charge", &args()), before);
}

#[tokio::test]
async fn rows_written_before_hashes_were_keyed_still_match() {
    // A run begun on a plain store, moved to encryption (migration mode) mid-run.
    let s = Setup::new();
    let (thread, run) = (t("t1"), r("r1"));
    crash_after_the_charge(s.inner.clone(), &thread, &run).await;
    let store = s.open_in(Mode::Migrate);
    assert!(store.effect_hashes(&thread).await.unwrap().is_keyed());
    assert_eq!(
        row(&*store, &thread, &run).await.input_hash,
        input_hash("charge", &args())
    );
    resume_without_charging(store, &thread, &run).await;
}

#[tokio::test]
async fn rolling_encryption_back_writes_plain_hashes_and_reads_keyed_ones() {
    let s = Setup::new();
    let (thread, run) = (t("t1"), r("r1"));
    crash_after_the_charge(s.open(), &thread, &run).await;
    let store = s.open_in(Mode::DecryptOnly);
    let hashes = store.effect_hashes(&thread).await.unwrap();
    assert!(!hashes.is_keyed());
    assert_eq!(
        hashes.input_hash("charge", &args()),
        input_hash("charge", &args())
    );
    resume_without_charging(store.clone(), &thread, &run).await;
    // A thread that never had keys: plain, and no keyring record made for it.
    assert!(!store.effect_hashes(&t("t2")).await.unwrap().is_keyed());
    assert!(s.ring.load(&t("t2")).await.unwrap().is_none());
}

#[tokio::test]
async fn a_record_without_a_hash_key_gets_one_that_stays() {
    let s = Setup::new();
    let thread = t("t1");
    let store = s.open();
    store.effect_hashes(&thread).await.unwrap();
    // The record as it was written before hashes were keyed: no hash key.
    let bytes = s.ring.load(&thread).await.unwrap().unwrap();
    let mut record: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(record["hash"].is_string(), "{record}");
    record.as_object_mut().unwrap().remove("hash");
    let old = serde_json::to_vec(&record).unwrap();
    assert!(s.ring.replace(&thread, &bytes, &old).await.unwrap());
    let first = s.open().effect_hashes(&thread).await.unwrap();
    assert!(first.is_keyed());
    let record: Value =
        serde_json::from_slice(&s.ring.load(&thread).await.unwrap().unwrap()).unwrap();
    assert!(record["hash"].is_string(), "no hash key added: {record}");
    let again = s.open().effect_hashes(&thread).await.unwrap();
    assert_eq!(
        first.input_hash("charge", &args()),
        again.input_hash("charge", &args())
    );
}

/// Every value of `thread` opened through `store`, fences aside: what a re-sealing export
/// holds.
async fn opened(store: &dyn Store, thread: &ThreadId) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for key in store.list_all(thread, "").await.unwrap() {
        if !key.starts_with("run:") {
            let value = store.get(thread, &key).await.unwrap().unwrap();
            out.push((key, value));
        }
    }
    out
}

/// Write `values` as run `run` of `thread` under a claim of `store`, as an import does.
async fn write_run(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    values: &[(String, Vec<u8>)],
) {
    let epoch = store.claim(thread, run).await.unwrap();
    let lk = latest_key(run);
    let commit = Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: values.iter().filter(|(k, _)| *k != lk).cloned().collect(),
        latest: values
            .iter()
            .find(|(k, _)| *k == lk)
            .map(|(_, v)| v.clone()),
        attention: None,
    };
    store.commit(&commit).await.unwrap();
}

/// A run stopped after its charge, its values opened and moved to a thread with another hash
/// key (a re-sealing export and import): copied as they are, the charge's row matches no call
/// there and the resume fails as an integrity conflict; re-hashed through the plain form, the
/// run resumes without charging again. A row that matched no call at the source still
/// matches none: the move does not launder a conflict.
#[tokio::test]
async fn a_run_moved_to_another_hash_key_resumes_once_its_rows_are_rehashed() {
    let (thread, run) = (t("t1"), r("r1"));
    let src = Setup::new();
    crash_after_the_charge(src.open(), &thread, &run).await;
    let source = src.open();
    let values = opened(&*source, &thread).await;
    let row_key = afk_core::keys::effect_key(&run, 1, "c1").unwrap();
    let plain = EffectHashes::plain();

    let as_they_are = Setup::new().open();
    write_run(&*as_they_are, &thread, &run, &values).await;
    let counter = InvocationCounter::new();
    let e = Runner::new(as_they_are, RunnerConfig::default())
        .resume(&agent(&counter, Arc::default()), &thread, &run)
        .result()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert!(e.to_string().contains("integrity conflict"), "{e}");
    assert_eq!(counter.get("c1"), 0);

    let mut moved = values.clone();
    let from = source.effect_hashes(&thread).await.unwrap();
    let out = rehash_effect_rows(&thread, &mut moved, &from, &plain);
    assert_eq!(out.rehashed, 1, "{out:?}");
    let target = Setup::new().open();
    let to = target.effect_hashes(&thread).await.unwrap();
    assert_eq!(
        rehash_effect_rows(&thread, &mut moved, &plain, &to).rehashed,
        1
    );
    write_run(&*target, &thread, &run, &moved).await;
    assert_eq!(
        row(&*target, &thread, &run).await.input_hash,
        to.input_hash("charge", &args())
    );
    resume_without_charging(target, &thread, &run).await;

    // A row whose hash is not its call's stays as it is.
    let mut conflicting = values;
    let (_, bytes) = conflicting.iter_mut().find(|(k, _)| *k == row_key).unwrap();
    let mut doc: Value = serde_json::from_slice(bytes).unwrap();
    doc["input_hash"] = Value::String("0".repeat(64));
    *bytes = serde_json::to_vec(&doc).unwrap();
    let before = conflicting.clone();
    let out = rehash_effect_rows(&thread, &mut conflicting, &from, &plain);
    assert_eq!((out.rehashed, out.kept), (0, 1), "{out:?}");
    assert_eq!(conflicting, before);
}
