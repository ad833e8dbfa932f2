//! A sealed value: authenticated encryption bound to where the value is stored.
//!
//! ```text
//! "afk\x01"  key id length (1 byte)  key id (ASCII)  nonce (24 bytes)  ciphertext and tag (16 bytes)
//! ```
//!
//! The cipher is XChaCha20-Poly1305. The associated data is
//! `"afk-seal/1" 0x00 <thread> 0x00 <store key> 0x00 <key id>`: a value copied to another key,
//! run or thread, or relabelled with another key id, fails to open. The key id names the
//! thread's data key the value was sealed with, so keys can rotate while older values stay
//! readable.
//!
//! XChaCha20-Poly1305 is computed as its specification builds it
//! (<https://datatracker.ietf.org/doc/html/draft-irtf-cfrg-xchacha-03>): HChaCha20 of the key
//! and the nonce's first 16 bytes gives a subkey, and ChaCha20-Poly1305 (RFC 8439) seals under
//! that subkey with the nonce `00000000 || nonce[16..24]`. HChaCha20 comes from RustCrypto's
//! `chacha20`, ChaCha20-Poly1305 from AWS-LC (`aws-lc-rs`), whose
//! assembly makes a small value cost a fraction of what a portable implementation's fixed
//! setup costs. A test checks every value against RustCrypto's `XChaCha20Poly1305`.

use afk_core::{Error, ErrorKind, Result, ThreadId};
use aws_lc_rs::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use chacha20::cipher::consts::U10;
use chacha20::cipher::generic_array::GenericArray;

/// The first bytes of every sealed value.
pub const MAGIC: &[u8; 4] = b"afk\x01";
/// Nonce length.
const NONCE: usize = 24;
/// Tag length.
const TAG: usize = 16;
/// Longest key id.
pub const MAX_KEY_ID: usize = 64;
/// The most a sealed value is longer than its plaintext.
pub const OVERHEAD: usize = MAGIC.len() + 1 + MAX_KEY_ID + NONCE + TAG;

/// A 256-bit symmetric key. Its bytes never appear in `Debug` output.
#[derive(Clone)]
pub struct Key(pub(crate) [u8; 32]);

impl Key {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }

    /// A fresh random key (the operating system's generator).
    ///
    /// # Panics
    ///
    /// When the operating system has no random number generator to offer.
    pub fn generate() -> Key {
        let mut bytes = [0u8; 32];
        #[allow(clippy::expect_used)] // documented: no key without randomness
        random(&mut bytes).expect("random bytes for a key");
        Key(bytes)
    }

    /// A key from 64 hex digits; `InvalidConfig` (without the text) for anything else.
    pub fn from_hex(text: &str) -> Result<Key> {
        let bytes = hex::decode(text.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    "a key must be 64 hex digits (32 bytes)",
                )
            })?;
        Ok(Key(bytes))
    }

    /// The key as 64 hex digits (to write a key file).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The ChaCha20-Poly1305 key and nonce that seal under `nonce` (24 bytes).
    fn subkey(&self, nonce: &[u8; NONCE]) -> (LessSafeKey, Nonce) {
        let (head, tail) = nonce.split_at(16);
        let sub = chacha20::hchacha::<U10>(
            GenericArray::from_slice(&self.0),
            GenericArray::from_slice(head),
        );
        let key = UnboundKey::new(&CHACHA20_POLY1305, &sub)
            .map(LessSafeKey::new)
            .unwrap_or_else(|_| unreachable!("a ChaCha20-Poly1305 key is 32 bytes"));
        let mut short = [0u8; 12];
        short[4..].copy_from_slice(tail);
        (key, Nonce::assume_unique_for_key(short))
    }
}

