#![doc = include_str!("../README.md")]

pub mod error;
pub mod ids;
pub mod store;

pub use error::{Error, ErrorKind, Result};
pub use ids::{RunId, ThreadId};
pub use store::{Capabilities, Commit, Epoch, ListPage, MemoryStore, Store};
