//! The runner levels can fail too: each broken store is caught by the resume, concurrency,
//! corruption or corpus level, and the reference store passes them all, also with fixed seeds
//! that reach every interesting crash.

use std::sync::Arc;

use afk_conformance::broken::{Breakage, BrokenStore};
use afk_conformance::cases::resume::{ResumeConfig, run_resume};
use afk_conformance::cases::{concurrency, corpus, corruption};
use afk_conformance::{CORPUS_CASE, RESUME_CASE};
use afk_core::{MemoryStore, store::Store};

fn broken(breakage: Breakage) -> Arc<dyn Store> {
    Arc::new(BrokenStore::new(MemoryStore::new(), breakage))
}

/// The resume property over fixed seeds: passes on the reference store and reaches a crash
/// mid-batch, a replayed effect and a reused pending answer for each seed.
#[tokio::test(flavor = "multi_thread")]
async fn resume_level_reaches_every_interesting_crash() {
    for seed in 1..=3 {
        let config = ResumeConfig { seed, cases: 16 };
        let stats = run_resume(Arc::new(MemoryStore::new()), config)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(stats.cases >= 16, "{stats:?}"); // plus any top-up cases
        stats
            .require_coverage()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_store_passes_the_optional_levels() {
    for case in [&RESUME_CASE, &CORPUS_CASE] {
        let result = (case.run)(Arc::new(MemoryStore::new())).await;
        assert_eq!(result, Ok(()), "{}::{}", case.module, case.name);
    }
}

/// A store that ignores fencing lets every racing resumer finish the run.
#[tokio::test(flavor = "multi_thread")]
async fn no_fencing_fails_the_concurrency_level() {
    let result = concurrency::racing_resumers_one_finishes(broken(Breakage::NoFencing)).await;
    let Err(msg) = result else {
        panic!("the concurrency level passed a store without fencing");
    };
    println!("{msg}");
    assert!(
        msg.contains("racing resumers finished the run"),
        "caught for another reason: {msg}"
    );
}

/// The racing starters pass on the reference store; a store that ignores fencing lets the
/// runner that lost its claim go on to finish the run, and one whose pointer reads are stale
/// hides the run from the resume after the race (the losing start itself sees the run's
/// records even without its pointer).
#[tokio::test(flavor = "multi_thread")]
async fn racing_starters_catch_no_fencing_and_stale_pointers() {
    assert_eq!(
        concurrency::racing_starters_run_it_once(Arc::new(MemoryStore::new())).await,
        Ok(())
    );
    for (breakage, why) in [
        (Breakage::NoFencing, "want Fenced"),
        (Breakage::StaleLatest, "want EffectUncertain"),
    ] {
        let Err(msg) = concurrency::racing_starters_run_it_once(broken(breakage)).await else {
            panic!("the racing starters passed {breakage:?}");
        };
        println!("{breakage:?}: {msg}");
        assert!(
            msg.contains(why),
            "{breakage:?} caught for another reason: {msg}"
        );
    }
}

/// A store that loses writes is caught by the resume level for every seed tried.
#[tokio::test(flavor = "multi_thread")]
async fn lost_writes_fail_the_resume_level() {
    for (seed, every) in [(1, 3), (2, 5), (3, 10)] {
        let config = ResumeConfig { seed, cases: 16 };
        let result = run_resume(broken(Breakage::LosesWrites(every)), config).await;
        let Err(msg) = result else {
            panic!("seed {seed}: the resume level passed a store losing one commit in {every}");
        };
        println!("seed {seed}, one in {every} lost: {}", first_line(&msg));
    }
}

/// A store that moves the pointer without its records fails every runner level.
#[tokio::test(flavor = "multi_thread")]
async fn pointer_without_record_fails_every_runner_level() {
    let store = || broken(Breakage::PointerWithoutRecord);
    let results = [
        (
            "resume",
            run_resume(store(), ResumeConfig { seed: 1, cases: 4 })
                .await
                .map(|_| ()),
        ),
        (
            "concurrency",
            concurrency::racing_resumers_one_finishes(store()).await,
        ),
        (
            "corruption",
            corruption::corrupted_records_give_typed_errors(store()).await,
        ),
        (
            "corpus",
            corpus::afk_corpus_resumes_as_expected(store()).await,
        ),
    ];
    for (level, result) in results {
        let Err(msg) = result else {
            panic!("the {level} level passed a store that drops records");
        };
        println!("{level}: {}", first_line(&msg));
    }
}

/// A store that loses writes makes the AFK corpus fail (a loaded fixture misses its records).
#[tokio::test(flavor = "multi_thread")]
async fn lost_writes_fail_the_corpus() {
    let result = corpus::afk_corpus_resumes_as_expected(broken(Breakage::LosesWrites(2))).await;
    let Err(msg) = result else {
        panic!("the corpus passed a store losing every second commit");
    };
    println!("{}", first_line(&msg));
}

fn first_line(msg: &str) -> &str {
    msg.lines().next().unwrap_or_default()
}
