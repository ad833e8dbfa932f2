//! Opening `RocksDbStore`: options, capabilities, reopen, and the one-open-per-path lock.

mod common;

use afk_core::{Epoch, ErrorKind, Store};
use afk_store_rocksdb::{Compression, RocksDbConfig, RocksDbStore};
use common::{commit, get, r, t};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_reopen_and_a_second_open_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("open");
        let err = RocksDbStore::open(RocksDbConfig::new(&path)).expect_err("second open");
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        let lock = path.join("LOCK").display().to_string();
        assert!(err.message().contains(&lock), "{}", err.message());
        assert!(err.message().contains("one process"), "{}", err.message());
        let e = store.claim(&t("th"), &r("r")).await.expect("claim");
        store
            .commit(&commit(
                "th",
                "r",
                e,
                &[("checkpoint:r:0:x", "v")],
                Some("p"),
            ))
            .await
            .expect("commit");
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("reopen after drop");
    assert_eq!(
        get(&store, "th", "checkpoint:r:0:x").await.as_deref(),
        Some("v")
    );
    assert_eq!(
        store.claim(&t("th"), &r("r")).await.expect("claim"),
        Epoch(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_option_opens_and_capabilities_follow_sync() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, compression) in [
        Compression::None,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Zlib,
    ]
    .into_iter()
    .enumerate()
    {
        let url = format!(
            "rocksdb://{}?compression={}&sync={}&block_cache_size=1MiB",
            dir.path().join(format!("db{i}")).display(),
            compression.as_str(),
            i % 2 == 0
        );
        let store = RocksDbStore::from_url(&url).expect(&url);
        assert_eq!(store.config().compression, compression);
        let caps = store.capabilities();
        assert_eq!(caps.name, "rocksdb");
        assert_eq!(caps.durable, i % 2 == 0);
        assert!(!caps.multi_process && caps.batch_commit);
        let e = store.claim(&t("th"), &r("r")).await.expect("claim");
        let big = "x".repeat(1 << 20);
        store
            .commit(&commit(
                "th",
                "r",
                e,
                &[("checkpoint:r:0:x", big.as_str())],
                None,
            ))
            .await
            .expect("commit");
        assert_eq!(
            get(&store, "th", "checkpoint:r:0:x").await.map(|v| v.len()),
            Some(1 << 20)
        );
    }
    let mut cfg = RocksDbConfig::new(dir.path().join("cfg"));
    cfg.sync = false;
    assert!(
        !RocksDbStore::open(cfg)
            .expect("open")
            .capabilities()
            .durable
    );
    let err = RocksDbStore::from_url("rocksdb://relative").expect_err("bad url");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}
