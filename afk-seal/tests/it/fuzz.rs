//! The sealed-value decoder fed damaged and arbitrary bytes through a real `SealedStore` read:
//! real sealed values (a record, a latest pointer, an effect row, a transcript entry)
//! bit-flipped, cut, grown, relabelled with another data key id (one the thread lacks, or
//! garbage), given another length byte, moved to another key, or replaced by random bytes
//! behind the seal's marker. Every read ends, within a bound, in the original value (only for
//! bytes left as sealed) or a typed error naming the key: `Corrupt`, or `InvalidConfig` naming
//! the data key id the thread lacks. Never a panic, a hang or other bytes.
//!
//! Each outcome must be reached (checked at the end). Seeded: the seed is printed and
//! `AFK_SEED=<seed>` replays it. `AFK_FUZZ_CASES` (default 3,000) and `AFK_FUZZ_SECONDS` (no
//! bound by default) size it; `cargo xtask ci` runs it for a minute.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use afk_core::store::{Commit, Store, latest_key};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_seal::{Key, Keyring, MemoryKeyring, SealedStore, StaticKeys};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// One change to a sealed value.
#[derive(Debug, Clone)]
enum Damage {
    /// Flip bit `bit` of the byte at `at` (modulo the length).
    Flip { at: usize, bit: u8 },
    /// Keep the first `len` bytes (modulo the length).
    Cut { len: usize },
    /// Insert `byte` at `at`.
    Insert { at: usize, byte: u8 },
    /// Set the key id's length byte.
    IdLength(u8),
    /// Name another data key: one the thread does not hold (`d2`), or garbage.
    Relabel(Vec<u8>),
    /// Random bytes behind the marker, or with no marker at all.
    Random { marked: bool, bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Damage::Flip { at, bit }),
        2 => any::<usize>().prop_map(|len| Damage::Cut { len }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Damage::Insert { at, byte }),
        1 => any::<u8>().prop_map(Damage::IdLength),
        2 => prop_oneof![
            Just(b"d2".to_vec()),
            proptest::collection::vec(any::<u8>(), 1..4),
        ]
        .prop_map(Damage::Relabel),
        1 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..160))
            .prop_map(|(marked, bytes)| Damage::Random { marked, bytes }),
    ]
}

fn apply(v: &mut Vec<u8>, d: &Damage) {
    match d {
        Damage::Flip { at, bit } if !v.is_empty() => {
            let n = v.len();
            v[at % n] ^= 1 << bit;
        }
        Damage::Flip { .. } => {}
        Damage::Cut { len } => v.truncate(len % (v.len() + 1)),
        Damage::Insert { at, byte } => v.insert(at % (v.len() + 1), *byte),
        Damage::IdLength(b) if v.len() > 4 => v[4] = *b,
        Damage::IdLength(_) => {}
        Damage::Relabel(id) if v.len() > 4 => {
            let old = usize::from(v[4]).min(v.len() - 5);
            v.splice(5..5 + old, id.iter().copied());
            v[4] = id.len() as u8;
        }
        Damage::Relabel(_) => {}
        Damage::Random { marked, bytes } => {
            v.clear();
            if *marked {
                v.extend_from_slice(b"afk\x01");
            }
            v.extend_from_slice(bytes);
        }
    }
}

/// One case: which value, moved to which key, and what was done to it.
#[derive(Debug, Clone)]
struct Case {
    value: usize,
    moved: bool,
    damage: Vec<Damage>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0usize..4,
        proptest::bool::weighted(0.1),
        proptest::collection::vec(damage(), 0..4),
    )
        .prop_map(|(value, moved, damage)| Case {
            value,
            moved,
            damage,
        })
}

/// How a read ended.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Outcome {
    /// The value as sealed (no change, or a change that was undone).
    Original,
    /// Refused before decryption: not the seal's shape.
    Malformed,
    /// Names a data key the thread does not hold.
    UnknownKey,
    /// Well-formed, but does not authenticate.
    Forged,
}

fn cases_and_deadline() -> (u32, Option<Instant>) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = var("AFK_FUZZ_CASES").unwrap_or(3_000) as u32;
    let deadline = var("AFK_FUZZ_SECONDS").map(|s| Instant::now() + Duration::from_secs(s));
    (cases, deadline)
}

