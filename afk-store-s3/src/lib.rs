#![doc = include_str!("../README.md")]

mod commit;
mod config;
mod error;
mod head;
mod open;
mod ops;
mod store;
mod swap;

pub use config::{S3Config, SCHEME, Secret};
pub use store::{MAX_VALUE_SIZE, S3Store};
