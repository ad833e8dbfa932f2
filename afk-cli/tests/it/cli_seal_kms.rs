//! The console with its key-encryption keys in KMS (`AFK_SEAL_KMS`): with the `kms` feature,
//! the demo's values are sealed under a KMS key of the test server (moto, on
//! `AFK_TEST_S3_ENDPOINT`) and read back; a KMS that cannot be reached fails the command as
//! `unavailable` and writes nothing; without the feature the variable is refused, never
//! ignored.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{afk_env, rocks};

const KEYS: &str = "k1=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// A `kms://` URL for `key` on `endpoint`, with the test server's account and short bounds.
#[cfg(feature = "kms")]
fn kms_url(key: &str, endpoint: &str) -> String {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    format!(
        "kms://{key}?endpoint={endpoint}&region={}&access_key_id={}&secret_access_key={}\
         &max_attempts=1&attempt_timeout_ms=2000",
        var("AFK_TEST_S3_REGION", "us-east-1"),
        var("AFK_TEST_S3_ACCESS_KEY_ID", "test"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY", "test"),
    )
}

/// A new KMS key on the test server (its JSON API over plain HTTP; moto does not check
/// signatures): its key id.
#[cfg(feature = "kms")]
fn create_key(endpoint: &str) -> String {
    use std::io::{Read, Write};
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let body = r#"{"Description":"afk-cli test"}"#;
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {host}\r\nX-Amz-Target: TrentService.CreateKey\r\n\
         Content-Type: application/x-amz-json-1.1\r\nAuthorization: AWS4-HMAC-SHA256 \
         Credential=test/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let json = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    doc["KeyMetadata"]["KeyId"].as_str().unwrap().to_owned()
}

#[cfg(feature = "kms")]
#[test]
fn a_store_sealed_under_a_kms_key_is_read_with_it() {
    let Some(endpoint) = afk_core::testkit::require_env("AFK_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let ring = dir.path().join("keyring");
    let kms = kms_url(&create_key(&endpoint), &endpoint);
    let env = [
        ("AFK_SEAL_KMS", kms.as_str()),
        ("AFK_SEAL_KEYRING", ring.to_str().unwrap()),
    ];
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env);
    assert_eq!(demo.code, Some(0), "{}{}", demo.stdout, demo.stderr);
    let show = [
        "show",
        "--json",
        "--store",
        &url,
        "--thread",
        "afk-demo",
        "--run",
        "demo-order-42",
    ];
    let with = afk_env(dir.path(), &show, &env);
    assert_eq!(with.code, Some(0), "{}", with.stderr);
    let doc: serde_json::Value = serde_json::from_str(&with.stdout).unwrap();
    assert_eq!(doc["state"], "completed", "{doc}");
    // A rotation: another KMS key active, the data key wrapped by the first still opens.
    let other = kms_url(&create_key(&endpoint), &endpoint);
    let env = [
        ("AFK_SEAL_KMS", other.as_str()),
        ("AFK_SEAL_KEYRING", ring.to_str().unwrap()),
    ];
    let fresh = afk_env(dir.path(), &show, &env);
    assert_eq!(
        fresh.code,
        Some(0),
        "old KMS keys still decrypt: {}",
        fresh.stderr
    );
    let without = afk_env(dir.path(), &show, &[]);
    assert_eq!(without.code, Some(1), "{}", without.stdout);
}

/// `afk rekey --all --from-key-file` moves a store's keyring from a key file to a KMS key, and
/// `--from-kms` moves it back to (another) key file: after each move the new source alone
/// opens the store and the old one does not; without the old source named, the move fails
/// and nothing changes.
#[cfg(feature = "kms")]
#[test]
fn rekey_moves_the_keyring_from_a_key_file_to_kms_and_back() {
    const OTHER: &str = "k9=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    let Some(endpoint) = afk_core::testkit::require_env("AFK_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let ring = dir.path().join("keyring");
    let ring = ring.to_str().unwrap();
    let (old_file, new_file) = (dir.path().join("old.keys"), dir.path().join("new.keys"));
    std::fs::write(&old_file, KEYS).unwrap();
    std::fs::write(&new_file, OTHER).unwrap();
    let (old_file, new_file) = (old_file.to_str().unwrap(), new_file.to_str().unwrap());
    let key = create_key(&endpoint);
    let kms = kms_url(&key, &endpoint);
    let from_file = [("AFK_SEAL_KEY_FILE", old_file), ("AFK_SEAL_KEYRING", ring)];
    let to_kms = [("AFK_SEAL_KMS", kms.as_str()), ("AFK_SEAL_KEYRING", ring)];
    let back = [("AFK_SEAL_KEY_FILE", new_file), ("AFK_SEAL_KEYRING", ring)];
    let afk = |args: &[&str], env: &[(&str, &str)]| afk_env(dir.path(), args, env);
    let demo = afk(&["--store", &url, "demo"], &from_file);
    assert_eq!(demo.code, Some(0), "{}{}", demo.stdout, demo.stderr);
    let show = [
        "--store",
        &url,
        "show",
        "--thread",
        "afk-demo",
        "--run",
        "demo-order-42",
    ];
    let rekey = |env: &[(&str, &str)], from: &[&str]| {
        let out = afk(
            &[&["--store", &url, "rekey", "--all", "--json"], from].concat(),
            env,
        );
        (
            out.code,
            serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap(),
        )
    };

    // The old source not named: the thread fails, and the file still opens the store.
    let (code, doc) = rekey(&to_kms, &[]);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(doc["failed"][0]["thread"], "afk-demo", "{doc}");
    assert_eq!(afk(&show, &from_file).code, Some(0));

    let (code, doc) = rekey(&to_kms, &["--from-key-file", old_file]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["threads"][0]["rewrapped"], 1, "{doc}");
    assert!(
        doc["threads"][0]["kek"].as_str().unwrap().contains(&key),
        "{doc}"
    );
    assert_eq!(afk(&show, &to_kms).code, Some(0), "KMS alone opens it");
    assert_eq!(
        afk(&show, &from_file).code,
        Some(1),
        "the old file still opens it"
    );

    let (code, doc) = rekey(&back, &["--from-kms", &kms]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(
        (
            doc["threads"][0]["rewrapped"].clone(),
            doc["threads"][0]["kek"].clone()
        ),
        (1.into(), "k9".into()),
        "{doc}"
    );
    assert_eq!(
        afk(&show, &back).code,
        Some(0),
        "the new file alone opens it"
    );
    assert_eq!(afk(&show, &to_kms).code, Some(1), "KMS still opens it");
}

#[test]
fn an_unreachable_kms_fails_the_command_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let url = rocks(&db);
    let ring = dir.path().join("keyring");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kms = format!(
        "kms://alias/afk?endpoint=http://127.0.0.1:{port}&region=us-east-1&access_key_id=t\
         &secret_access_key=t&max_attempts=1"
    );
    let env = [
        ("AFK_SEAL_KMS", kms.as_str()),
        ("AFK_SEAL_KEYRING", ring.to_str().unwrap()),
    ];
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env);
    assert_eq!(demo.code, Some(1), "{}{}", demo.stdout, demo.stderr);
    let want = if cfg!(feature = "kms") {
        "unavailable"
    } else {
        "--features kms"
    };
    assert!(demo.stderr.contains(want), "{}", demo.stderr);
    if cfg!(feature = "kms") {
        assert!(
            demo.stderr.contains("did not answer: check the endpoint"),
            "{}",
            demo.stderr
        );
    }
    assert!(
        !demo.stderr.contains("secret_access_key=t"),
        "{}",
        demo.stderr
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use afk::store::Store;
        let Ok(raw) = afk::backend::rocksdb::RocksDbStore::open(
            afk::backend::rocksdb::RocksDbConfig::new(&db),
        ) else {
            return; // the demo never opened the store: nothing written
        };
        let thread = afk::ThreadId::new("afk-demo").unwrap();
        let keys = raw.list(&thread, "", None, 1000).await.unwrap().keys;
        assert!(keys.iter().all(|k| k.starts_with("run:")), "{keys:?}");
    });
}

#[test]
fn two_key_sources_at_once_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let env = [
        ("AFK_SEAL_KEYS", KEYS),
        ("AFK_SEAL_KMS", "kms://alias/afk?region=us-east-1"),
        ("AFK_SEAL_KEYRING", "keyring"),
    ];
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env);
    assert_eq!(demo.code, Some(1), "{}{}", demo.stdout, demo.stderr);
    assert!(
        demo.stderr.contains("set one key source"),
        "{}",
        demo.stderr
    );
}
