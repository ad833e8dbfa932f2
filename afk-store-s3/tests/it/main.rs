//! The integration tests of `afk-store-s3`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod attention;
mod common;
mod conformance;
mod endpoint;
mod faults;
mod head_cache;
mod index;
mod long_run;
mod packs;
mod proxy;
mod race;
mod restart;
mod retention;
mod single_writer;
mod store;
mod traffic;
mod transcript;
