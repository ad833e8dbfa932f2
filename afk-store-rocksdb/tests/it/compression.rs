//! The default configuration's compression is really compiled in and used.
//!
//! A from-source RocksDB (what users of the crate build) has only the compression libraries
//! its cargo features enable; the store's default is Snappy, enabled by this crate's default
//! `snappy` feature. Opening with the default configuration, writing a compressible value,
//! reopening (RocksDB flushes the recovered write-ahead log into a table file) and reading it
//! back proves the library can honour the default; the size of the table files proves the
//! data went through the compressor. `cargo xtask rocksdb-newest` runs this file against the
//! newest `rocksdb` release built from source.

use crate::common;

use std::path::Path;

use afk_core::store::{Epoch, Store};
use afk_store_rocksdb::{Compression, RocksDbConfig, RocksDbStore};
use common::{commit, r, t};

/// 1 MiB of a repeated checkpoint-like text: any real compressor shrinks it many times.
fn compressible() -> String {
    "{\"role\":\"assistant\",\"content\":\"a checkpoint of a step\"},"
        .repeat(1 << 15)
        .chars()
        .take(1 << 20)
        .collect()
}

/// Open with `config`, write the value, close, reopen, read it back; then the bytes of the
/// database's table files, as the `rocksdb` crate lists them.
async fn write_reopen_read(config: RocksDbConfig, value: &str) -> u64 {
    let key = "checkpoint:run_1:0:pre_llm";
    {
        let store = RocksDbStore::open(config.clone()).expect("open");
        let epoch = store
            .claim(&t("thread_1"), &r("run_1"))
            .await
            .expect("claim");
        assert_eq!(epoch, Epoch(1));
        store
            .commit(&commit("thread_1", "run_1", epoch, &[(key, value)], None))
            .await
            .expect("commit");
    }
    {
        let store = RocksDbStore::open(config.clone()).expect("reopen");
        let got = store.get(&t("thread_1"), key).await.expect("get");
        assert_eq!(got.as_deref(), Some(value.as_bytes()), "value after reopen");
    }
    table_bytes(&config.path)
}

fn table_bytes(path: &Path) -> u64 {
    let db = rocksdb::DB::open_for_read_only(&rocksdb::Options::default(), path, false)
        .expect("open read-only");
    let files = db.live_files().expect("live files");
    assert!(!files.is_empty(), "the reopen flushed no table file");
    files.iter().map(|f| f.size as u64).sum()
}

#[tokio::test]
async fn the_default_config_opens_and_compresses_with_snappy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksDbConfig::new(dir.path().join("db"));
    assert_eq!(config.compression, Compression::Snappy);
    let value = compressible();
    let bytes = write_reopen_read(config, &value).await;
    assert!(
        bytes * 8 < value.len() as u64,
        "{bytes} bytes of table files for a {} byte value: not compressed",
        value.len()
    );
}

/// The measurement can tell: without compression the same value takes its full size.
#[tokio::test]
async fn without_compression_the_table_files_hold_the_whole_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksDbConfig::new(dir.path().join("db")).with_compression(Compression::None);
    let value = compressible();
    let bytes = write_reopen_read(config, &value).await;
    assert!(bytes >= value.len() as u64, "{bytes} bytes");
}
