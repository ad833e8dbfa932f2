#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

pub mod config;
mod error;
#[cfg(feature = "test-kit")]
pub mod fixture;
pub mod hash;
mod ids;
pub mod keys;
pub mod migrate;
pub mod normalize;
pub mod redact;
pub mod runner;
pub mod schema;
pub mod store;
#[cfg(any(test, feature = "test-kit"))]
pub mod testkit;
pub mod verify;
mod writer;

#[cfg(feature = "test-kit")]
pub use error::repeated_phrase;
pub use error::{BoxError, Error, ErrorKind, Result};
pub use ids::{RunId, ThreadId};
pub use store::memory::MemoryStore;
pub use writer::CheckpointConfig;
