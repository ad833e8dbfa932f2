//! The integration tests of `afk-store-redis`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod attention;
mod big_output;
mod chunks;
mod common;
mod conformance;
mod own_server;
mod restart_verify;
mod retention;
mod store;
mod thread_index;
mod tls;
