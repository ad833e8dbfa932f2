//! The integration tests of `afk-seal`, as one test binary: the conformance suite on a sealed
//! store, and what sealing promises.

mod conformance;
#[cfg(feature = "kms")]
mod kms;
mod sealing;
