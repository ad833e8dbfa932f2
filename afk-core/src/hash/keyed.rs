//! Keyed effect hashes: HMAC-SHA256 under a thread's key instead of plain SHA-256, for stores
//! that seal values at rest. A plain `input_hash` lets whoever reads it confirm a guessed
//! low-entropy argument (a card or phone number) by hashing the guess; a keyed one does not,
//! without the key. The text hashed is the same canonical JSON; only the digest differs.

use std::fmt;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

/// A 256-bit key for keyed effect hashes (HMAC-SHA256). Its `Debug` shows no key material.
#[derive(Clone)]
pub struct HashKey {
    bytes: [u8; 32],
    /// HMAC's state with the key absorbed (its inner and outer pads), copied for each hash
    /// instead of hashing the pads again: two of the four or so SHA-256 blocks of a small
    /// hash.
    keyed: Hmac<Sha256>,
}

impl HashKey {
    /// The key with these bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        // HMAC pads a key shorter than the hash's 64-byte block with zeros: the padded block
        // is the same key, and the fixed-size constructor cannot fail.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&bytes);
        let keyed = <Hmac<Sha256> as KeyInit>::new(&block.into());
        HashKey { bytes, keyed }
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }
}

impl PartialEq for HashKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for HashKey {}

impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashKey(..)")
    }
}

/// How a digest of a canonical text is taken.
#[derive(Clone, Copy)]
pub(super) enum Digest<'k> {
    /// AFK's plain SHA-256.
    Sha256,
    /// HMAC-SHA256 under this key.
    Hmac(&'k HashKey),
}

impl Digest<'_> {
    /// Lowercase hex of the digest of `bytes`.
    pub(super) fn hex(self, bytes: &[u8]) -> String {
        match self {
            Digest::Sha256 => super::sha256_hex(bytes),
            Digest::Hmac(key) => {
                let mut mac = key.keyed.clone();
                mac.update(bytes);
                super::digest_hex(mac.finalize().into_bytes().into())
            }
        }
    }
}

/// How the effect hashes (`input_hash`, `output_hash`) of one thread are computed, as its
/// store asks ([`Store::effect_hashes`](crate::store::Store::effect_hashes)): plain SHA-256
/// (AFK's, the default), or keyed (HMAC-SHA256 under the thread's [`HashKey`]).
///
/// A stored `input_hash` matches a call when it is either form of the call's hash this value
/// knows: rows written before the thread's hashes were keyed (a store moved to encryption, a
/// plain store's rows imported) keep matching, and so do keyed rows read while encryption is
/// rolled back ([`EffectHashes::reading_keyed`]).
#[derive(Clone, Debug, Default)]
pub struct EffectHashes {
    key: Option<HashKey>,
    write_keyed: bool,
}

impl EffectHashes {
    /// Plain SHA-256, as AFK computes it.
    pub fn plain() -> Self {
        EffectHashes::default()
    }

    /// HMAC-SHA256 under `key`; stored plain hashes still match.
    pub fn keyed(key: HashKey) -> Self {
        EffectHashes {
            key: Some(key),
            write_keyed: true,
        }
    }

    /// Plain SHA-256 for what is written, with hashes keyed by `key` still matching (a store
    /// rolling encryption back).
    pub fn reading_keyed(key: HashKey) -> Self {
        EffectHashes {
            key: Some(key),
            write_keyed: false,
        }
    }

    /// Whether the hashes written are keyed.
    pub fn is_keyed(&self) -> bool {
        self.write_keyed && self.key.is_some()
    }

