#![doc = include_str!("../README.md")]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use afk_core::Store;

pub mod broken;
pub mod cases;
mod macros;
mod support;

pub use support::{CaseResult, list_all, unique_run, unique_suffix, unique_thread};

/// One case of the suite, for code that runs cases in a loop (see [`CASES`]).
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The group (`"fencing"`, …), the module of [`cases`] it lives in.
    pub module: &'static str,
    /// The case's function name.
    pub name: &'static str,
    /// Runs the case against a store.
    pub run: for<'a> fn(&'a dyn Store) -> CaseFuture<'a>,
}

/// The future a [`Case`] returns.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

__with_cases!(__case_table! {});

/// The 100,000-key case, which backends may leave out (it is not in [`CASES`]).
pub static LARGE_CASE: Case = Case {
    module: "large",
    name: "hundred_thousand_keys_list_in_order",
    run: |store| Box::pin(cases::large::hundred_thousand_keys_list_in_order(store)),
};

/// The environment variable that turns a missing test server from a skip into a failure.
pub const REQUIRE_INTEGRATION: &str = "AFK_REQUIRE_INTEGRATION";

/// The value of the environment variable `name` when it is set and not empty.
///
/// When it is missing: panics if `AFK_REQUIRE_INTEGRATION=1` (in CI a missing server is a
/// failure), otherwise prints `skipped: set <name> …` and returns `None`. Every backend's
/// tests use this one rule.
pub fn require_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var(REQUIRE_INTEGRATION).is_ok_and(|v| v == "1") => {
            panic!(
                "{name} is not set, and {REQUIRE_INTEGRATION}=1 makes a missing server a failure"
            )
        }
        _ => {
            println!("skipped: set {name} to run this test against a server");
            None
        }
    }
}

/// What a [`store_suite!`] factory may return: a store, or `None` to skip.
pub trait IntoSuiteStore {
    /// The store as `Arc<dyn Store>`, or `None` when the test is to be skipped.
    fn into_suite_store(self) -> Option<Arc<dyn Store>>;
}

impl<S: Store + 'static> IntoSuiteStore for Arc<S> {
    fn into_suite_store(self) -> Option<Arc<dyn Store>> {
        Some(self)
    }
}

impl IntoSuiteStore for Arc<dyn Store> {
    fn into_suite_store(self) -> Option<Arc<dyn Store>> {
        Some(self)
    }
}

impl<T: IntoSuiteStore> IntoSuiteStore for Option<T> {
    fn into_suite_store(self) -> Option<Arc<dyn Store>> {
        self.and_then(IntoSuiteStore::into_suite_store)
    }
}

/// Support for the macros; not part of the API.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;
    use std::sync::Arc;

    use afk_core::Store;

    use crate::CaseFuture;

    /// Runs one case on a fresh multi-thread runtime; panics with the case's message on failure.
    pub fn run_case(
        name: &str,
        factory: impl Future<Output = Option<Arc<dyn Store>>>,
        case: for<'a> fn(&'a dyn Store) -> CaseFuture<'a>,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"));
        runtime.block_on(async {
            let Some(store) = factory.await else {
                println!("skipped: {name}: the store factory returned None");
                return;
            };
            let backend = store.capabilities().name;
            if let Err(msg) = case(&*store).await {
                panic!("conformance case {name} failed against the {backend} store: {msg}");
            }
        });
    }
}