/// Random bytes from the operating system (`getrandom`: fork-safe, and on this workload
/// cheaper than AWS-LC's generator, which reseeds per thread).
fn random(out: &mut [u8]) -> Result<()> {
    getrandom::fill(out)
        .map_err(|e| Error::unexpected(format!("the system's random number generator: {e}")))
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Whether `id` may name a key: 1 to [`MAX_KEY_ID`] characters of `[A-Za-z0-9._-]`.
pub fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn associated(thread: &ThreadId, key: &str, key_id: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(16 + thread.as_str().len() + key.len() + key_id.len());
    ad.extend_from_slice(b"afk-seal/1\0");
    ad.extend_from_slice(thread.as_str().as_bytes());
    ad.push(0);
    ad.extend_from_slice(key.as_bytes());
    ad.push(0);
    ad.extend_from_slice(key_id.as_bytes());
    ad
}

/// Seal `plain`, stored at `key` of `thread`, with the data key `key_id`.
pub fn seal(
    thread: &ThreadId,
    key: &str,
    key_id: &str,
    dek: &Key,
    plain: &[u8],
) -> Result<Vec<u8>> {
    if !valid_key_id(key_id) {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("bad key id {key_id:?}"),
        ));
    }
    let mut nonce = [0u8; NONCE];
    random(&mut nonce)?;
    let ad = associated(thread, key, key_id);
    let head = MAGIC.len() + 1 + key_id.len() + NONCE;
    let mut out = Vec::with_capacity(head + plain.len() + TAG);
    out.extend_from_slice(MAGIC);
    out.push(key_id.len() as u8); // at most MAX_KEY_ID (64)
    out.extend_from_slice(key_id.as_bytes());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(plain);
    let (cipher, short) = dek.subkey(&nonce);
    let tag = cipher
        .seal_in_place_separate_tag(short, Aad::from(&ad), &mut out[head..])
        .map_err(|_| Error::unexpected("sealing a value failed"))?;
    out.extend_from_slice(tag.as_ref());
    Ok(out)
}

/// A sealed value taken apart, not opened yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The data key it names.
    pub key_id: &'a str,
    nonce: &'a [u8],
    sealed: &'a [u8],
}

/// Whether `bytes` start like a sealed value (anything else is plaintext, or not ours).
pub fn looks_sealed(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Take a sealed value apart: `Corrupt` naming `key` for one that is cut short or has a bad
/// key id.
pub fn parse<'a>(bytes: &'a [u8], key: &str) -> Result<Parsed<'a>> {
    let bad = |why: &str| Error::corrupt_record(key, format!("sealed value {why}"));
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("does not start with the seal's marker"))?;
    let (&len, rest) = rest.split_first().ok_or_else(|| bad("is cut short"))?;
    let len = usize::from(len);
    if rest.len() < len + NONCE + TAG {
        return Err(bad("is cut short"));
    }
    let (id, rest) = rest.split_at(len);
    let key_id = std::str::from_utf8(id)
        .ok()
        .filter(|id| valid_key_id(id))
        .ok_or_else(|| bad("names no valid key id"))?;
    let (nonce, sealed) = rest.split_at(NONCE);
    Ok(Parsed {
        key_id,
        nonce,
        sealed,
    })
}

