#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

pub mod format;
mod keyring;
mod keys;
mod store;

pub use format::Key;
pub use keyring::{DirKeyring, Keyring, MemoryKeyring};
pub use keys::{KeySource, StaticKeys};
pub use store::{Mode, SealedStore};
