//! Where the threads' wrapped data keys live: a [`Keyring`], kept apart from the data store so
//! that erasing a thread's key (crypto-shredding) leaves every copy of its data (replicas,
//! backups, exports) unreadable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use afk_core::{Error, ErrorKind, Result, ThreadId};
use async_trait::async_trait;

/// The threads' key records (opaque bytes: the wrapped data keys of one thread).
#[async_trait]
pub trait Keyring: Send + Sync + std::fmt::Debug {
    /// The thread's record, `None` when it has none (never written, or erased).
    async fn load(&self, thread: &ThreadId) -> Result<Option<Vec<u8>>>;

    /// Store `record` if the thread has none; return the record the thread has now (this
    /// one, or the one another writer stored first).
    async fn create(&self, thread: &ThreadId, record: &[u8]) -> Result<Vec<u8>>;

    /// Destroy the thread's record; whether it had one. Durable when it returns.
    async fn erase(&self, thread: &ThreadId) -> Result<bool>;

    /// Replace the thread's record with `record` only if it is still `expected`, byte for
    /// byte (a compare-and-swap): whether it was replaced. `false` when the record changed
    /// meanwhile or is gone (erased): an erased thread is never brought back. Durable when it
    /// returns `true`. Key rotation ([`SealedStore::rekey`](crate::SealedStore::rekey)) uses
    /// it.
    ///
    /// Errors: `Unsupported` for a keyring without it (the default); `Unavailable`.
    async fn replace(&self, thread: &ThreadId, expected: &[u8], record: &[u8]) -> Result<bool> {
        let _ = (thread, expected, record);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this keyring cannot replace a record: keys cannot be rotated in it",
        ))
    }
}

/// A keyring in process memory, for tests.
#[derive(Debug, Default)]
pub struct MemoryKeyring {
    records: Mutex<HashMap<ThreadId, Vec<u8>>>,
}