/// Open a parsed value stored at `key` of `thread` with its data key: `Corrupt` naming `key`
/// when it fails to authenticate (tampered, truncated, moved from another key or thread, or
/// sealed under another key with the same id).
pub fn open(thread: &ThreadId, key: &str, dek: &Key, parsed: &Parsed<'_>) -> Result<Vec<u8>> {
    let ad = associated(thread, key, parsed.key_id);
    let fail = || {
        Error::corrupt_record(
            key,
            format!(
                "sealed value does not authenticate under data key {} of thread {thread} \
                 (tampered, cut short, or copied from another key, run or thread)",
                parsed.key_id
            ),
        )
    };
    let nonce: &[u8; NONCE] = parsed.nonce.try_into().map_err(|_| fail())?;
    let (cipher, short) = dek.subkey(nonce);
    let mut buf = parsed.sealed.to_vec();
    let len = cipher
        .open_in_place(short, Aad::from(&ad), &mut buf)
        .map_err(|_| fail())?
        .len();
    buf.truncate(len);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> ThreadId {
        ThreadId::new(s).expect("valid id")
    }

    #[test]
    fn a_value_opens_only_where_it_was_sealed() {
        let k = Key::generate();
        let v = seal(&t("t1"), "checkpoint:r:1:x", "d1", &k, b"secret").expect("seal");
        assert!(looks_sealed(&v));
        assert!(!v.windows(6).any(|w| w == b"secret"));
        let p = parse(&v, "checkpoint:r:1:x").expect("parse");
        assert_eq!(p.key_id, "d1");
        assert_eq!(
            open(&t("t1"), "checkpoint:r:1:x", &k, &p).expect("open"),
            b"secret"
        );
        for (thread, key) in [("t2", "checkpoint:r:1:x"), ("t1", "checkpoint:r:2:x")] {
            let e = open(&t(thread), key, &k, &p).expect_err("moved");
            assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
            assert_eq!(e.key(), Some(key));
        }
        let e = open(&t("t1"), "checkpoint:r:1:x", &Key::generate(), &p).expect_err("other key");
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        // Relabelled with another key id: the id is authenticated too.
        let mut relabelled = v.clone();
        relabelled[6] = b'2';
        let p = parse(&relabelled, "k").expect("parse");
        assert!(open(&t("t1"), "checkpoint:r:1:x", &k, &p).is_err());
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let k = Key::generate();
        let key = "effect:r:1:c";
        let v = seal(&t("t"), key, "d7", &k, b"{\"ok\":true}").expect("seal");
        for i in 0..v.len() {
            for bit in [1u8, 0x80] {
                let mut w = v.clone();
                w[i] ^= bit;
                let opened = parse(&w, key).and_then(|p| open(&t("t"), key, &k, &p));
                assert!(
                    opened.is_err(),
                    "flipping bit {bit:#x} of byte {i} went unnoticed"
                );
            }
        }
        for n in 0..v.len() {
            let opened = parse(&v[..n], key).and_then(|p| open(&t("t"), key, &k, &p));
            let e = opened.expect_err("cut");
            assert_eq!(e.kind(), ErrorKind::Corrupt, "cut at {n}: {e}");
        }
    }

    #[test]
    fn keys_are_64_hex_digits_and_never_printed() {
        let k = Key::generate();
        assert_eq!(Key::from_hex(&k.to_hex()).expect("hex").0, k.0);
        assert_eq!(format!("{k:?}"), "Key(..)");
        for bad in ["", "00", &"g".repeat(64), &"0".repeat(66)] {
            let e = Key::from_hex(bad).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(!e.to_string().contains(bad) || bad.is_empty());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes, and arbitrary bytes behind the marker, give `Corrupt` or open
        /// (never a panic); nothing but the sealed value itself opens.
        #[test]
        fn the_decoder_takes_any_bytes(tail in proptest::collection::vec(any::<u8>(), 0..200), marked in any::<bool>()) {
            let k = Key::from_bytes([7; 32]);
            let mut bytes = if marked { MAGIC.to_vec() } else { Vec::new() };
            bytes.extend_from_slice(&tail);
            match parse(&bytes, "k").and_then(|p| open(&t("t"), "k", &k, &p)) {
                Ok(_) => prop_assert!(false, "random bytes opened"),
                Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corrupt),
            }
        }

        /// The same bytes as RustCrypto's XChaCha20-Poly1305 for the same key, nonce and
        /// associated data, both ways.
        #[test]
        fn sealing_is_xchacha20_poly1305(
            plain in proptest::collection::vec(any::<u8>(), 0..600),
            key in any::<[u8; 32]>(),
        ) {
            use chacha20poly1305::aead::{Aead, KeyInit, Payload};
            use chacha20poly1305::{XChaCha20Poly1305, XNonce};
            let k = Key::from_bytes(key);
            let v = seal(&t("t9"), "checkpoint:r:2:x", "d3", &k, &plain).expect("seal");
            let p = parse(&v, "checkpoint:r:2:x").expect("parse");
            let ad = associated(&t("t9"), "checkpoint:r:2:x", "d3");
            let reference = XChaCha20Poly1305::new(&key.into());
            let opened = reference
                .decrypt(XNonce::from_slice(p.nonce), Payload { msg: p.sealed, aad: &ad })
                .expect("RustCrypto opens what we sealed");
            prop_assert_eq!(&opened, &plain);
            let resealed = reference
                .encrypt(XNonce::from_slice(p.nonce), Payload { msg: &plain, aad: &ad })
                .expect("RustCrypto seals");
            prop_assert_eq!(resealed.as_slice(), p.sealed);
        }

        #[test]
        fn any_value_round_trips(plain in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let k = Key::from_bytes([9; 32]);
            let v = seal(&t("t"), "messages:r:3", "d1", &k, &plain).expect("seal");
            prop_assert!(v.len() <= plain.len() + OVERHEAD);
            let p = parse(&v, "messages:r:3").expect("parse");
            prop_assert_eq!(open(&t("t"), "messages:r:3", &k, &p).expect("open"), plain);
        }
    }
}
