//! The integration tests of `afk-seal`, as one test binary: the conformance suite on a sealed
//! store, what sealing promises, and key rotation.

mod conformance;
mod cost;
mod fuzz;
mod hashes;
#[cfg(feature = "kms")]
mod kms;
mod rekey;
mod sealing;
