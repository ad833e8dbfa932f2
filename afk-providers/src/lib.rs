#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

#[cfg(any(feature = "openai", feature = "anthropic"))]
mod client;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod convert;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod error;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers;

#[cfg(feature = "anthropic")]
pub use providers::Anthropic;
#[cfg(feature = "openai")]
pub use providers::OpenAi;
