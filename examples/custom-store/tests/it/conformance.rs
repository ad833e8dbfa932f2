//! The whole AFK conformance suite against `LogStore`: one macro line and a factory.
//!
//! One log file per test process, shared by every case (each case uses its own random thread
//! ids, so sharing also runs the cases concurrently against one store, as a process would),
//! in `<CARGO_TARGET_TMPDIR>/log-conformance-<pid>` (see [`afk_conformance::process_dir`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use custom_store::LogStore;

// `reopen`: the crash level kills a writer process and reopens the log in the same directory.
afk_conformance::store_suite!(store(), reopen = open_at);

async fn open_at(dir: PathBuf) -> Arc<LogStore> {
    Arc::new(LogStore::open(dir.join("afk.log")).expect("open the log"))
}

async fn store() -> Arc<LogStore> {
    static STORE: OnceLock<Arc<LogStore>> = OnceLock::new();
    let store = STORE.get_or_init(|| {
        let dir =
            afk_conformance::process_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "log-conformance");
        Arc::new(LogStore::open(dir.join("afk.log")).expect("open the log"))
    });
    Arc::clone(store)
}
