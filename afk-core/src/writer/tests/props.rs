//! Property tests of the writer: merging keeps per-run order, an abort never leaves a pointer
//! to a missing record, and two claimants never both commit after the second claim.
//!
//! Seeded: set `AFK_SEED` to replay a run (the seed is printed); `PROPTEST_CASES` sets
//! the number of cases. Time is tokio's paused clock, so latencies cost no wall time.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::{Faulty, applied, rid, tid, writer};
use crate::store::{CrashMode, Epoch, FaultEvent, FaultStore, MemoryStore, latest_key};
use crate::writer::*;

fn check<S>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let seed = crate::testkit::seed_or(|| 0x0AF4_5EED);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    println!("{name}: AFK_SEED={seed} PROPTEST_CASES={cases}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{name} failed with AFK_SEED={seed}: {e}");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Op `i` of a run writes `checkpoint:<run>:<i>:<phase>` (and, if `extra`, a message entry
/// too) and points latest at the record.
fn op_commit(run: &RunId, epoch: Epoch, i: u64, coalescible: bool, extra: bool) -> Commit {
    let phase = if coalescible {
        "runtime_state"
    } else {
        "pre_llm"
    };
    let key = format!("checkpoint:{run}:{i}:{phase}");
    let mut puts = vec![(key.clone(), i.to_le_bytes().to_vec())];
    if extra {
        puts.push((format!("messages:{run}:{i:020}"), vec![1]));
    }
    Commit {
        thread: tid("t"),
        run: run.clone(),
        epoch,
        puts,
        latest: Some(key.into_bytes()),
        attention: None,
    }
}

fn index_of(key: &str) -> u64 {
    key.split(':').nth(2).and_then(|s| s.parse().ok()).unwrap()
}

#[test]
fn coalescing_never_reorders_a_runs_records() {
    static COALESCED: AtomicU64 = AtomicU64::new(0);
    static MERGED_PHASE: AtomicU64 = AtomicU64::new(0);
    // Barriers in the middle: written inline by the run's barrier, or by the background task
    // (held past `hold`, or the run busy with a background write), in the same sequence.
    static INLINE: AtomicU64 = AtomicU64::new(0);
    static BACKGROUND: AtomicU64 = AtomicU64::new(0);
    let ops = prop::collection::vec(
        (
            0..3usize,
            any::<bool>(),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.15),
        ),
        1..40,
    );
    check(
        "coalescing_never_reorders",
        (ops, 0..30u64),
        |(ops, latency_ms)| {
            runtime().block_on(async {
                let (fs, w) = writer(CheckpointConfig::default());
                fs.set_latency(Duration::from_millis(latency_ms));
                let t = tid("t");
                let runs: Vec<RunId> = (0..3).map(|i| rid(&format!("r{i}"))).collect();
                let mut epochs = Vec::new();
                for r in &runs {
                    epochs.push(fs.inner().claim(&t, r).await.unwrap());
                }
                let mut submitted: Vec<Vec<(u64, bool)>> = vec![Vec::new(); 3];
                for (i, &(r, coalescible, pause, barrier)) in ops.iter().enumerate() {
                    let i = i as u64;
                    w.submit(
                        op_commit(&runs[r], epochs[r], i, coalescible, false),
                        coalescible,
                    )
                    .await
                    .unwrap();
                    submitted[r].push((i, coalescible));
                    if pause {
                        tokio::time::sleep(Duration::from_millis(latency_ms / 2 + 1)).await;
                    }
                    if barrier {
                        w.barrier(&t, &runs[r], epochs[r]).await.unwrap();
                    }
                }
                for (r, e) in runs.iter().zip(&epochs) {
                    w.barrier(&t, r, *e).await.unwrap();
                }
                let stats = w.stats();
                COALESCED.fetch_add(stats.coalesced, Ordering::Relaxed);
                INLINE.fetch_add(stats.inline, Ordering::Relaxed);
                BACKGROUND.fetch_add(stats.batches - stats.inline, Ordering::Relaxed);
                for (r, run) in runs.iter().enumerate() {
                    let commits = applied(&fs, run);
                    let order: Vec<u64> = commits.iter().flatten().map(|k| index_of(k)).collect();
                    let expected: Vec<u64> = submitted[r].iter().map(|(i, _)| *i).collect();
                    prop_assert_eq!(&order, &expected, "applied order of {} differs", run);
                    if commits
                        .iter()
                        .any(|c| c.len() > 1 && c.iter().any(|k| !k.ends_with("runtime_state")))
                    {
                        MERGED_PHASE.fetch_add(1, Ordering::Relaxed);
                    }
                    let latest = fs.inner().get(&t, &latest_key(run)).await.unwrap();
                    let want = submitted[r].last().map(|(i, c)| {
                        let phase = if *c { "runtime_state" } else { "pre_llm" };
                        format!("checkpoint:{run}:{i}:{phase}").into_bytes()
                    });
                    prop_assert_eq!(latest, want);
                }
                Ok(())
            })
        },
    );
    assert!(
        COALESCED.load(Ordering::Relaxed) > 0,
        "no case coalesced anything"
    );
    assert!(
        MERGED_PHASE.load(Ordering::Relaxed) > 0,
        "no case merged a phase record with another commit"
    );
    eprintln!(
        "coalescing_never_reorders: {} writes by barriers, {} by the background task",
        INLINE.load(Ordering::Relaxed),
        BACKGROUND.load(Ordering::Relaxed)
    );
    assert!(
        INLINE.load(Ordering::Relaxed) > 0,
        "no barrier wrote inline"
    );
    assert!(
        BACKGROUND.load(Ordering::Relaxed) > 0,
        "the background task wrote nothing"
    );
}

