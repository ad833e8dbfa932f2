//! The bytes a step writes depend on what the step added, not on the history.
//!
//! Bytes are deterministic (a manual clock, sequential ids, sync writes), so this is a test, not
//! a benchmark: one scripted run of 1000 tool steps behind the benches' byte-counting store
//! wrapper, and step 1000 must write about what step 10 wrote.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../benches/support/mod.rs"]
mod support;

use std::sync::Arc;

use afk::runner::Outcome;
use afk::{MemoryStore, RunId};
use support::counting::{Counter, CountingStore};
use support::{agent, runner, thread};

/// Bytes step `step` wrote, leaving out the terminal record (it carries the run's result once).
fn step_bytes(store: &CountingStore, step: u64) -> (u64, Vec<(String, u64)>) {
    let counts = store.hooks();
    let kinds: Vec<(String, u64)> = counts
        .step_kinds(step)
        .into_iter()
        .filter(|(k, _)| k != "checkpoint:run_terminal")
        .collect();
    let terminal: u64 = counts
        .step_kinds(step)
        .iter()
        .filter(|(k, _)| k == "checkpoint:run_terminal")
        .map(|(_, b)| *b)
        .sum();
    (counts.step_bytes(step) - terminal, kinds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_1000_writes_about_what_step_10_wrote() {
    const STEPS: u64 = 1000;
    let store = Arc::new(CountingStore::new(
        Arc::new(MemoryStore::new()),
        Counter::default(),
    ));
    // Sync writes: every commit is applied as submitted (nothing coalesced away).
    let runner = runner(store.clone(), false);
    let out = runner
        .run_with_id(
            &agent(STEPS),
            &thread(),
            RunId::new("run_bytes").unwrap(),
            "go",
        )
        .result()
        .await
        .expect("run completes");
    assert!(matches!(out, Outcome::Completed(_)), "run paused");

    let (early, early_kinds) = step_bytes(&store, 10);
    let (late, late_kinds) = step_bytes(&store, STEPS);
    println!("step 10: {early} B {early_kinds:?}");
    println!("step {STEPS}: {late} B {late_kinds:?}");
    assert!(early > 0, "step 10 wrote nothing");
    assert!(
        late * 2 <= early * 3,
        "step {STEPS} wrote {late} B, more than 1.5 x step 10's {early} B: \
         step 10 {early_kinds:?}, step {STEPS} {late_kinds:?}"
    );
}