    fn written(&self) -> Digest<'_> {
        match &self.key {
            Some(k) if self.write_keyed => Digest::Hmac(k),
            _ => Digest::Sha256,
        }
    }

    /// The other form a stored hash may take, if this value knows one.
    fn other(&self) -> Option<Digest<'_>> {
        let key = self.key.as_ref()?;
        Some(if self.write_keyed {
            Digest::Sha256
        } else {
            Digest::Hmac(key)
        })
    }

    /// The `input_hash` to write for a call of `tool_name` with `args`
    /// ([`input_hash`](super::input_hash) when plain).
    pub fn input_hash(&self, tool_name: &str, args: &Value) -> String {
        super::input_hash_with(
            tool_name,
            |out| super::write_value(out, args),
            self.written(),
        )
    }

    /// [`EffectHashes::input_hash`] of a tool call's argument object, without wrapping it in a
    /// `Value`.
    pub(crate) fn input_hash_of_args(&self, tool_name: &str, args: &Map<String, Value>) -> String {
        super::input_hash_with(
            tool_name,
            |out| super::write_object(out, args),
            self.written(),
        )
    }

    /// The `input_hash` of the call in the form not written, if this value knows one: what
    /// a stored row that does not hold the written form is also compared with.
    pub(crate) fn other_input_hash_of_args(
        &self,
        tool_name: &str,
        args: &Map<String, Value>,
    ) -> Option<String> {
        let digest = self.other()?;
        Some(super::input_hash_with(
            tool_name,
            |out| super::write_object(out, args),
            digest,
        ))
    }

    /// Whether a stored `input_hash` is this call's, in either form this value knows.
    pub fn input_matches(&self, stored: &str, tool_name: &str, args: &Value) -> bool {
        let form = |d: Digest<'_>| {
            super::input_hash_with(tool_name, |out| super::write_value(out, args), d)
        };
        stored == form(self.written()) || self.other().is_some_and(|d| stored == form(d))
    }

    /// The `output_hash` to write for `output` ([`output_hash`](super::output_hash) when
    /// plain).
    pub fn output_hash(&self, output: &Value) -> String {
        super::output_hash_with(output, self.written())
    }

    /// Whether a stored `output_hash` is `output`'s, in either form this value knows.
    pub(crate) fn output_matches(&self, stored: &str, output: &Value) -> bool {
        stored == super::output_hash_with(output, self.written())
            || self
                .other()
                .is_some_and(|d| stored == super::output_hash_with(output, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(b: u8) -> HashKey {
        HashKey::from_bytes([b; 32])
    }

    #[test]
    fn keyed_digest_is_hmac_sha256() {
        // RFC 4231 test case 2's data under a 32-byte key, against the variable-length
        // constructor: the zero-padded block is the same key.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&[7u8; 32]).unwrap();
        mac.update(b"what do ya want for nothing?");
        let want = hex::encode(mac.finalize().into_bytes());
        assert_eq!(
            Digest::Hmac(&key(7)).hex(b"what do ya want for nothing?"),
            want
        );
        assert_ne!(
            want,
            super::super::sha256_hex(b"what do ya want for nothing?")
        );
    }

    #[test]
    fn keyed_hashes_hide_the_plain_hash_and_differ_by_key() {
        let args = json!({"card": "4111111111111111"});
        let plain = super::super::input_hash("pay", &args);
        let a = EffectHashes::keyed(key(1));
        let b = EffectHashes::keyed(key(2));
        assert_ne!(a.input_hash("pay", &args), plain);
        assert_ne!(a.input_hash("pay", &args), b.input_hash("pay", &args));
        assert_eq!(EffectHashes::plain().input_hash("pay", &args), plain);
        assert_ne!(
            a.output_hash(&json!(1)),
            super::super::output_hash(&json!(1))
        );
        assert_eq!(a.input_hash("pay", &args).len(), 64);
    }

    #[test]
    fn either_form_matches_and_nothing_else() {
        let args = json!({"a": 1});
        let keyed = EffectHashes::keyed(key(1));
        let rolling_back = EffectHashes::reading_keyed(key(1));
        let plain = super::super::input_hash("t", &args);
        let mac = keyed.input_hash("t", &args);
        for h in [&keyed, &rolling_back] {
            assert!(h.input_matches(&plain, "t", &args));
            assert!(h.input_matches(&mac, "t", &args));
            assert!(!h.input_matches(&plain, "t", &json!({"a": 2})));
        }
        assert_eq!(rolling_back.input_hash("t", &args), plain);
        assert!(!EffectHashes::plain().input_matches(&mac, "t", &args));
        assert!(!EffectHashes::keyed(key(2)).input_matches(&mac, "t", &args));
        let Value::Object(map) = &args else {
            unreachable!()
        };
        assert_eq!(keyed.input_hash_of_args("t", map), mac);
        assert_eq!(keyed.other_input_hash_of_args("t", map), Some(plain));
    }
}
