#![doc = include_str!("../README.md")]

mod config;
mod error;
mod layout;
mod ops;
mod store;

pub use config::{Compression, RocksDbConfig, SCHEME};
pub use store::RocksDbStore;
