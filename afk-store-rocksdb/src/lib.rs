#![doc = include_str!("../README.md")]

mod compat;
mod config;
mod error;
mod layout;
mod ops;
mod store;
mod threads;

pub use config::{Compression, RocksDbConfig, SCHEME};
pub use store::RocksDbStore;
