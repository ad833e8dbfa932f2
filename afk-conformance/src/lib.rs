#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use afk_core::store::Store;

mod agents;
pub mod broken;
pub mod cases;
mod dirs;
mod harness;
mod macros;
mod support;

pub use dirs::process_dir;
pub use support::{
    CaseResult, list_all, show_bytes, show_key, skipped, unique_run, unique_suffix, unique_thread,
};

/// One case of the suite, for code that runs cases in a loop (see [`CASES`]).
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The group (`"fencing"`, …), the module of [`cases`] it lives in.
    pub module: &'static str,
    /// The case's function name.
    pub name: &'static str,
    /// Runs the case against a store.
    pub run: fn(Arc<dyn Store>) -> CaseFuture<'static>,
}

impl Case {
    /// `group::name`, as failures and `skipped:` lines print it.
    pub fn path(&self) -> String {
        format!("{}::{}", self.module, self.name)
    }

    /// Whether the case races tasks against each other, so one run can pass by luck where a
    /// store is broken. `store_suite!` runs these alone in their process and repeats them
    /// `AFK_CONFORMANCE_REPEAT` times.
    pub fn timing_sensitive(&self) -> bool {
        timing_sensitive(self.module, self.name)
    }
}

/// See [`Case::timing_sensitive`].
pub(crate) fn timing_sensitive(module: &str, name: &str) -> bool {
    matches!(
        (module, name),
        ("torn", _)
            | ("crash", _)
            | ("fencing", "racing_claimants_exactly_one_commits")
            | ("concurrency", "racing_resumers_one_finishes")
    )
}

/// The future a [`Case`] returns.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

__with_cases!(__case_table! {});

/// The 100,000-key case, which backends may leave out (`skip_large`; not in [`CASES`]).
pub static LARGE_CASE: Case = Case {
    module: "large",
    name: "hundred_thousand_keys_list_in_order",
    run: |store| {
        Box::pin(async move { cases::large::hundred_thousand_keys_list_in_order(&*store).await })
    },
};

/// The crash-and-resume property, which backends may leave out (`skip_resume`; not in
/// [`CASES`]).
pub static RESUME_CASE: Case = Case {
    module: "resume",
    name: "crash_and_resume",
    run: |store| Box::pin(cases::resume::crash_and_resume(store)),
};

/// The AFK fixture corpus, which backends may leave out (`skip_corpus`; not in [`CASES`]).
pub static CORPUS_CASE: Case = Case {
    module: "corpus",
    name: "afk_corpus_resumes_as_expected",
    run: |store| Box::pin(cases::corpus::afk_corpus_resumes_as_expected(store)),
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
    pub use crate::harness::{TestId, run_case, run_crash, run_crash_without_reopen};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_env_returns_a_set_variable() {
        // Cargo sets CARGO_MANIFEST_DIR for every test process.
        assert!(require_env("CARGO_MANIFEST_DIR").is_some_and(|v| v.ends_with("afk-conformance")));
    }

    #[test]
    fn require_env_skips_or_fails_on_a_missing_variable() {
        let name = "AFK_TEST_THIS_VARIABLE_IS_NEVER_SET";
        let result = std::panic::catch_unwind(|| require_env(name));
        if std::env::var(REQUIRE_INTEGRATION).is_ok_and(|v| v == "1") {
            assert!(
                result.is_err(),
                "with {REQUIRE_INTEGRATION}=1 a missing variable must panic"
            );
        } else {
            assert_eq!(result.ok(), Some(None), "a missing variable is a skip");
        }
    }

    #[test]
    fn case_table_lists_every_case_once() {
        let mut names: Vec<String> = CASES
            .iter()
            .map(|c| format!("{}::{}", c.module, c.name))
            .collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a case is listed twice");
        assert!(n >= 25, "only {n} cases");
        for optional in [&LARGE_CASE, &RESUME_CASE, &CORPUS_CASE] {
            let name = format!("{}::{}", optional.module, optional.name);
            assert!(!names.contains(&name), "{name} is optional");
        }
        for runner_level in [
            "corruption::corrupted_records_give_typed_errors",
            "concurrency::racing_resumers_one_finishes",
            "concurrency::racing_starters_run_it_once",
        ] {
            assert!(names.contains(&runner_level.to_string()), "{runner_level}");
        }
    }
}
