//! `store_suite!` and the one list of cases it and [`crate::CASES`] are generated from.

/// Calls `$callback! { { $args } module { case, … } … }` with every regular case (all but the
/// large one). The single source of the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident ! { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
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
                concurrent_reader_never_sees_pointer_without_record,
            }
            fencing {
                claim_increases_epoch,
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
            model {
                model_based,
            }
        }
    };
}

/// Builds the [`crate::CASES`] table from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    ({} $( $module:ident { $($case:ident),* $(,)? } )*) => {
        /// Every regular case (all but the large one), in suite order.
        pub static CASES: &[$crate::Case] = &[
            $( $( $crate::Case {
                module: stringify!($module),
                name: stringify!($case),
                run: |store| ::std::boxed::Box::pin($crate::cases::$module::$case(store)),
            }, )* )*
        ];
    };
}

/// Generates the tests of [`store_suite!`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_tests {
    ({ $factory:expr } $( $module:ident { $($case:ident),* $(,)? } )*) => {
        $(
            #[allow(unused_imports)]
            mod $module {
                use super::*;
                $(
                    #[test]
                    fn $case() {
                        $crate::__private::run_case(
                            concat!(stringify!($module), "::", stringify!($case)),
                            async { $crate::IntoSuiteStore::into_suite_store($factory.await) },
                            |store| ::std::boxed::Box::pin($crate::cases::$module::$case(store)),
                        );
                    }
                )*
            }
        )*
    };
}

/// The whole store-level suite as tests: one `#[test]` per case, each on its own multi-thread
/// tokio runtime, each calling the factory for a fresh store.
///
/// `$factory` is an expression evaluating to a future whose output is an `Arc<S>` (`S:
/// Store`), an `Arc<dyn Store>`, or an `Option` of either; `None` means "skipped" (the factory
/// prints why; see [`require_env`](crate::require_env)). Items of the calling module are in
/// scope. The tests land in a module `conformance` with one submodule per group
/// (`conformance::fencing::racing_claimants_exactly_one_commits`, …).
///
/// `store_suite!(factory(), skip_large)` leaves out the 100,000-key case
/// ([`cases::large`](crate::cases::large)) for backends where it is too slow.
///
/// ```text
/// // tests/conformance.rs of a backend crate:
/// afk_conformance::store_suite!(store());
///
/// async fn store() -> Option<std::sync::Arc<my_backend::MyStore>> {
///     let url = afk_conformance::require_env("AFK_TEST_MY_URL")?;
///     Some(std::sync::Arc::new(my_backend::MyStore::connect(&url).await.expect("connect")))
/// }
/// ```
#[macro_export]
macro_rules! store_suite {
    ($factory:expr $(,)?) => {
        $crate::store_suite!(@tests $factory);
        mod conformance_large {
            #[allow(unused_imports)]
            use super::*;
            $crate::__store_suite_tests! {
                { $factory }
                large { hundred_thousand_keys_list_in_order }
            }
        }
    };
    ($factory:expr, skip_large $(,)?) => {
        $crate::store_suite!(@tests $factory);
    };
    (@tests $factory:expr) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__with_cases!(__store_suite_tests! { $factory });
        }
    };
}
