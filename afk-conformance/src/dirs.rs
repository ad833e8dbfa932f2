//! [`process_dir`]: a directory for the one store a test process shares between its cases.

use std::path::{Path, PathBuf};

/// This process's directory `<parent>/<name>-<pid>`, created empty, for a store that lives on
/// disk and is shared by every case of one test process (usually kept in a `static`).
///
/// A `static` is never dropped, so a `tempfile::TempDir` kept in one is never removed, and
/// cargo-nextest runs every case in a process of its own: each would leave a database behind.
/// Instead each call removes the directories of `name` whose process has exited (Linux
/// `/proc`; elsewhere nothing is removed), so at most one per live test process remains.
///
/// ```no_run
/// use std::path::Path;
///
/// let dir = afk_conformance::process_dir(Path::new(env!("CARGO_MANIFEST_DIR")), "my-store");
/// assert!(dir.ends_with(format!("my-store-{}", std::process::id())));
/// ```
///
/// # Panics
/// If the directory cannot be created (a test set-up failure).
pub fn process_dir(parent: &Path, name: &str) -> PathBuf {
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

#[cfg(test)]
mod tests {
    use super::process_dir;
    use std::path::Path;

    #[test]
    fn dirs_of_exited_processes_go_and_others_stay() {
        let parent = tempfile::tempdir().unwrap();
        // A pid no process can have: above Linux's largest `pid_max` (2^22). (The first free
        // pid above ours, used before, is the next one the kernel hands out, and under
        // nextest's parallel processes it was sometimes taken before `process_dir` looked.)
        let dead = u32::MAX;
        assert!(!Path::new(&format!("/proc/{dead}")).exists());
        let gone = parent.path().join(format!("db-{dead}"));
        let live = parent.path().join("db-1"); // init never exits
        let other = parent.path().join(format!("other-{dead}"));
        for d in [&gone, &live, &other] {
            std::fs::create_dir_all(d.join("data")).unwrap();
        }
        let ours = parent.path().join(format!("db-{}", std::process::id()));
        std::fs::create_dir_all(ours.join("stale")).unwrap();

        let dir = process_dir(parent.path(), "db");
        assert_eq!(dir, ours);
        assert!(!gone.exists(), "a directory of an exited process stays");
        assert!(
            live.exists() && other.exists(),
            "a directory not ours to remove went"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "not created empty"
        );
    }
}
