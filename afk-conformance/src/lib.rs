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
pub mod retention;
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

/// The rule for tests that need a server (`AFK_REQUIRE_INTEGRATION=1`: a missing server is a
/// failure, otherwise a printed skip), from `afk-core`'s test kit so that every crate's tests
/// share it.
pub use afk_core::testkit::{REQUIRE_INTEGRATION, require_env, skip_or_fail};

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
