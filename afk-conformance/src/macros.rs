//! `store_suite!` and the one list of cases it and [`crate::CASES`] are generated from.

/// Calls `$callback! { { $args } store { module { case, … } … } runner { … } }` with every
/// regular case (all but the optional groups of [`store_suite!`]). The single source of the
/// case list. Store-level cases take `&dyn Store`; runner-level cases take `Arc<dyn Store>`
/// (the runner spawns tasks that own the store).
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident ! { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            store {
            basic {
                get_missing_key_is_none,
                commit_then_get,
                overwrite_replaces_value,
                empty_commit_checks_fence_only,
                commit_batch_applies_each_in_order,
            }
            list {
                list_is_sorted_by_bytes,
                list_filters_by_prefix,
                list_paginates_with_every_limit,
                list_empty_thread,
                fence_key_is_listed,
            }
            delete {
                delete_removes_keys_and_ignores_missing,
                delete_run_removes_everything_of_the_run,
                delete_rejects_malformed_keys,
            }
            atomicity {
                rejected_commit_writes_nothing,
                pointer_moves_with_its_record,
            }
            fencing {
                claim_increases_epoch,
                claim_if_new_claims_only_runs_without_a_pointer,
                stale_epoch_is_fenced_and_writes_nothing,
                unclaimed_or_future_epoch_is_fenced,
                interleaved_claimants_only_newest_commits,
                racing_claimants_exactly_one_commits,
            }
            isolation {
                threads_are_isolated,
                prefix_sharing_runs_are_isolated,
            }
            values {
                large_value_round_trips,
                odd_byte_values_round_trip,
            }
            keys {
                odd_valid_keys_round_trip,
                invalid_keys_are_rejected,
                invalid_commit_keys_are_rejected,
            }
            threads {
                threads_holding_keys_are_listed_once,
                emptied_threads_hold_nothing,
            }
            attention {
                open_runs_are_listed_with_their_entry,
                finished_and_deleted_runs_leave_the_index,
                refused_commits_leave_the_index_alone,
                the_entry_moves_with_its_commit,
                claim_if_claims_only_at_the_seen_epoch,
            }
            finished {
                closed_runs_are_listed_by_when_they_closed,
                refused_closing_commits_enter_nothing,
                forget_drops_only_what_it_names,
            }
            model {
                model_based,
            }
            }
            runner {
            torn {
                concurrent_reader_sees_no_torn_commit,
            }
            corruption {
                corrupted_records_give_typed_errors,
            }
            concurrency {
                racing_resumers_one_finishes,
                racing_starters_run_it_once,
            }
            }
        }
    };
}

/// Builds the [`crate::CASES`] table from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    ({}
     store { $( $smod:ident { $($scase:ident),* $(,)? } )* }
     runner { $( $rmod:ident { $($rcase:ident),* $(,)? } )* }) => {
        /// Every regular case (all but the optional groups), in suite order.
        pub static CASES: &[$crate::Case] = &[
            $( $( $crate::Case {
                module: stringify!($smod),
                name: stringify!($scase),
                run: |store| ::std::boxed::Box::pin(async move {
                    $crate::cases::$smod::$scase(&*store).await
                }),
            }, )* )*
            $( $( $crate::Case {
                module: stringify!($rmod),
                name: stringify!($rcase),
                run: |store| ::std::boxed::Box::pin($crate::cases::$rmod::$rcase(store)),
            }, )* )*
        ];
    };
}

/// Generates the tests of [`store_suite!`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_tests {
    ({ $factory:expr }
     store { $( $smod:ident { $($scase:ident),* $(,)? } )* }
     runner { $( $rmod:ident { $($rcase:ident),* $(,)? } )* }) => {
        $(
            #[allow(unused_imports)]
            mod $smod {
                use super::*;
                $(
                    #[test]
                    fn $scase() {
                        $crate::__private::run_case(
                            $crate::__test_id!($smod, $scase),
                            || async { $crate::IntoSuiteStore::into_suite_store($factory.await) },
                            |store| ::std::boxed::Box::pin(async move {
                                $crate::cases::$smod::$scase(&*store).await
                            }),
                        );
                    }
                )*
            }
        )*
        $(
            #[allow(unused_imports)]
            mod $rmod {
                use super::*;
                $(
                    #[test]
                    fn $rcase() {
                        $crate::__private::run_case(
                            $crate::__test_id!($rmod, $rcase),
                            || async { $crate::IntoSuiteStore::into_suite_store($factory.await) },
                            |store| ::std::boxed::Box::pin($crate::cases::$rmod::$rcase(store)),
                        );
                    }
                )*
            }
        )*
    };
}

/// The identity of a generated test, for the rerun command of a failure.
#[doc(hidden)]
#[macro_export]
macro_rules! __test_id {
    ($group:ident, $case:ident) => {
        $crate::__private::TestId {
            package: ::std::env!("CARGO_PKG_NAME"),
            krate: ::std::env!("CARGO_CRATE_NAME"),
            module: ::std::module_path!(),
            group: ::std::stringify!($group),
            case: ::std::stringify!($case),
        }
    };
}

/// Accepts the known options of [`store_suite!`]; anything else is a compile error.
#[doc(hidden)]
#[macro_export]
macro_rules! __suite_option {
    (skip_large) => {};
    (skip_resume) => {};
    (skip_corpus) => {};
    (skip_crash) => {};
    ($other:ident) => {
        ::std::compile_error!(::std::concat!(
            "unknown store_suite! option `",
            ::std::stringify!($other),
            "`: expected skip_large, skip_resume, skip_corpus or skip_crash \
             (and `reopen = <fn>` first)"
        ));
    };
}

