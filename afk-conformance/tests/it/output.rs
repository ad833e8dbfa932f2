//! What a store author sees when a case fails: the failing check's own file and line, the
//! seed, a command that reruns just that case, values cut short; and skipped cases listed.

use std::sync::Arc;

use afk_conformance::__private::{TestId, run_case, run_crash_without_reopen};
use afk_conformance::broken::{Breakage, BrokenStore};
use afk_conformance::cases::torn::concurrent_reader_sees_no_torn_commit;
use afk_conformance::{show_bytes, show_key};
use afk_core::{MemoryStore, store::Store};

fn id(group: &'static str, case: &'static str) -> TestId {
    TestId {
        package: "my-store",
        krate: "conformance",
        module: "conformance::conformance::torn",
        group,
        case,
    }
}

#[test]
fn a_failure_names_the_check_the_seed_and_a_rerun_command() {
    let result = std::panic::catch_unwind(|| {
        run_case(
            id("torn", "concurrent_reader_sees_no_torn_commit"),
            || async {
                let store = BrokenStore::new(MemoryStore::new(), Breakage::PointerFirst);
                Some(Arc::new(store) as Arc<dyn Store>)
            },
            |store| Box::pin(concurrent_reader_sees_no_torn_commit(store)),
        );
    });
    let payload = result.expect_err("the case must fail against a pointer-first store");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .expect("a formatted panic message");
    println!("{msg}");
    assert!(
        msg.contains("[at afk-conformance/src/cases/torn.rs:"),
        "{msg}"
    );
    assert!(msg.contains("(seed "), "{msg}");
    assert!(
        msg.contains(
            "cargo test -p my-store --test conformance -- --exact \
             conformance::torn::concurrent_reader_sees_no_torn_commit"
        ),
        "{msg}"
    );
    assert!(msg.contains("AFK_SEED="), "{msg}");
}

#[test]
fn long_keys_and_values_are_cut_short() {
    let key = "checkpoint:".to_owned() + &"r".repeat(500);
    let shown = show_key(&key);
    assert!(
        shown.len() < 100 && shown.ends_with("…(511 chars)"),
        "{shown}"
    );
    let value = vec![b'x'; 1 << 20];
    let shown = show_bytes(&value);
    assert!(
        shown.len() < 100 && shown.ends_with("…(1048576 bytes)"),
        "{shown}"
    );
    assert_eq!(show_bytes(b"short"), "\"short\"");
}

#[test]
fn a_case_skipped_for_a_missing_capability_is_listed() {
    run_crash_without_reopen(
        id("crash", "killed_writer_leaves_whole_commits"),
        || async { Some(Arc::new(MemoryStore::new()) as Arc<dyn Store>) },
    );
    let skipped = afk_conformance::skipped();
    assert!(
        skipped.iter().any(
            |(case, why)| case == "crash::killed_writer_leaves_whole_commits"
                && why.contains("memory store reports durable = false")
        ),
        "{skipped:?}"
    );
}
