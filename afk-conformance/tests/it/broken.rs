//! The suite can fail: each broken store is caught by the cases about the rule it breaks, and
//! the reference store passes every case.

use std::collections::BTreeSet;
use std::sync::Arc;

use afk_conformance::broken::{Breakage, BrokenStore};
use afk_conformance::cases::model::{ModelConfig, run_model};
use afk_conformance::{CASES, Case, LARGE_CASE};
use afk_core::{MemoryStore, store::Store};

/// Run every case against a fresh store from `make`; the names of the cases that failed.
async fn failing(make: impl Fn() -> Arc<dyn Store>) -> BTreeSet<String> {
    let mut failed = BTreeSet::new();
    for case in CASES.iter().chain(std::iter::once(&LARGE_CASE)) {
        let Case { module, name, run } = *case;
        if name == "model_based" {
            continue; // random seed: checked with fixed seeds below
        }
        let store = make();
        if let Err(msg) = run(store).await {
            println!("{module}::{name}: {msg}");
            failed.insert(format!("{module}::{name}"));
        }
    }
    failed
}

fn assert_caught(failed: &BTreeSet<String>, expected: &[&str]) {
    for case in expected {
        assert!(
            failed.contains(*case),
            "{case} did not catch the broken store; failed: {failed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_store_passes_every_case() {
    let failed = failing(|| Arc::new(MemoryStore::new())).await;
    assert!(failed.is_empty(), "MemoryStore failed {failed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pointer_without_record_is_caught() {
    let failed = failing(|| {
        Arc::new(BrokenStore::new(
            MemoryStore::new(),
            Breakage::PointerWithoutRecord,
        ))
    })
    .await;
    assert_caught(
        &failed,
        &[
            "basic::commit_then_get",
            "atomicity::pointer_moves_with_its_record",
            "torn::concurrent_reader_sees_no_torn_commit",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_fencing_is_caught() {
    let failed =
        failing(|| Arc::new(BrokenStore::new(MemoryStore::new(), Breakage::NoFencing))).await;
    assert_caught(
        &failed,
        &[
            "fencing::stale_epoch_is_fenced_and_writes_nothing",
            "fencing::interleaved_claimants_only_newest_commits",
            "fencing::racing_claimants_exactly_one_commits",
            "basic::commit_batch_applies_each_in_order",
        ],
    );
    // The rules it keeps are not reported as broken.
    for kept in [
        "list::list_filters_by_prefix",
        "keys::invalid_keys_are_rejected",
    ] {
        assert!(
            !failed.contains(kept),
            "{kept} failed against a store that only ignores epochs"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_writes_are_caught() {
    let failed = failing(|| {
        Arc::new(BrokenStore::new(
            MemoryStore::new(),
            Breakage::LosesWrites(3),
        ))
    })
    .await;
    assert_caught(
        &failed,
        &[
            "basic::commit_then_get",
            "atomicity::pointer_moves_with_its_record",
        ],
    );
}

/// The model test catches each breakage on its own, for several fixed seeds (fixed so that
/// this test cannot pass or fail by luck), also a store that loses one commit in fifty.
#[tokio::test(flavor = "multi_thread")]
async fn model_test_catches_every_breakage() {
    for seed in 1..=3 {
        let config = ModelConfig { seed, cases: 64 };
        assert_eq!(
            run_model(&MemoryStore::new(), config).await,
            Ok(()),
            "seed {seed}"
        );
        for breakage in [
            Breakage::PointerWithoutRecord,
            Breakage::NoFencing,
            Breakage::LosesWrites(3),
            Breakage::LosesWrites(50),
        ] {
            let store = BrokenStore::new(MemoryStore::new(), breakage);
            let result = run_model(&store, config).await;
            let Err(msg) = result else {
                panic!("seed {seed}: the model test did not catch {breakage:?}");
            };
            println!("seed {seed}, {breakage:?}: {msg}");
        }
    }
}

/// The model test's explicit operations catch read bugs and shrink them to a named case: a
/// `get_many` answered in sorted order, and a page that drops the key after its cursor (named
/// by an explicit page from a cursor, or by a whole listing, whose later pages start from one;
/// not only by the final comparison).
#[tokio::test(flavor = "multi_thread")]
async fn model_test_names_read_bugs() {
    for (breakage, named) in [
        (Breakage::GetManySorted, &["get_many"][..]),
        (Breakage::PageDropsKey, &["from cursor", ": list \""][..]),
    ] {
        for seed in 1..=3 {
            let config = ModelConfig { seed, cases: 64 };
            let store = BrokenStore::new(MemoryStore::new(), breakage);
            let Err(msg) = run_model(&store, config).await else {
                panic!("seed {seed}: the model test did not catch {breakage:?}");
            };
            assert!(
                named.iter().any(|n| msg.contains(n)),
                "seed {seed}, {breakage:?}: {msg}"
            );
            println!(
                "seed {seed}, {breakage:?}: {}",
                msg.lines().next().unwrap_or("")
            );
        }
    }
}
