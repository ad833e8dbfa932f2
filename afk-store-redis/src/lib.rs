#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

mod attention;
mod builder;
mod config;
mod conn;
mod error;
mod scripts;
mod stamped;
mod store;
mod threads;
mod tls;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT_MS, PARAMETERS,
    RedisConfig, SCHEMES,
};
pub use store::{MAX_VALUE_SIZE, RedisStore};
pub use threads::{FORGOTTEN_TTL_MS, IndexRebuild};