/// Every latest pointer names a record that exists, and each run's present records are a
/// prefix of what it submitted.
async fn assert_consistent(
    fs: &Faulty,
    runs: &[RunId],
    submitted: &[Vec<u64>],
) -> Result<(), TestCaseError> {
    let t = tid("t");
    for (r, run) in runs.iter().enumerate() {
        if let Some(ptr) = fs.inner().get(&t, &latest_key(run)).await.unwrap() {
            let key = String::from_utf8(ptr).unwrap();
            prop_assert!(
                fs.inner().get(&t, &key).await.unwrap().is_some(),
                "dangling pointer {}",
                key
            );
        }
        let page = fs
            .inner()
            .list(&t, &format!("checkpoint:{run}:"), None, 1000)
            .await
            .unwrap();
        let present: BTreeSet<u64> = page
            .keys
            .iter()
            .filter(|k| !k.ends_with(":latest"))
            .map(|k| index_of(k))
            .collect();
        let prefix: BTreeSet<u64> = submitted[r].iter().copied().take(present.len()).collect();
        prop_assert_eq!(&present, &prefix, "records of {} are not a prefix", run);
        for i in &present {
            let msg = fs
                .inner()
                .get(&t, &format!("messages:{run}:{i:020}"))
                .await
                .unwrap();
            prop_assert!(msg.is_some(), "commit {} of {} was split", i, run);
        }
    }
    Ok(())
}

