//! `KmsKeys` against a KMS service: the moto server the S3 tests use (`AFK_TEST_S3_ENDPOINT`,
//! which serves KMS on the same endpoint), skipped without it unless
//! `AFK_REQUIRE_INTEGRATION=1`. Each test creates its own KMS keys. Checked against the bytes
//! the store underneath holds: values sealed through KMS-wrapped data keys open after a
//! restart and after a rotation; a missing, disabled or deleted key is `InvalidConfig` naming
//! it; a service that is down is `Unavailable` in bounded time, and nothing is written or read
//! in plaintext meanwhile.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use afk_core::store::{Commit, Store, StoreExt};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_seal::{KeySource, Keyring, KmsConfig, KmsKeys, MemoryKeyring, SealedStore};
use aws_sdk_kms::Client;
use aws_sdk_kms::config::{Credentials, Region};

const SECRET: &str = "card 4111-1111-1111-1111";

/// Longest any KMS call of these tests may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

/// The test server's endpoint, or `None` (test skipped) when `AFK_TEST_S3_ENDPOINT` is unset.
fn server() -> Option<String> {
    afk_conformance::require_env("AFK_TEST_S3_ENDPOINT")
}

/// Region, access key id and secret of the test server.
fn account() -> (String, String, String) {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    (
        var("AFK_TEST_S3_REGION", "us-east-1"),
        var("AFK_TEST_S3_ACCESS_KEY_ID", "test"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY", "test"),
    )
}

/// The source's configuration for `key` on `endpoint` (the test server's when empty) in
/// `region` (the server's when empty), with short bounds.
fn config(key: &str, endpoint: &str, region: &str) -> KmsConfig {
    let (default_region, id, secret) = account();
    let mut cfg = KmsConfig::new(key);
    cfg.endpoint = Some(match endpoint {
        "" => server().expect("server"),
        e => e.to_owned(),
    });
    cfg.region = Some(match region {
        "" => default_region,
        r => r.to_owned(),
    });
    cfg.access_key_id = Some(id);
    cfg.secret_access_key = Some(afk_core::config::Secret::new(secret));
    cfg.connect_timeout_ms = Some(1_000);
    cfg.attempt_timeout_ms = Some(2_000);
    cfg.operation_timeout_ms = Some(5_000);
    cfg.max_attempts = Some(2);
    cfg
}

/// A raw KMS client for the test server, to create and change keys.
async fn admin(region: &str) -> Client {
    let (default_region, id, secret) = account();
    let region = if region.is_empty() {
        default_region
    } else {
        region.into()
    };
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(Region::new(region))
        .endpoint_url(server().expect("server"))
        .credentials_provider(Credentials::new(id, secret, None, None, "test"))
        .load()
        .await;
    Client::new(&sdk)
}

/// A new symmetric KMS key: its key id and ARN.
async fn create_key(kms: &Client) -> (String, String) {
    let out = kms
        .create_key()
        .description("afk-seal test")
        .send()
        .await
        .unwrap();
    let meta = out.key_metadata().unwrap();
    (meta.key_id().to_owned(), meta.arn().unwrap().to_owned())
}

async fn connect(cfg: KmsConfig) -> afk_core::Result<KmsKeys> {
    tokio::time::timeout(HANG, KmsKeys::connect(cfg))
        .await
        .expect("connect hung")
}

/// A sealed store over `inner` and `ring` whose data keys KMS key `key` wraps.
async fn sealed_by(key: &str, inner: &Arc<MemoryStore>, ring: &Arc<MemoryKeyring>) -> SealedStore {
    let kms = Arc::new(connect(config(key, "", "")).await.unwrap());
    SealedStore::new(inner.clone(), kms, ring.clone())
}

/// A commit of one checkpoint value holding SECRET.
fn commit(thread: &ThreadId, run: &str, epoch: afk_core::store::Epoch) -> Commit {
    Commit {
        thread: thread.clone(),
        run: RunId::new(run).unwrap(),
        epoch,
        puts: vec![(
            format!("checkpoint:{run}:1:pre_llm"),
            SECRET.as_bytes().to_vec(),
        )],
        latest: Some(format!("{{\"note\":\"{SECRET}\"}}").into_bytes()),
        attention: None,
    }
}

/// Write SECRET to `thread` through `store`.
async fn write(store: &SealedStore, thread: &ThreadId) -> afk_core::Result<()> {
    let run = RunId::new("r1").unwrap();
    let epoch = store.claim(thread, &run).await?;
    tokio::time::timeout(HANG, store.commit(&commit(thread, "r1", epoch)))
        .await
        .expect("commit hung")
}

/// The value SECRET was written to, read through `store`.
async fn read(store: &SealedStore, thread: &ThreadId) -> afk_core::Result<Option<Vec<u8>>> {
    tokio::time::timeout(HANG, store.get(thread, "checkpoint:r1:1:pre_llm"))
        .await
        .expect("get hung")
}

/// No byte sequence of SECRET anywhere in what `inner` holds for `thread`.
async fn assert_no_plaintext(inner: &MemoryStore, thread: &ThreadId) {
    for key in inner.list_all(thread, "").await.unwrap() {
        if let Some(v) = inner.get(thread, &key).await.unwrap() {
            assert!(
                !v.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{key} holds the plaintext"
            );
        }
    }
}

#[tokio::test]
async fn kms_wrapped_keys_seal_values_that_open_after_a_restart() {
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let (key_id, arn) = create_key(&kms).await;
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let source = Arc::new(connect(config(&key_id, "", "")).await.unwrap());
    assert_eq!(source.active(), arn, "the active key is named by its ARN");
    let store = SealedStore::new(inner.clone(), source, ring.clone());
    let thread = t("kms-basic");
    write(&store, &thread).await.unwrap();
    assert_no_plaintext(&inner, &thread).await;
    let record = String::from_utf8(ring.load(&thread).await.unwrap().unwrap()).unwrap();
    assert!(
        record.contains(&hex_of(&arn)),
        "the wrapped key names its KMS key: {record}"
    );
    // A new process: nothing cached, the data key comes back through KMS Decrypt.
    let source = Arc::new(connect(config(&key_id, "", "")).await.unwrap());
    let again = SealedStore::new(inner.clone(), source, ring);
    assert_eq!(
        read(&again, &thread).await.unwrap().unwrap(),
        SECRET.as_bytes()
    );
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn after_a_rotation_values_wrapped_by_the_old_kms_key_still_open() {
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let ((old, old_arn), (new, new_arn)) = (create_key(&kms).await, create_key(&kms).await);
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let before = sealed_by(&old, &inner, &ring).await;
    write(&before, &t("old")).await.unwrap();
    // The new key by its alias, as an operator would rotate.
    kms.create_alias()
        .alias_name("alias/afk-rotated-".to_owned() + &new)
        .target_key_id(&new)
        .send()
        .await
        .unwrap();
    let alias = format!("alias/afk-rotated-{new}");
    let after = sealed_by(&alias, &inner, &ring).await;
    write(&after, &t("new")).await.unwrap();
    for (thread, arn) in [("old", &old_arn), ("new", &new_arn)] {
        let record = String::from_utf8(ring.load(&t(thread)).await.unwrap().unwrap()).unwrap();
        assert!(record.contains(&hex_of(arn)), "{thread}: {record}");
        assert_eq!(
            read(&after, &t(thread)).await.unwrap().unwrap(),
            SECRET.as_bytes()
        );
        assert_no_plaintext(&inner, &t(thread)).await;
    }
    // A fresh process with only the new key configured reads both.
    let fresh = sealed_by(&alias, &inner, &ring).await;
    for thread in ["old", "new"] {
        assert_eq!(
            read(&fresh, &t(thread)).await.unwrap().unwrap(),
            SECRET.as_bytes()
        );
    }
}

/// `InvalidConfig`, naming `key`.
fn assert_names(e: &afk_core::Error, key: &str) {
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains(key), "{key} not named: {e}");
}

#[tokio::test]
async fn a_missing_disabled_or_deleted_kms_key_is_invalid_config_naming_it() {
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let missing = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-4000-8000-000000000000";
    assert_names(
        &connect(config(missing, "", "")).await.unwrap_err(),
        missing,
    );
    assert_names(
        &connect(config("alias/afk-none", "", "")).await.unwrap_err(),
        "alias/afk-none",
    );
    let (disabled, _) = create_key(&kms).await;
    kms.disable_key().key_id(&disabled).send().await.unwrap();
    assert_names(
        &connect(config(&disabled, "", "")).await.unwrap_err(),
        &disabled,
    );
    let (doomed, _) = create_key(&kms).await;
    kms.schedule_key_deletion()
        .key_id(&doomed)
        .pending_window_in_days(7)
        .send()
        .await
        .unwrap();
    assert_names(
        &connect(config(&doomed, "", "")).await.unwrap_err(),
        &doomed,
    );

    // A data key whose KMS key no longer exists for these credentials: the same service in
    // another region does not have it.
    let (gone, gone_arn) = create_key(&kms).await;
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let store = sealed_by(&gone, &inner, &ring).await;
    write(&store, &t("gone")).await.unwrap();
    let elsewhere = admin("eu-west-3").await;
    let (other, _) = create_key(&elsewhere).await;
    let source = Arc::new(connect(config(&other, "", "eu-west-3")).await.unwrap());
    let e = source
        .unwrap(&t("gone"), "d1", &wrapped(&ring, "gone").await)
        .await
        .unwrap_err();
    assert_names(&e, &gone_arn);
    let reader = SealedStore::new(inner, source, ring);
    assert_names(&read(&reader, &t("gone")).await.unwrap_err(), &gone_arn);
}

/// The wrapped data key `d1` of `thread`, from its keyring record.
async fn wrapped(ring: &MemoryKeyring, thread: &str) -> Vec<u8> {
    let record: serde_json::Value =
        serde_json::from_slice(&ring.load(&t(thread)).await.unwrap().unwrap()).unwrap();
    hex::decode(record["keys"]["d1"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn a_wrapped_key_moved_to_another_thread_or_data_key_does_not_unwrap() {
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let (key, _) = create_key(&kms).await;
    let source = connect(config(&key, "", "")).await.unwrap();
    let dek = afk_seal::Key::generate();
    let w = source.wrap(&t("a"), "d1", &dek).await.unwrap();
    assert_eq!(
        source.unwrap(&t("a"), "d1", &w).await.unwrap().to_hex(),
        dek.to_hex()
    );
    for (thread, id) in [("b", "d1"), ("a", "d2")] {
        let e = source.unwrap(&t(thread), id, &w).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{thread} {id}: {e}");
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_kms_that_refuses_or_never_answers_is_unavailable_not_a_hang() {
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let e = connect(config("alias/any", &refused, ""))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    // Accepts connections, never answers: the attempt timeout ends each try.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let mut cfg = config("alias/any", &endpoint, "");
    cfg.attempt_timeout_ms = Some(300);
    let e = connect(cfg).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    held.abort();
}

/// A TCP forwarder to the test server that can be taken down: connections refused and the
/// open ones cut.
struct Proxy {
    endpoint: String,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(target: &str) -> Proxy {
        let target = target.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let spawned = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                spawned.lock().unwrap().push(conn.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Proxy { endpoint, tasks }
    }

    fn down(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

#[tokio::test]
async fn while_kms_is_down_nothing_is_written_or_read_in_plaintext() {
    let Some(endpoint) = server() else {
        return;
    };
    let kms = admin("").await;
    let (key, _) = create_key(&kms).await;
    let proxy = Proxy::start(&endpoint).await;
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let source = Arc::new(connect(config(&key, &proxy.endpoint, "")).await.unwrap());
    let store = SealedStore::new(inner.clone(), source.clone(), ring.clone());
    write(&store, &t("before")).await.unwrap();
    proxy.down();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // A new thread needs a new data key wrapped: refused, and nothing reaches the store.
    let e = write(&store, &t("during")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        inner
            .list_all(&t("during"), "checkpoint:")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(ring.load(&t("during")).await.unwrap().is_none());
    // A process that has not unwrapped the thread's key yet cannot read it, and does not
    // hand back the stored bytes instead.
    let fresh = SealedStore::new(inner.clone(), source, ring);
    let e = read(&fresh, &t("before")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_no_plaintext(&inner, &t("before")).await;
}

/// A process holding a thread's unwrapped keys asks KMS again once their time to live has run
/// out: with KMS refusing (here unreachable, as it refuses a revoked or disabled key), reads
/// stop then, with `Unavailable`, and no stored bytes are handed back instead.
#[tokio::test]
async fn held_keys_expire_so_kms_is_asked_again_within_the_time_to_live() {
    use afk_core::runner::ManualClock;
    let Some(endpoint) = server() else {
        return;
    };
    let kms = admin("").await;
    let (key, _) = create_key(&kms).await;
    let proxy = Proxy::start(&endpoint).await;
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let source = Arc::new(connect(config(&key, &proxy.endpoint, "")).await.unwrap());
    let clock = ManualClock::new(1_000_000);
    let store = SealedStore::new(inner.clone(), source, ring)
        .with_clock(clock.clone())
        .with_key_ttl(Duration::from_secs(300));
    write(&store, &t("a")).await.unwrap();
    proxy.down();
    tokio::time::sleep(Duration::from_millis(50)).await;

    clock.advance_ms(299_000);
    let held = read(&store, &t("a")).await.unwrap().unwrap();
    assert_eq!(held, SECRET.as_bytes(), "within the time to live");
    clock.advance_ms(1_000);
    let e = read(&store, &t("a")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_no_plaintext(&inner, &t("a")).await;
}

/// `rekey` after a rotation wraps the data keys again with the new KMS key: the old key can
/// then be disabled and everything still opens.
#[tokio::test]
async fn after_a_rekey_the_old_kms_key_can_be_disabled() {
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let ((old, old_arn), (new, new_arn)) = (create_key(&kms).await, create_key(&kms).await);
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let before = sealed_by(&old, &inner, &ring).await;
    write(&before, &t("a")).await.unwrap();
    let after = sealed_by(&new, &inner, &ring).await;
    let report = after
        .rekey(&t("a"), &afk_seal::RekeyOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (report.rewrapped, report.kek.as_str()),
        (1, new_arn.as_str())
    );
    let record = String::from_utf8(ring.load(&t("a")).await.unwrap().unwrap()).unwrap();
    assert!(record.contains(&hex_of(&new_arn)), "{record}");
    assert!(!record.contains(&hex_of(&old_arn)), "{record}");
    kms.disable_key().key_id(&old).send().await.unwrap();
    let fresh = sealed_by(&new, &inner, &ring).await;
    assert_eq!(
        read(&fresh, &t("a")).await.unwrap().unwrap(),
        SECRET.as_bytes()
    );
}

/// The wrapped data keys of the thread's keyring record, as stored.
async fn wrapped_keys(ring: &MemoryKeyring, thread: &str) -> Vec<Vec<u8>> {
    let record = ring.load(&t(thread)).await.unwrap().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&record).unwrap();
    doc["keys"]
        .as_object()
        .unwrap()
        .values()
        .map(|w| hex::decode(w.as_str().unwrap()).unwrap())
        .collect()
}

/// A keyring moved from configured keys to KMS with `KeySources` and a rekey, then back:
/// after each move the new source alone opens everything and the old one nothing.
#[tokio::test]
async fn a_keyring_moves_from_configured_keys_to_kms_and_back() {
    use afk_seal::{Key, KeySources, RekeyOptions, StaticKeys};
    if server().is_none() {
        return;
    }
    let kms = admin("").await;
    let (key, arn) = create_key(&kms).await;
    let kms_keys: Arc<dyn KeySource> = Arc::new(connect(config(&key, "", "")).await.unwrap());
    let configured: Arc<dyn KeySource> = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let inner = Arc::new(MemoryStore::new());
    let ring = Arc::new(MemoryKeyring::default());
    let sealed = |source: Arc<dyn KeySource>| SealedStore::new(inner.clone(), source, ring.clone());
    write(&sealed(configured.clone()), &t("a")).await.unwrap();
    assert!(
        wrapped_keys(&ring, "a")
            .await
            .iter()
            .all(|w| w.starts_with(b"afk\x01"))
    );

    // To KMS: wrapped again by KMS; KMS alone opens it, the configured keys no longer do.
    let moving = Arc::new(KeySources::new(kms_keys.clone(), vec![configured.clone()]));
    let report = sealed(moving)
        .rekey(&t("a"), &RekeyOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (report.rewrapped, report.kek.as_str()),
        (1, arn.as_str()),
        "{report:?}"
    );
    assert!(
        wrapped_keys(&ring, "a")
            .await
            .iter()
            .all(|w| w.starts_with(b"afk-kms\x01"))
    );
    let read_kms = read(&sealed(kms_keys.clone()), &t("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read_kms, SECRET.as_bytes());
    let e = read(&sealed(configured.clone()), &t("a"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");

    // And back to (new) configured keys.
    let back: Arc<dyn KeySource> = Arc::new(StaticKeys::new("k2", Key::generate()).unwrap());
    let moving = Arc::new(KeySources::new(back.clone(), vec![kms_keys.clone()]));
    let report = sealed(moving)
        .rekey(&t("a"), &RekeyOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (report.rewrapped, report.kek.as_str()),
        (1, "k2"),
        "{report:?}"
    );
    assert!(
        wrapped_keys(&ring, "a")
            .await
            .iter()
            .all(|w| w.starts_with(b"afk\x01"))
    );
    assert_eq!(
        read(&sealed(back), &t("a")).await.unwrap().unwrap(),
        SECRET.as_bytes()
    );
    assert_no_plaintext(&inner, &t("a")).await;
}
