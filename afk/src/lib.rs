#![doc = include_str!("../README.md")]

pub use afk_core::*;

pub mod backend;
mod open;

pub use open::{open, open_existing};
