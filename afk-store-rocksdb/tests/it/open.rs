//! Opening `RocksDbStore`: options, capabilities, reopen, and the one-open-per-path lock.

use crate::common;

use afk_core::{
    ErrorKind,
    store::{Epoch, Store},
};
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

/// The compressions the linked RocksDB library has. Debian's `librocksdb` (the workspace's
/// build) has all five; `cargo xtask rocksdb-newest` builds RocksDB from source with the
/// crate's default features and lists what that build has in `AFK_TEST_ROCKSDB_COMPRESSIONS`.
fn compiled_in() -> Vec<Compression> {
    match std::env::var("AFK_TEST_ROCKSDB_COMPRESSIONS") {
        Ok(list) => list
            .split(',')
            .map(|c| c.trim().parse().expect("AFK_TEST_ROCKSDB_COMPRESSIONS"))
            .collect(),
        Err(_) => ALL.to_vec(),
    }
}

const ALL: [Compression; 5] = [
    Compression::None,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
    Compression::Zlib,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_option_opens_and_capabilities_follow_sync() {
    let dir = tempfile::tempdir().expect("tempdir");
    let compiled_in = compiled_in();
    for (i, compression) in ALL.into_iter().enumerate() {
        let url = format!(
            "rocksdb://{}?compression={}&sync={}&block_cache_size=1MiB",
            dir.path().join(format!("db{i}")).display(),
            compression.as_str(),
            i % 2 == 0
        );
        if !compiled_in.contains(&compression) {
            // A compression the library lacks: a typed error naming it, nothing opened.
            let err = RocksDbStore::from_url(&url).expect_err(&url);
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
            let name = compression.as_str();
            assert!(
                err.message().contains(&format!("`compression` = {name}"))
                    && err.message().contains("feature"),
                "{err}"
            );
            continue;
        }
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
    let cfg = RocksDbConfig::new(dir.path().join("cfg")).with_sync(false);
    assert!(
        !RocksDbStore::open(cfg)
            .expect("open")
            .capabilities()
            .durable
    );
    let err = RocksDbStore::from_url("rocksdb://relative").expect_err("bad url");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

/// A config built with the chainable setters, as code outside this crate builds one (the struct
/// is `#[non_exhaustive]`, so no literal): each option reaches the opened database.
#[tokio::test]
async fn a_config_built_with_setters_opens_with_its_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    // A compression other than the default that the linked library has (a RocksDB built from
    // source with the default features has only none and snappy), and its name in RocksDB's LOG.
    let compression = compiled_in()
        .into_iter()
        .rev()
        .find(|c| *c != RocksDbConfig::new(&path).compression)
        .expect("a compression besides the default");
    let in_log = match compression {
        Compression::None => "NoCompression",
        Compression::Snappy => "Snappy",
        Compression::Lz4 => "LZ4",
        Compression::Zstd => "ZSTD",
        Compression::Zlib => "Zlib",
    };
    let cfg = RocksDbConfig::new(&path)
        .with_sync(false)
        .with_compression(compression)
        .with_block_cache_size(4 << 20);
    assert_eq!(
        (cfg.sync, cfg.compression, cfg.block_cache_size),
        (false, compression, Some(4 << 20))
    );
    let store = RocksDbStore::open(cfg).expect("open");
    assert!(!store.capabilities().durable, "sync=false is not durable");
    let e = store.claim(&t("th"), &r("r")).await.expect("claim");
    store
        .commit(&commit("th", "r", e, &[("checkpoint:r:0:x", "v")], None))
        .await
        .expect("commit");
    assert_eq!(
        get(&store, "th", "checkpoint:r:0:x").await.as_deref(),
        Some("v")
    );
    // RocksDB writes the options it opened with into its LOG.
    let log = std::fs::read_to_string(path.join("LOG")).expect("LOG");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ompression") || l.contains("capacity"))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("Options.compression: {in_log}"))),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("capacity : 4194304")),
        "{lines:#?}"
    );
}

/// Without `create_if_missing`, a path with no database is `InvalidConfig` naming the path and
/// nothing is created there (neither the directory nor, in an existing empty directory, any
/// file); a database that exists opens as usual and keeps its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_if_missing_a_missing_database_is_refused_and_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("typo").join("db");
    let err = RocksDbStore::open(RocksDbConfig::new(&missing).with_create_if_missing(false))
        .expect_err("no database there");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(
        err.message().contains(&missing.display().to_string()),
        "{}",
        err.message()
    );
    assert!(!dir.path().join("typo").exists(), "a directory was created");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let url = format!("rocksdb://{}?create=false", empty.display());
    let err = RocksDbStore::from_url(&url).expect_err("an empty directory holds no database");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert_eq!(
        std::fs::read_dir(&empty).expect("read_dir").count(),
        0,
        "files were created in {}",
        empty.display()
    );

    let path = dir.path().join("db");
    {
        let store = RocksDbStore::open(RocksDbConfig::new(&path)).expect("create");
        let e = store.claim(&t("th"), &r("r")).await.expect("claim");
        store
            .commit(&commit("th", "r", e, &[("checkpoint:r:0:x", "v")], None))
            .await
            .expect("commit");
    }
    let store = RocksDbStore::open(RocksDbConfig::new(&path).with_create_if_missing(false))
        .expect("an existing database opens");
    assert_eq!(
        get(&store, "th", "checkpoint:r:0:x").await.as_deref(),
        Some("v")
    );
}

/// A path that cannot hold a database (a file is in the way) is `InvalidConfig` naming it,
/// not `Unexpected`: nothing a retry or `afk verify` could help with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_in_the_way_is_invalid_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a database").expect("write");
    let err = RocksDbStore::open(RocksDbConfig::new(&file)).expect_err("a file, not a directory");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.message().contains(&file.display().to_string()),
        "{}",
        err.message()
    );
    assert_eq!(std::fs::read(&file).expect("read"), b"not a database");
}
