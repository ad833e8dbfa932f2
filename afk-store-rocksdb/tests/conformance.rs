//! The store conformance suite against a real RocksDB database.
//!
//! One database per test process, shared by every case (each case uses its own random thread
//! ids, and sharing it also runs the cases concurrently against one store, as a process would).
//! It lives in `<CARGO_TARGET_TMPDIR>/rocksdb-conformance-<pid>` (see [`process_dir`]).
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
        let dir = process_dir(
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "rocksdb-conformance",
        );
        Arc::new(RocksDbStore::open(RocksDbConfig::new(dir.join("db"))).expect("open rocksdb"))
    });
    Arc::clone(store)
}

/// This process's directory `<parent>/<name>-<pid>`, created empty.
///
/// A `static` is never dropped, so a `tempfile::TempDir` kept in one is never removed, and
/// cargo-nextest runs every case in a process of its own: each would leave a database behind
/// (with RocksDB's preallocated write-ahead log, tens of MB). Instead each process removes the
/// directories of `name` whose process has exited (Linux `/proc`; elsewhere nothing is
/// removed), and `cargo xtask test` removes the last ones after a passing run.
fn process_dir(parent: &Path, name: &str) -> PathBuf {
    if Path::new("/proc/self").exists() {
        for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            let file = entry.file_name();
            let pid = file
                .to_str()
                .and_then(|f| f.strip_prefix(name)?.strip_prefix('-')?.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // left by an earlier process with our pid
    std::fs::create_dir_all(&dir).expect("create the shared store's directory");
    dir
}
