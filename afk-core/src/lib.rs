#![doc = include_str!("../README.md")]

pub mod error;
pub mod fixture;
pub mod hash;
pub mod ids;
pub mod keys;
pub mod migrate;
pub mod normalize;
pub mod redact;
pub mod runner;
pub mod schema;
pub mod store;
pub mod verify;
pub mod writer;

pub use error::{Error, ErrorKind, Result};
pub use ids::{RunId, ThreadId};
pub use store::{
    Capabilities, Commit, Epoch, FaultStore, ListPage, MemoryStore, RandomSource, RetryPolicy,
    RetryStore, Store, ThreadPage,
};
pub use writer::{CheckpointConfig, Ticket, Writer, WriterStats};