#[test]
fn aborting_the_writer_never_leaves_a_pointer_to_a_missing_record() {
    let ops = prop::collection::vec((0..3usize, any::<bool>()), 1..30);
    let crash = prop::option::of(0..20u64);
    check(
        "abort_never_dangles",
        (ops, 0..20u64, 0..200u64, crash),
        |(ops, latency, abort_at, crash)| {
            runtime().block_on(async {
                let (fs, w) = writer(CheckpointConfig {
                    max_batch_size: 2,
                    ..Default::default()
                });
                fs.set_latency(Duration::from_millis(latency));
                if let Some(n) = crash {
                    fs.crash_after_commits(n, CrashMode::Silent);
                }
                let t = tid("t");
                let runs: Vec<RunId> = (0..3).map(|i| rid(&format!("r{i}"))).collect();
                let mut epochs = Vec::new();
                for r in &runs {
                    epochs.push(fs.inner().claim(&t, r).await.unwrap());
                }
                let killer = {
                    let w = w.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(abort_at)).await;
                        w.abort();
                    })
                };
                let mut submitted: Vec<Vec<u64>> = vec![Vec::new(); 3];
                for (i, &(r, coalescible)) in ops.iter().enumerate() {
                    let c = op_commit(&runs[r], epochs[r], i as u64, coalescible, true);
                    if w.submit(c, coalescible).await.is_ok() {
                        submitted[r].push(i as u64);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                killer.await.unwrap();
                for (r, e) in runs.iter().zip(&epochs) {
                    let done =
                        tokio::time::timeout(Duration::from_secs(3600), w.barrier(&t, r, *e)).await;
                    prop_assert!(done.is_ok(), "barrier hung after abort");
                }
                assert_consistent(&fs, &runs, &submitted).await
            })
        },
    );
}

#[derive(Debug, Clone)]
enum Action {
    Claim(usize),
    Submit(usize, bool),
    Sleep(u64),
}

#[test]
fn two_claimants_never_both_commit_after_the_second_claim() {
    let action = prop_oneof![
        4 => (0..2usize, any::<bool>()).prop_map(|(c, co)| Action::Submit(c, co)),
        1 => (0..15u64).prop_map(Action::Sleep),
    ];
    let plan = (
        prop::collection::vec(action, 0..30),
        0..30usize,
        0..30usize,
        0..10u64,
    );
    check("two_claimants", plan, |(mut actions, pa, pb, latency)| {
        // Each claimant claims exactly once, at an arbitrary point.
        actions.insert(pa.min(actions.len()), Action::Claim(0));
        actions.insert(pb.min(actions.len()), Action::Claim(1));
        runtime().block_on(async {
            let fs = Arc::new(FaultStore::new(MemoryStore::new()));
            fs.set_latency(Duration::from_millis(latency));
            let store: Arc<dyn Store> = fs.clone();
            let writers: Vec<Writer> = (0..2)
                .map(|i| {
                    Writer::new(
                        store.clone(),
                        CheckpointConfig::default(),
                        RandomSource::seeded(i),
                    )
                    .unwrap()
                })
                .collect();
            let (t, run) = (tid("t"), rid("r"));
            let mut epochs: [Option<Epoch>; 2] = [None, None];
            let mut after_second: [bool; 2] = [false, false];
            let mut i = 0u64;
            for a in &actions {
                match *a {
                    Action::Claim(c) => epochs[c] = Some(fs.claim(&t, &run).await.unwrap()),
                    Action::Submit(c, co) => {
                        if let Some(e) = epochs[c] {
                            i += 1;
                            let _ = writers[c]
                                .submit(op_commit(&run, e, i, co, false), co)
                                .await;
                            after_second[c] |= epochs.iter().all(Option::is_some);
                        }
                    }
                    Action::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                }
            }
            let mut results = Vec::new();
            for (w, e) in writers.iter().zip(&epochs) {
                results.push(w.barrier(&t, &run, e.unwrap_or_default()).await);
            }
            let second = if epochs[0] > epochs[1] { 0 } else { 1 };
            let winner = epochs[second].unwrap();
            let mut claims = 0;
            for ev in fs.log() {
                match ev {
                    FaultEvent::Claim { .. } => claims += 1,
                    FaultEvent::Commit(c) if claims == 2 => {
                        prop_assert_eq!(
                            c.epoch,
                            winner,
                            "the first claimant committed after the second claim"
                        );
                    }
                    FaultEvent::Commit(_) => {}
                }
            }
            prop_assert!(
                results[second].is_ok(),
                "the second claimant must go on: {:?}",
                results[second]
            );
            let first = 1 - second;
            if after_second[first] {
                let kind = results[first].as_ref().err().map(|e| e.kind());
                prop_assert_eq!(
                    kind,
                    Some(ErrorKind::Fenced),
                    "the first claimant must learn it was fenced"
                );
            }
            Ok(())
        })
    });
}
