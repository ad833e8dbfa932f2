#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

mod attention;
mod builder;
mod compat;
mod config;
mod error;
mod finished;
mod group;
mod layout;
mod ops;
mod store;
mod threads;

pub use config::{Compression, PARAMETERS, RocksDbConfig, SCHEME};
pub use store::RocksDbStore;
