//! The cases, grouped by concern. Store-level cases are plain `pub async fn(&dyn Store) ->
//! CaseResult`; the runner levels ([`resume`], [`corruption`], [`concurrency`], [`corpus`])
//! take `Arc<dyn Store>`, because the runner spawns run tasks that own their store. A backend
//! may call any of them directly; [`crate::store_suite!`] turns all of them into tests, and
//! [`crate::CASES`] lists the regular ones for code that runs them in a loop.
//!
//! Every case uses fresh, randomly suffixed thread ids, so cases may run concurrently against
//! one shared server and a store that already holds data.

pub mod atomicity;
pub mod attention;
pub mod basic;
pub mod concurrency;
pub mod corpus;
pub mod corruption;
pub mod crash;
pub mod delete;
pub mod fencing;
pub mod finished;
pub mod isolation;
pub mod keys;
pub mod large;
pub mod list;
pub mod model;
pub mod resume;
pub mod threads;
pub mod torn;
pub mod values;
