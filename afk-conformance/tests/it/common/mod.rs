//! Shared by this crate's integration tests.

#![allow(dead_code)]

pub mod filelog;
