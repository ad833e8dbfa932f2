//! The integration tests of `afk-store-rocksdb`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod attention;
mod common;
mod compression;
mod conformance;
mod durability;
mod list_delete;
mod open;
mod retention;
mod store;
