//! The integration tests of `afk-conformance`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod broken;
mod broken_levels;
mod common;
mod corpus_list;
mod memory;
mod output;
mod skip_large;
mod torn;