impl MemoryKeyring {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ThreadId, Vec<u8>>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Keyring for MemoryKeyring {
    async fn load(&self, thread: &ThreadId) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().get(thread).cloned())
    }

    async fn create(&self, thread: &ThreadId, record: &[u8]) -> Result<Vec<u8>> {
        Ok(self
            .lock()
            .entry(thread.clone())
            .or_insert_with(|| record.to_vec())
            .clone())
    }

    async fn erase(&self, thread: &ThreadId) -> Result<bool> {
        Ok(self.lock().remove(thread).is_some())
    }

    async fn replace(&self, thread: &ThreadId, expected: &[u8], record: &[u8]) -> Result<bool> {
        let mut records = self.lock();
        match records.get_mut(thread) {
            Some(current) if current.as_slice() == expected => {
                *current = record.to_vec();
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// A keyring in a local directory: one file per thread, `<thread>.key`, created without
/// overwriting (a temporary file, synced, then hard-linked into place) and deleted by
/// [`Keyring::erase`] (the directory synced after both); replaced ([`Keyring::replace`]) by a
/// synced temporary file renamed over it, under an exclusive lock on `<thread>.lock` that
/// erasing takes too, so that a rotation never brings back an erased record. The empty lock
/// file stays after an erasure (deleting it would let two processes hold the lock at once).
/// Several processes on one machine may share the directory. Erasing deletes the file; on
/// media that keep old blocks (SSDs, copy-on-write file systems, snapshots) the bytes may
/// survive on disk until overwritten, so keep the directory on storage whose deletion you
/// trust, or use a key management service.
#[derive(Debug, Clone)]
pub struct DirKeyring {
    dir: PathBuf,
}

fn io(what: String, e: &std::io::Error) -> Error {
    let kind = match e.kind() {
        std::io::ErrorKind::PermissionDenied => ErrorKind::InvalidConfig,
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("keyring: {what}: {e}"))
}

impl DirKeyring {
    /// The keyring in `dir`, created if missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DirKeyring> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)
            .map_err(|e| io(format!("cannot create {}", dir.display()), &e))?;
        Ok(DirKeyring { dir })
    }

    fn path(&self, thread: &ThreadId) -> PathBuf {
        self.dir.join(format!("{thread}.key"))
    }

    /// A temporary file name next to the thread's record.
    fn tmp(&self, thread: &ThreadId) -> PathBuf {
        self.dir.join(format!(
            ".{thread}.{}.{}.tmp",
            std::process::id(),
            crate::format::Key::generate()
                .to_hex()
                .get(..8)
                .unwrap_or("0")
        ))
    }

    /// Hold the exclusive lock of the thread's record (blocking) while `body` runs.
    fn locked<T>(dir: &Path, thread: &str, body: impl FnOnce() -> Result<T>) -> Result<T> {
        let path = dir.join(format!("{thread}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io(format!("cannot open {}", path.display()), &e))?;
        lock.lock()
            .map_err(|e| io(format!("cannot lock {}", path.display()), &e))?;
        let out = body();
        drop(lock); // closing the file releases the lock
        out
    }

    /// Write `record` to `tmp`, synced; the temporary file is removed on failure.
    fn write_tmp(tmp: &Path, record: &[u8]) -> Result<()> {
        use std::io::Write;
        let written = std::fs::File::create(tmp)
            .and_then(|mut f| f.write_all(record).and_then(|()| f.sync_all()));
        written.map_err(|e| {
            let _ = std::fs::remove_file(tmp);
            io(format!("cannot write {}", tmp.display()), &e)
        })
    }

    fn sync_dir(dir: &Path) -> Result<()> {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(format!("cannot sync {}", dir.display()), &e))
    }
}

#[async_trait]
impl Keyring for DirKeyring {
    async fn load(&self, thread: &ThreadId) -> Result<Option<Vec<u8>>> {
        let path = self.path(thread);
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(format!("cannot read {}", path.display()), &e)),
        }
    }

    async fn create(&self, thread: &ThreadId, record: &[u8]) -> Result<Vec<u8>> {
        let (dir, path, record) = (self.dir.clone(), self.path(thread), record.to_vec());
        let tmp = self.tmp(thread);
        tokio::task::spawn_blocking(move || {
            DirKeyring::write_tmp(&tmp, &record)?;
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {
                    DirKeyring::sync_dir(&dir)?;
                    Ok(record)
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read(&path)
                    .map_err(|e| io(format!("cannot read {}", path.display()), &e)),
                Err(e) => Err(io(format!("cannot create {}", path.display()), &e)),
            }
        })
        .await
        .map_err(|e| Error::unexpected(format!("keyring task failed: {e}")))?
    }

    async fn erase(&self, thread: &ThreadId) -> Result<bool> {
        let (dir, path, name) = (self.dir.clone(), self.path(thread), thread.to_string());
        tokio::task::spawn_blocking(move || {
            DirKeyring::locked(&dir, &name, || match std::fs::remove_file(&path) {
                Ok(()) => DirKeyring::sync_dir(&dir).map(|()| true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(io(format!("cannot delete {}", path.display()), &e)),
            })
        })
        .await
        .map_err(|e| Error::unexpected(format!("keyring task failed: {e}")))?
    }

    async fn replace(&self, thread: &ThreadId, expected: &[u8], record: &[u8]) -> Result<bool> {
        let (dir, path, name) = (self.dir.clone(), self.path(thread), thread.to_string());
        let (tmp, expected, record) = (self.tmp(thread), expected.to_vec(), record.to_vec());
        tokio::task::spawn_blocking(move || {
            DirKeyring::locked(&dir, &name, || {
                match std::fs::read(&path) {
                    Ok(current) if current == expected => {}
                    Ok(_) => return Ok(false),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                    Err(e) => return Err(io(format!("cannot read {}", path.display()), &e)),
                }
                DirKeyring::write_tmp(&tmp, &record)?;
                if let Err(e) = std::fs::rename(&tmp, &path) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(io(format!("cannot replace {}", path.display()), &e));
                }
                DirKeyring::sync_dir(&dir).map(|()| true)
            })
        })
        .await
        .map_err(|e| Error::unexpected(format!("keyring task failed: {e}")))?
    }
}
