#![doc = include_str!("../README.md")]

pub use afk_core::*;

pub mod backend;
mod open;
pub mod prelude;

/// The model providers, `afk-providers` (features `openai`, `anthropic`).
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use afk_providers as providers;

pub use open::{open, open_existing};
