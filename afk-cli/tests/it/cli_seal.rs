//! The console on a store sealed at rest (`AFK_SEAL_KEYS`, `AFK_SEAL_KEYRING`): the demo's
//! values are sealed in the database, the commands read them given the keys and fail without
//! them, and `afk erase` leaves a thread unreadable.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use afk::backend::rocksdb::{RocksDbConfig, RocksDbStore};
use afk::store::Store;
use common::{afk_env, afk_in, rocks};
use serde_json::Value;

const KEYS: &str = "k1=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

#[test]
fn a_sealed_store_is_read_with_its_keys_and_erase_makes_a_thread_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let url = rocks(&db);
    let ring = dir.path().join("keyring");
    let ring = ring.to_str().unwrap();
    let env = [("AFK_SEAL_KEYS", KEYS), ("AFK_SEAL_KEYRING", ring)];
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env);
    assert_eq!(demo.code, Some(0), "{}{}", demo.stdout, demo.stderr);

    // At rest: every value but the fences is sealed.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let raw = RocksDbStore::open(RocksDbConfig::new(&db)).unwrap();
        let thread = afk::ThreadId::new("afk-demo").unwrap();
        let keys = raw.list(&thread, "", None, 1000).await.unwrap().keys;
        assert!(keys.len() > 5, "{keys:?}");
        for k in keys.iter().filter(|k| !k.starts_with("run:")) {
            let v = raw.get(&thread, k).await.unwrap().unwrap();
            assert!(v.starts_with(b"afk\x01"), "{k} is not sealed");
        }
    });

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
    let doc: Value = serde_json::from_str(&with.stdout).unwrap();
    assert_eq!(doc["state"], "completed", "{doc}");
    let without = afk_in(dir.path(), &show);
    assert_eq!(without.code, Some(1), "{}", without.stdout);

    let erase = afk_env(
        dir.path(),
        &["erase", "--json", "--thread", "afk-demo"],
        &env,
    );
    assert_eq!(erase.code, Some(0), "{}", erase.stderr);
    let doc: Value = serde_json::from_str(&erase.stdout).unwrap();
    assert_eq!(doc["erased"], true, "{doc}");
    let gone = afk_env(dir.path(), &show, &env);
    assert_eq!(gone.code, Some(1), "{}", gone.stdout);
    assert!(gone.stderr.contains("no data key"), "{}", gone.stderr);

    let no_ring = afk_in(dir.path(), &["erase", "--thread", "afk-demo"]);
    assert_eq!(no_ring.code, Some(1), "{}", no_ring.stdout);
    assert!(
        no_ring.stderr.contains("AFK_SEAL_KEYRING"),
        "{}",
        no_ring.stderr
    );
}
