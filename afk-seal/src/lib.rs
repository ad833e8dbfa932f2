#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

pub mod format;
mod keyring;
mod keys;
mod rekey;
mod store;

pub use format::Key;
pub use keyring::{DirKeyring, Keyring, MemoryKeyring};
pub use keys::{KeySource, StaticKeys};
pub use rekey::{RekeyOptions, RekeyReport, SkippedRun};
pub use store::{Mode, SealedStore};
