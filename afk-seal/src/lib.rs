#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

pub mod format;
mod hashes;
mod keyring;
mod keys;
#[cfg(feature = "kms")]
pub mod kms;
mod rekey;
mod sources;
mod store;

pub use format::Key;
pub use keyring::{DirKeyring, Keyring, MemoryKeyring};
pub use keys::{KeySource, StaticKeys};
#[cfg(feature = "kms")]
pub use kms::{KmsConfig, KmsKeys};
pub use rekey::{RekeyAll, RekeyFailure, RekeyOptions, RekeyReport, SkippedRun};
pub use sources::KeySources;
pub use store::{KEY_CACHE, KEY_TTL, Mode, SealedStore};
