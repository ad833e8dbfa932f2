//! The store conformance suite against a real RocksDB database.
//!
//! One database per test process, shared by every case (each case uses its own random thread
//! ids, and sharing it also runs the cases concurrently against one store, as a process would).
//! It lives in `<CARGO_TARGET_TMPDIR>/rocksdb-conformance-<pid>` (see [`afk_conformance::process_dir`]).
//! The crash level opens its own databases in directories it makes (`open_at`): a child
//! process writes, is killed with SIGKILL, and this process reopens the database.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

afk_conformance::store_suite!(store(), reopen = open_at);

/// The database in `dir`, created on first use, reopened after a crash.
async fn open_at(dir: PathBuf) -> Arc<RocksDbStore> {
    Arc::new(RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).expect("open rocksdb"))
}

async fn store() -> Arc<RocksDbStore> {
    static STORE: OnceLock<Arc<RocksDbStore>> = OnceLock::new();
    let store = STORE.get_or_init(|| {
        let dir = afk_conformance::process_dir(
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "rocksdb-conformance",
        );
        Arc::new(RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).expect("open rocksdb"))
    });
    Arc::clone(store)
}

/// The suite again on the database sealed at rest (`afk-seal`): sealing changes nothing a store
/// user can see.
mod sealed {
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, OnceLock};

    use afk_seal::{DirKeyring, Key, SealedStore, StaticKeys};
    use afk_store_rocksdb::{RocksDbConfig, RocksDbStore};

    afk_conformance::store_suite!(store(), reopen = open_at);

    /// The database and its keyring in `dir`, under one fixed key-encryption key (the crash
    /// level's child process and this one open the same data).
    async fn open_at(dir: PathBuf) -> Arc<SealedStore> {
        let db = RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).expect("open rocksdb");
        let keys = StaticKeys::new("k1", Key::from_bytes([42; 32])).expect("keys");
        let ring = DirKeyring::open(dir.join("keys")).expect("keyring");
        Arc::new(SealedStore::new(
            Arc::new(db),
            Arc::new(keys),
            Arc::new(ring),
        ))
    }

    async fn store() -> Arc<SealedStore> {
        static STORE: OnceLock<Arc<SealedStore>> = OnceLock::new();
        let store = STORE.get_or_init(|| {
            let dir = afk_conformance::process_dir(
                Path::new(env!("CARGO_TARGET_TMPDIR")),
                "rocksdb-sealed-conformance",
            );
            let db = RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).expect("open rocksdb");
            let keys = StaticKeys::new("k1", Key::generate()).expect("keys");
            let ring = DirKeyring::open(dir.join("keys")).expect("keyring");
            Arc::new(SealedStore::new(
                Arc::new(db),
                Arc::new(keys),
                Arc::new(ring),
            ))
        });
        Arc::clone(store)
    }
}
