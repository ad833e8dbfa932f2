//! The whole AFK conformance suite against `LogStore`: one macro line and a factory.
//!
//! One log file per test binary, shared by every case (each case uses its own random thread
//! ids, so sharing also runs the cases concurrently against one store, as a process would).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use custom_store::LogStore;

// `reopen`: the crash level kills a writer process and reopens the log in the same directory.
afk_conformance::store_suite!(store(), reopen = open_at);

async fn open_at(dir: PathBuf) -> Arc<LogStore> {
    Arc::new(LogStore::open(dir.join("afk.log")).expect("open the log"))
}

async fn store() -> Arc<LogStore> {
    static STORE: OnceLock<(tempfile::TempDir, Arc<LogStore>)> = OnceLock::new();
    let (_dir, store) = STORE.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let store = LogStore::open(dir.path().join("afk.log")).expect("open the log");
        (dir, Arc::new(store))
    });
    Arc::clone(store)
}
