//! The latest pointer of a record commit ([`Writer::submit_record`]) is made when the commit
//! is handed to the store: after any mix of record commits, plain puts and explicit pointer
//! moves, merged or not, the store holds what applying the commits one by one would give,
//! pointer included.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::{claimed, rid, tid, writer};
use crate::store::latest_key;
use crate::writer::*;

/// One submission: a record that moves the pointer to itself, a put that leaves it, or a put
/// of another key with an explicit pointer value.
#[derive(Debug, Clone)]
enum Op {
    Record { key: usize, value: u8 },
    Put { key: usize, value: u8 },
    Explicit { key: usize, value: u8, pointer: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, any::<u8>()).prop_map(|(key, value)| Op::Record { key, value }),
        (0..3usize, any::<u8>()).prop_map(|(key, value)| Op::Put { key, value }),
        (0..3usize, any::<u8>(), any::<u8>()).prop_map(|(key, value, pointer)| Op::Explicit {
            key,
            value,
            pointer
        }),
    ]
}

#[test]
fn lazy_pointers_equal_the_commits_applied_in_order() {
    // Cases where a put overwrote, in the same queued commit, the record a lazy pointer took
    // its value from (the pointer must keep the older value).
    static OVERWRITTEN: AtomicU64 = AtomicU64::new(0);
    static MERGED: AtomicU64 = AtomicU64::new(0);
    let ops = prop::collection::vec((op(), prop::bool::weighted(0.15)), 1..30);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let result = runner.run(&(ops, any::<bool>()), |(ops, sync)| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let config = CheckpointConfig::default().with_async_writes(!sync);
            let (fs, w) = writer(config);
            fs.set_latency(Duration::from_millis(3));
            let (t, r) = (tid("t"), rid("r"));
            let e = claimed(&fs, &t, &r).await;
            let key = |k: usize| format!("checkpoint:{r}:{k}:runtime_state");
            let commit = |puts: Vec<(String, Vec<u8>)>, latest: Option<Vec<u8>>| Commit {
                thread: t.clone(),
                run: r.clone(),
                epoch: e,
                puts,
                latest,
                attention: None,
            };
            let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            let mut pointer: Option<Vec<u8>> = None;
            let mut lazy_key: Option<String> = None;
            for (op, pause) in ops {
                match op {
                    Op::Record { key: k, value } => {
                        w.submit_record(commit(vec![(key(k), vec![value])], None))
                            .await
                            .unwrap();
                        model.insert(key(k), vec![value]);
                        pointer = Some(vec![value]);
                        lazy_key = Some(key(k));
                    }
                    Op::Put { key: k, value } => {
                        w.submit(commit(vec![(key(k), vec![value])], None), false)
                            .await
                            .unwrap();
                        if lazy_key.as_deref() == Some(key(k).as_str())
                            && model.get(&key(k)) != Some(&vec![value])
                        {
                            OVERWRITTEN.fetch_add(1, Ordering::Relaxed);
                        }
                        model.insert(key(k), vec![value]);
                    }
                    Op::Explicit {
                        key: k,
                        value,
                        pointer: p,
                    } => {
                        w.submit(commit(vec![(key(k), vec![value])], Some(vec![p])), false)
                            .await
                            .unwrap();
                        model.insert(key(k), vec![value]);
                        pointer = Some(vec![p]);
                        lazy_key = None;
                    }
                }
                if pause {
                    // Let the writer hand what it holds to the store: a new queued commit.
                    w.barrier(&t, &r, e).await.unwrap();
                    lazy_key = None;
                }
            }
            w.barrier(&t, &r, e).await.unwrap();
            MERGED.fetch_add(w.stats().coalesced, Ordering::Relaxed);
            let mut stored = fs.inner().snapshot(&t);
            stored.remove(&crate::store::run_key(&r));
            let stored_pointer = stored.remove(&latest_key(&r));
            prop_assert_eq!(&stored, &model);
            prop_assert_eq!(stored_pointer, pointer);
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(MERGED.load(Ordering::Relaxed) > 0, "no case merged commits");
    assert!(
        OVERWRITTEN.load(Ordering::Relaxed) > 0,
        "no case overwrote the record a pending pointer takes its value from"
    );
}
