//! The integration tests of `custom-store`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod conformance;
mod outside_workspace;
