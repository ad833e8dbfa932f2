//! The whole AFK conformance suite against `LogStore`: one macro line and a factory.
//!
//! One log file per test process, shared by every case (each case uses its own random thread
//! ids, so sharing also runs the cases concurrently against one store, as a process would),
//! in `<CARGO_TARGET_TMPDIR>/log-conformance-<pid>` (see [`process_dir`]).

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
        let dir = process_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "log-conformance");
        Arc::new(LogStore::open(dir.join("afk.log")).expect("open the log"))
    });
    Arc::clone(store)
}

/// This process's directory `<parent>/<name>-<pid>`, created empty. A `static` is never
/// dropped, so a `tempfile::TempDir` kept in one would never be removed (cargo-nextest runs
/// each case in a process of its own); instead each process removes the directories of `name`
/// whose process has exited (Linux `/proc`; elsewhere nothing is removed).
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
