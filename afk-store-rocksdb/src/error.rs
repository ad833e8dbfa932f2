//! The one mapping from RocksDB errors to [`afk_core::Error`] kinds.

use std::path::Path;

use afk_core::{Error, ErrorKind};
use rocksdb::ErrorKind as RKind;

/// What the store was doing when RocksDB failed; it picks the kind for ambiguous errors and
/// goes into the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Open,
    Read,
    Write,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Open => "opening the database",
            Op::Read => "reading",
            Op::Write => "writing",
        }
    }
}

/// Map a RocksDB error to our kinds.
///
/// - the database lock is held (by another process, or by another open handle in this
///   process): `Unavailable`, naming the `LOCK` file and the one-process rule;
/// - `Corruption`: `Corrupt`; `NotSupported`: `Unsupported` (for example a compression that
///   the linked library lacks); `InvalidArgument` while opening: `InvalidConfig`;
/// - while opening, a path that cannot hold a database (its directory cannot be created: a
///   file is in the way, or no permission) or a database this user may not read and write
///   (permission denied): `InvalidConfig` naming the path, since retrying cannot help;
/// - I/O errors, `Busy`, `TimedOut`, `TryAgain`, `Incomplete`, `ShutdownInProgress`:
///   `Unavailable` (retryable);
/// - anything else: `Unexpected`.
pub(crate) fn map(err: rocksdb::Error, op: Op, path: &Path) -> Error {
    let text = err.to_string();
    if is_lock_error(&text) {
        // RocksDB's own text names the lock file again; what it adds is whose lock it is,
        // said here, so the message names the file once and has no source.
        let holder = if text.contains("lock hold by current process") {
            "a handle opened earlier in this process"
        } else {
            "another process"
        };
        return Error::unavailable(format!(
            "the RocksDB lock file {} is held by {holder}: RocksDB allows one process (and one \
             open handle) per database; share one RocksDbStore within the process, or use the \
             Redis or S3 store for multi-process deployments",
            path.join("LOCK").display()
        ));
    }
    if op == Op::Open && is_unusable_path(&text) {
        return Error::invalid_config(format!(
            "rocksdb cannot open a database at {}: check that the path can hold one (an \
             existing directory, or a path where one can be created) that this user may read and \
             write",
            path.display()
        ))
        .with_source(err);
    }
    let kind = match err.kind() {
        RKind::Corruption => ErrorKind::Corrupt,
        RKind::NotSupported => ErrorKind::Unsupported,
        RKind::InvalidArgument if op == Op::Open => ErrorKind::InvalidConfig,
        RKind::InvalidArgument => ErrorKind::InvalidInput,
        RKind::IOError
        | RKind::Busy
        | RKind::TimedOut
        | RKind::TryAgain
        | RKind::Incomplete
        | RKind::ShutdownInProgress => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    };
    Error::new(
        kind,
        format!("rocksdb failed {} at {}", op.as_str(), path.display()),
    )
    .with_source(err)
}

/// RocksDB reports a held lock as an I/O error: `While lock file: <dir>/LOCK: Resource
/// temporarily unavailable` (another process) or `lock hold by current process … <dir>/LOCK:
/// No locks available` (this process).
fn is_lock_error(text: &str) -> bool {
    text.contains("While lock file") || text.contains("lock hold by current process")
}

/// The directory could not be created (the `rocksdb` crate's own message, a file in the way or
/// no permission), or RocksDB was refused access to the database's files.
fn is_unusable_path(text: &str) -> bool {
    text.contains("Failed to create RocksDB directory") || text.contains("Permission denied")
}

/// A `spawn_blocking` task that panicked or was cancelled.
pub(crate) fn join(err: tokio::task::JoinError) -> Error {
    if err.is_cancelled() {
        Error::new(ErrorKind::Cancelled, "the rocksdb task was cancelled").with_source(err)
    } else {
        Error::unexpected("the rocksdb task panicked").with_source(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_texts_are_recognised() {
        assert!(is_lock_error(
            "IO error: While lock file: /tmp/x/LOCK: Resource temporarily unavailable"
        ));
        assert!(is_lock_error(
            "IO error: lock hold by current process, acquire time 1 acquiring thread 2: /tmp/x/LOCK: No locks available"
        ));
        assert!(!is_lock_error("IO error: No space left on device"));
    }

    #[test]
    fn unusable_path_texts_are_recognised() {
        assert!(is_unusable_path(
            "Failed to create RocksDB directory: `Os { code: 17, kind: AlreadyExists, message: \"File exists\" }`."
        ));
        assert!(is_unusable_path(
            "IO error: While renaming a file to /d/LOG.old.1: /d/LOG: Permission denied"
        ));
        assert!(!is_unusable_path("IO error: No space left on device"));
    }

    #[test]
    fn mapped_errors_say_each_thing_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let first = crate::RocksDbStore::open(crate::RocksDbConfig::new(&path)).expect("open");
        let locked = crate::RocksDbStore::open(crate::RocksDbConfig::new(&path)).unwrap_err();
        assert_eq!(locked.kind(), ErrorKind::Unavailable, "{locked}");
        drop(first);
        let file = dir.path().join("file");
        std::fs::write(&file, b"not a directory").expect("write");
        let in_the_way =
            crate::RocksDbStore::open(crate::RocksDbConfig::new(file.join("db"))).unwrap_err();
        for e in [locked.clone(), locked, in_the_way] {
            let s = e.to_string();
            assert_eq!(afk_core::repeated_phrase(&s, 12), None, "{s}");
        }
    }
}