/// Emits the items unless the option list holds the group's `skip_<group>`.
#[doc(hidden)]
#[macro_export]
macro_rules! __unless_skipped {
    ($group:ident [] $($item:tt)*) => { $($item)* };
    (large [skip_large $($rest:ident)*] $($item:tt)*) => {};
    (resume [skip_resume $($rest:ident)*] $($item:tt)*) => {};
    (corpus [skip_corpus $($rest:ident)*] $($item:tt)*) => {};
    (crash [skip_crash $($rest:ident)*] $($item:tt)*) => {};
    ($group:ident [$other:ident $($rest:ident)*] $($item:tt)*) => {
        $crate::__unless_skipped! { $group [$($rest)*] $($item)* }
    };
}

/// The whole suite as tests: one `#[test]` per case, each on its own multi-thread tokio
/// runtime, each calling the factory for a fresh store.
///
/// `$factory` is an expression evaluating to a future whose output is an `Arc<S>` (`S:
/// Store`), an `Arc<dyn Store>`, or an `Option` of either; `None` means "skipped" (the factory
/// prints why; see [`require_env`](crate::require_env)). Items of the calling module are in
/// scope. The regular cases land in a module `conformance` with one submodule per group
/// (`conformance::fencing::racing_claimants_exactly_one_commits`, …); the optional, slower
/// groups in `conformance_large`, `conformance_resume`, `conformance_corpus` and
/// `conformance_crash`.
///
/// `reopen = <fn>`, right after the factory, gives the crash level
/// ([`cases::crash`](crate::cases::crash)) a way to open the store at a directory, again after
/// a crash: `async fn(std::path::PathBuf) -> Arc<S>` (or `Option<…>`, as the factory). A
/// durable store (`Capabilities::durable`) must give one or leave the level out with
/// `skip_crash`; for a store that is not durable the level is a visible skip.
///
/// Options, after the factory, in any order, leave an optional group out:
/// * `skip_large`: the 100,000-key listing case ([`cases::large`](crate::cases::large));
/// * `skip_resume`: the crash-and-resume property ([`cases::resume`](crate::cases::resume));
/// * `skip_corpus`: the AFK fixture corpus ([`cases::corpus`](crate::cases::corpus));
/// * `skip_crash`: the crash level ([`cases::crash`](crate::cases::crash)).
///
/// An unknown option is a compile error.
///
/// A failing case panics with the check's own file and line, the seed, and a command that
/// reruns just that case. `AFK_CONFORMANCE_REPEAT=<n>` runs the timing-sensitive cases
/// ([`Case::timing_sensitive`](crate::Case::timing_sensitive)) `n` times, each on a fresh
/// store and alone in the process.
///
/// ```text
/// // tests/conformance.rs of a backend crate:
/// afk_conformance::store_suite!(store(), reopen = open_at);
///
/// async fn store() -> Option<std::sync::Arc<my_backend::MyStore>> {
///     let url = afk_conformance::require_env("AFK_TEST_MY_URL")?;
///     Some(std::sync::Arc::new(my_backend::MyStore::connect(&url).await.expect("connect")))
/// }
///
/// async fn open_at(dir: std::path::PathBuf) -> std::sync::Arc<my_backend::MyStore> {
///     std::sync::Arc::new(my_backend::MyStore::open(dir).expect("open"))
/// }
/// ```
#[macro_export]
macro_rules! store_suite {
    ($factory:expr, reopen = $reopen:expr $(, $opt:ident)* $(,)?) => {
        $crate::__store_suite_groups!($factory $(, $opt)*);
        $crate::__unless_skipped! { crash [$($opt)*]
            mod conformance_crash {
                #[allow(unused_imports)]
                use super::*;
                #[test]
                fn killed_writer_leaves_whole_commits() {
                    $crate::__private::run_crash(
                        $crate::__test_id!(crash, killed_writer_leaves_whole_commits),
                        |dir: ::std::path::PathBuf| async move {
                            $crate::IntoSuiteStore::into_suite_store(($reopen)(dir).await)
                        },
                    );
                }
            }
        }
    };
    ($factory:expr $(, $opt:ident)* $(,)?) => {
        $crate::__store_suite_groups!($factory $(, $opt)*);
        $crate::__unless_skipped! { crash [$($opt)*]
            mod conformance_crash {
                #[allow(unused_imports)]
                use super::*;
                #[test]
                fn killed_writer_leaves_whole_commits() {
                    $crate::__private::run_crash_without_reopen(
                        $crate::__test_id!(crash, killed_writer_leaves_whole_commits),
                        || async { $crate::IntoSuiteStore::into_suite_store($factory.await) },
                    );
                }
            }
        }
    };
}

/// Every group of [`store_suite!`] but the crash level.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_groups {
    ($factory:expr $(, $opt:ident)*) => {
        $( $crate::__suite_option!($opt); )*
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__with_cases!(__store_suite_tests! { $factory });
        }
        $crate::__unless_skipped! { large [$($opt)*]
            mod conformance_large {
                #[allow(unused_imports)]
                use super::*;
                $crate::__store_suite_tests! {
                    { $factory }
                    store { large { hundred_thousand_keys_list_in_order } }
                    runner {}
                }
            }
        }
        $crate::__unless_skipped! { resume [$($opt)*]
            mod conformance_resume {
                #[allow(unused_imports)]
                use super::*;
                $crate::__store_suite_tests! {
                    { $factory }
                    store {}
                    runner { resume { crash_and_resume } }
                }
            }
        }
        $crate::__unless_skipped! { corpus [$($opt)*]
            mod conformance_corpus {
                #[allow(unused_imports)]
                use super::*;
                $crate::__store_suite_tests! {
                    { $factory }
                    store {}
                    runner { corpus { afk_corpus_resumes_as_expected } }
                }
            }
        }
    };
}
