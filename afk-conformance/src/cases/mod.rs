//! The store-level cases, grouped by concern. Each is a plain `pub async fn(&dyn Store) ->
//! CaseResult` a backend may also call directly; [`crate::store_suite!`] turns all of them into
//! tests, and [`crate::CASES`] lists them for code that runs them in a loop.
//!
//! Every case uses fresh, randomly suffixed thread ids, so cases may run concurrently against
//! one shared server and a store that already holds data.

pub mod atomicity;
pub mod basic;
pub mod delete;
pub mod fencing;
pub mod isolation;
pub mod keys;
pub mod large;
pub mod list;
pub mod model;
pub mod values;
