#![doc = include_str!("../README.md")]

pub use afk_core::*;