#[tokio::test]
async fn the_decoder_takes_damaged_and_arbitrary_bytes() {
    let (store, inner, thread, run, epoch, values) = setup().await;
    let keys: Vec<&String> = values.keys().collect();
    let seed = afk_core::testkit::seed_or(rand_seed);
    let (cases, deadline) = cases_and_deadline();
    println!("fuzz: seed {seed} (replay with AFK_SEED={seed}), up to {cases} cases");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let mut seen: BTreeMap<Outcome, u64> = BTreeMap::new();
    let mut ran = 0u64;
    for i in 0..cases {
        if deadline.is_some_and(|d| Instant::now() > d) {
            break;
        }
        let c = case().new_tree(&mut runner).unwrap().current();
        let key = keys[c.value].clone();
        let (sealed, plain) = &values[&key];
        let mut raw = sealed.clone();
        for d in &c.damage {
            apply(&mut raw, d);
        }
        let at = if c.moved {
            keys[(c.value + 1) % keys.len()].clone()
        } else {
            key.clone()
        };
        let put = Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: if at.ends_with(":latest") {
                vec![]
            } else {
                vec![(at.clone(), raw.clone())]
            },
            latest: at.ends_with(":latest").then(|| raw.clone()),
            attention: None,
        };
        inner.commit(&put).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(5), store.get(&thread, &at))
            .await
            .unwrap_or_else(|_| panic!("seed {seed} case {i}: the read hung: {c:?}"));
        let why = |what: &str| format!("seed {seed} case {i}: {what}: {c:?} -> {}", hex(&raw));
        let outcome = match read {
            Ok(Some(v)) => {
                assert!(
                    raw == *sealed && at == key,
                    "{}",
                    why("damaged bytes opened")
                );
                assert_eq!(v, *plain, "{}", why("opened to other bytes"));
                Outcome::Original
            }
            Ok(None) => panic!("{}", why("a stored value read as missing")),
            Err(e) => {
                assert_eq!(e.key(), Some(at.as_str()), "{}", why(&format!("{e}")));
                match e.kind() {
                    ErrorKind::Corrupt
                        if e.message().contains("does not open")
                            || e.message().contains("authenticate") =>
                    {
                        Outcome::Forged
                    }
                    ErrorKind::Corrupt => Outcome::Malformed,
                    ErrorKind::InvalidConfig => {
                        assert!(e.message().contains("data key"), "{}", why(&format!("{e}")));
                        Outcome::UnknownKey
                    }
                    _ => panic!("{}", why(&format!("untyped error {e}"))),
                }
            }
        };
        *seen.entry(outcome).or_default() += 1;
        ran += 1;
    }
    println!("fuzz: {ran} cases: {seen:?}");
    for o in [
        Outcome::Original,
        Outcome::Malformed,
        Outcome::UnknownKey,
        Outcome::Forged,
    ] {
        assert!(
            seen.contains_key(&o) || ran < 500,
            "seed {seed}: no case reached {o:?} in {ran}: {seen:?}"
        );
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A sealed thread with four values sealed under its data key `d1`: key → (as stored, as
/// written).
async fn setup() -> (
    Arc<SealedStore>,
    Arc<MemoryStore>,
    ThreadId,
    RunId,
    afk_core::store::Epoch,
    BTreeMap<String, (Vec<u8>, Vec<u8>)>,
) {
    let inner = Arc::new(MemoryStore::new());
    let ring: Arc<dyn Keyring> = Arc::new(MemoryKeyring::default());
    let source = Arc::new(StaticKeys::new("k1", Key::generate()).unwrap());
    let store = Arc::new(SealedStore::new(inner.clone(), source, ring));
    let thread = ThreadId::new("t").unwrap();
    let run = RunId::new("r").unwrap();
    let epoch = store.claim(&thread, &run).await.unwrap();
    let plain: Vec<(String, Vec<u8>)> = vec![
        (
            "checkpoint:r:1:step_started".into(),
            br#"{"step":1,"text":"hello"}"#.to_vec(),
        ),
        (
            "effect:r:1:c1".into(),
            br#"{"input_hash":"ab","output":{"x":1}}"#.to_vec(),
        ),
        ("messages:r:00000000000000000000".into(), vec![0u8; 40]),
    ];
    let latest = br#"{"latest":true}"#.to_vec();
    store
        .commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: plain.clone(),
            latest: Some(latest.clone()),
            attention: None,
        })
        .await
        .unwrap();
    let raw = inner.snapshot(&thread);
    let mut values = BTreeMap::new();
    for (k, v) in plain {
        values.insert(k.clone(), (raw[&k].clone(), v));
    }
    let lk = latest_key(&run);
    values.insert(lk.clone(), (raw[&lk].clone(), latest));
    (store, inner, thread, run, epoch, values)
}
