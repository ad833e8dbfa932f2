//! Each thread's key for its effect hashes: random, 256-bit, kept in the thread's keyring
//! record sealed with the thread's active data key. It is created with the record and stays
//! the same across rotations (a rotation to a new data key seals it again under that key), so
//! hashes written before a rotation keep matching; erasing the thread's record destroys it
//! with the data keys, and the thread's stored hashes can no longer be confirmed against any
//! guess.

use std::collections::HashMap;

use afk_core::hash::{EffectHashes, HashKey};
use afk_core::{Error, ErrorKind, Result, ThreadId};

use crate::format::{Key, open, parse, seal};
use crate::rekey::{RECORD_ATTEMPTS, encode};
use crate::store::{Mode, Record, SealedStore};

/// What the hash key is sealed as: never a store key (a space is not allowed in one), so no
/// value of the data store can be opened as the hash key, or the other way round.
const SLOT: &str = "keyring hash key";

/// A fresh random hash key.
pub(crate) fn generate() -> HashKey {
    HashKey::from_bytes(Key::generate().0)
}

/// `hash_key` sealed with the thread's data key `key_id`, as the record keeps it (hex).
pub(crate) fn seal_hash_key(
    thread: &ThreadId,
    key_id: &str,
    dek: &Key,
    hash_key: &HashKey,
) -> Result<String> {
    Ok(hex::encode(seal(
        thread,
        SLOT,
        key_id,
        dek,
        hash_key.as_bytes(),
    )?))
}

/// The hash key a record keeps, opened with the data key it names.
pub(crate) fn open_hash_key(
    thread: &ThreadId,
    sealed: &str,
    keys: &HashMap<String, Key>,
) -> Result<HashKey> {
    let bad = |why: String| {
        Error::new(
            ErrorKind::Corrupt,
            format!("keyring record of thread {thread}: its hash key {why}"),
        )
    };
    let bytes = hex::decode(sealed).map_err(|_| bad("is not hex".to_owned()))?;
    let parsed = parse(&bytes, SLOT)?;
    let dek = keys.get(parsed.key_id).ok_or_else(|| {
        bad(format!(
            "is sealed with data key {}, which the record does not hold",
            parsed.key_id
        ))
    })?;
    let plain = open(thread, SLOT, dek, &parsed)?;
    let bytes =
        <[u8; 32]>::try_from(plain.as_slice()).map_err(|_| bad("is not 32 bytes".to_owned()))?;
    Ok(HashKey::from_bytes(bytes))
}

impl SealedStore {
    /// How the thread's effect hashes are computed: keyed with its hash key when values are
    /// sealed (a thread without keys gets them now, as on its first write); in decrypt-only
    /// mode plain, with the hashes keyed before still matching.
    pub(crate) async fn thread_hashes(&self, thread: &ThreadId) -> Result<EffectHashes> {
        if self.mode() == Mode::DecryptOnly {
            return match self.ring.load(thread).await? {
                None => Ok(EffectHashes::plain()),
                Some(_) => match self.keys_to_read(thread, SLOT).await?.hash.clone() {
                    Some(k) => Ok(EffectHashes::reading_keyed(k)),
                    None => Ok(EffectHashes::plain()),
                },
            };
        }
        let keys = self.keys_to_write(thread).await?;
        match &keys.hash {
            Some(k) => Ok(EffectHashes::keyed(k.clone())),
            None => self.add_hash_key(thread).await.map(EffectHashes::keyed),
        }
    }

    /// Give a record written before hashes were keyed a hash key (a compare-and-swap), and
    /// return the key the record holds then.
    async fn add_hash_key(&self, thread: &ThreadId) -> Result<HashKey> {
        for _ in 0..RECORD_ATTEMPTS {
            let Some(bytes) = self.ring.load(thread).await? else {
                // Erased meanwhile: a write now starts the thread afresh.
                return self
                    .keys_to_write(thread)
                    .await?
                    .hash
                    .clone()
                    .ok_or_else(|| {
                        Error::unexpected(format!("thread {thread}'s new record has no hash key"))
                    });
            };
            let keys = self.unwrap_record(thread, &bytes).await?;
            if let Some(k) = &keys.hash {
                return Ok(k.clone());
            }
            let record: Record = Self::parse_record(thread, &bytes)?;
            let dek = keys.keys.get(&keys.active).ok_or_else(|| {
                Error::unexpected(format!("thread {thread} has no active data key in memory"))
            })?;
            let hash_key = generate();
            let next = Record {
                hash: Some(seal_hash_key(thread, &keys.active, dek, &hash_key)?),
                ..record
            };
            if self.ring.replace(thread, &bytes, &encode(&next)?).await? {
                self.forget(thread);
                return Ok(hash_key);
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "the keyring record of thread {thread} kept changing while a hash key was added"
            ),
        ))
    }
}
