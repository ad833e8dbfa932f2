#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

mod attention;
mod builder;
mod commit;
mod config;
mod error;
mod finished;
mod head;
mod index;
mod log;
mod open;
mod ops;
mod store;
mod swap;
mod threads;

pub use config::{
    DEFAULT_ATTEMPT_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT_MS, PARAMETERS, S3Config, SCHEME, Secret,
};
pub use ops::S3Traffic;
pub use store::{MAX_VALUE_SIZE, S3Store};
