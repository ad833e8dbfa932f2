//! Key-encryption keys: [`KeySource`] wraps and unwraps the threads' data keys, and
//! [`StaticKeys`] is the source of keys given as configuration (an environment variable or a
//! file).
//!
//! A wrapped data key is a sealed value (see [`crate::format`]) whose key id names the
//! key-encryption key and whose associated data names the thread and the data key's id: a
//! wrapped key copied to another thread or relabelled does not unwrap.

use std::collections::BTreeMap;

use afk_core::{Error, ErrorKind, Result, ThreadId};
use async_trait::async_trait;

use crate::format::{Key, open, parse, seal, valid_key_id};

/// Where key-encryption keys live: the application's configuration, or a key management
/// service. A source that cannot be reached answers `Unavailable`; nothing falls back to
/// plaintext.
#[async_trait]
pub trait KeySource: Send + Sync + std::fmt::Debug {
    /// The id of the key that wraps new data keys.
    fn active(&self) -> &str;

    /// Wrap the data key `dek_id` of `thread` under the active key.
    async fn wrap(&self, thread: &ThreadId, dek_id: &str, dek: &Key) -> Result<Vec<u8>>;

    /// Unwrap what [`KeySource::wrap`] gave. Errors: `InvalidConfig` naming the key id when
    /// the source does not hold the key it was wrapped with; `Corrupt` when it does not
    /// authenticate; `Unavailable` when the source cannot be reached.
    async fn unwrap(&self, thread: &ThreadId, dek_id: &str, wrapped: &[u8]) -> Result<Key>;

    /// The id of the key-encryption key `wrapped` was wrapped with, when it can tell: a
    /// rotation ([`SealedStore::rekey`](crate::SealedStore::rekey)) wraps again every data key
    /// wrapped with another key than [`KeySource::active`], and leaves alone those it cannot
    /// tell. The default reads the key id of a wrapped key in the sealed format
    /// ([`StaticKeys`]'s).
    fn wrapped_with(&self, wrapped: &[u8]) -> Option<String> {
        parse(wrapped, "dek").ok().map(|p| p.key_id.to_owned())
    }
}

/// The store key a data key is wrapped for (its associated data).
fn wrap_key(dek_id: &str) -> String {
    format!("dek:{dek_id}")
}

/// Key-encryption keys held in memory, from configuration: `id=<64 hex digits>` entries
/// separated by commas or new lines, the first one active (it wraps new data keys), the
/// others kept to unwrap data keys wrapped before a rotation.
#[derive(Clone)]
pub struct StaticKeys {
    active: String,
    keys: BTreeMap<String, Key>,
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("active", &self.active)
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl StaticKeys {
    /// One key, active, named `id`.
    pub fn new(id: &str, key: Key) -> Result<StaticKeys> {
        if !valid_key_id(id) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("bad key id {id:?}: 1 to 64 of A-Z a-z 0-9 . _ -"),
            ));
        }
        Ok(StaticKeys {
            active: id.to_owned(),
            keys: BTreeMap::from([(id.to_owned(), key)]),
        })
    }

    /// Also hold `key` as `id`, to unwrap (not active).
    pub fn with(mut self, id: &str, key: Key) -> Result<StaticKeys> {
        let one = StaticKeys::new(id, key)?;
        self.keys.extend(one.keys);
        Ok(self)
    }

    /// Parse `id=<hex>` entries (commas or new lines between them; blank lines and lines
    /// starting with `#` ignored); the first is active. `InvalidConfig` naming the entry's id,
    /// never its key, for anything malformed.
    pub fn parse(text: &str) -> Result<StaticKeys> {
        let mut out: Option<StaticKeys> = None;
        for entry in text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'))
        {
            let (id, hex) = entry.split_once('=').ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    "a key entry is not `id=<64 hex digits>`",
                )
            })?;
            let key = Key::from_hex(hex).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("key {}: {}", id.trim(), e.message()),
                )
            })?;
            out = Some(match out {
                None => StaticKeys::new(id.trim(), key)?,
                Some(keys) => keys.with(id.trim(), key)?,
            });
        }
        out.ok_or_else(|| Error::new(ErrorKind::InvalidConfig, "no key given"))
    }

    /// [`StaticKeys::parse`] of the environment variable `var`.
    pub fn from_env(var: &str) -> Result<StaticKeys> {
        let text = std::env::var(var).map_err(|_| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("the environment variable {var} holds no keys"),
            )
        })?;
        StaticKeys::parse(&text)
    }

    /// [`StaticKeys::parse`] of the file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<StaticKeys> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("cannot read the key file {}: {e}", path.display()),
            )
        })?;
        StaticKeys::parse(&text)
    }
}

#[async_trait]
impl KeySource for StaticKeys {
    fn active(&self) -> &str {
        &self.active
    }

    async fn wrap(&self, thread: &ThreadId, dek_id: &str, dek: &Key) -> Result<Vec<u8>> {
        let kek = &self.keys[&self.active];
        seal(thread, &wrap_key(dek_id), &self.active, kek, &dek.0)
    }

    async fn unwrap(&self, thread: &ThreadId, dek_id: &str, wrapped: &[u8]) -> Result<Key> {
        let key = wrap_key(dek_id);
        let parsed = parse(wrapped, &key)?;
        let kek = self.keys.get(parsed.key_id).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "data key {dek_id} of thread {thread} is wrapped by key {}, which this key \
                     source does not hold (it holds {})",
                    parsed.key_id,
                    self.keys.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        let bytes = open(thread, &key, kek, &parsed)?;
        let bytes = <[u8; 32]>::try_from(bytes.as_slice())
            .map_err(|_| Error::corrupt_record(key, "a wrapped data key is not 32 bytes"))?;
        Ok(Key::from_bytes(bytes))
    }
}
