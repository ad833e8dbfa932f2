//! Packs: a commit's small values go end to end into one object (one PUT for a step's records),
//! each read back with a ranged GET; a pack is deleted once none of its values is live, across
//! overwrites, deletes, flushes and merges, and never before.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use afk_core::store::{Commit, Epoch, Store};
use afk_core::{RunId, ThreadId};
use afk_store_s3::{S3Config, S3Store};
use aws_sdk_s3::Client;

fn commit(run: &RunId, epoch: Epoch, puts: &[(String, Vec<u8>)]) -> Commit {
    Commit {
        thread: ThreadId::new("t").unwrap(),
        run: run.clone(),
        epoch,
        puts: puts.to_vec(),
        latest: Some(b"{\"step\":1}".to_vec()),
        attention: None,
    }
}

fn key(run: &str, i: u64) -> String {
    format!("effect:{run}:{i}:call")
}

/// The object keys under the run's `o/` folder.
async fn stored(raw: &Client, cfg: &S3Config, run: &str) -> BTreeSet<String> {
    common::objects(raw, &cfg.bucket, &format!("afk/test/t/{run}/o/"))
        .await
        .into_iter()
        .collect()
}

/// The object a slot of a head or segment names (`"<suffix>"` or `{"p": "<suffix>", ..}`).
fn named(run: &str, slot: &serde_json::Value) -> Option<String> {
    let suffix = slot.as_str().or_else(|| slot["p"].as_str())?;
    Some(format!("afk/test/t/{run}/o/{suffix}"))
}

/// Objects named by any slot of the head or of a segment it lists (shadowed slots of a segment
/// included), and the object of each key a reader sees (the newest layer naming it).
async fn names(
    raw: &Client,
    cfg: &S3Config,
    run: &str,
) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let head = common::raw_head(raw, cfg, "t", run).await;
    let mut layers = vec![head.clone()];
    for seg in head["segs"].as_array().cloned().unwrap_or_default() {
        let name = format!("afk/test/t/{run}/i/{}", seg["id"].as_str().unwrap());
        layers.push(common::raw_json(raw, &cfg.bucket, &name).await);
    }
    let (mut any, mut live) = (BTreeSet::new(), BTreeMap::new());
    let mut decided = BTreeSet::new();
    for layer in &layers {
        for (k, slot) in layer["keys"].as_object().unwrap() {
            let obj = named(run, slot);
            any.extend(obj.clone());
            if decided.insert(k.clone())
                && let Some(obj) = obj
            {
                live.insert(k.clone(), obj);
            }
        }
        for k in layer["gone"].as_array().cloned().unwrap_or_default() {
            decided.insert(k.as_str().unwrap().to_owned());
        }
    }
    (any, live)
}

#[tokio::test]
async fn a_commits_small_values_share_one_put_and_each_reads_back_exactly() {
    let Some((store, cfg)) = common::store("packs").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_p").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let big: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 253) as u8).collect();
    let puts: Vec<(String, Vec<u8>)> = vec![
        (key("run_p", 0), Vec::new()),
        (key("run_p", 1), (0..=255u8).collect()),
        (key("run_p", 2), b"text \xe2\x9c\x93".to_vec()),
        (key("run_p", 3), big.clone()),
        (key("run_p", 4), vec![7; 5000]),
    ];
    let before = store.traffic();
    store.commit(&commit(&r, epoch, &puts)).await.unwrap();
    let after = store.traffic();
    // The four small values in one pack, the 300 KiB one alone, then the head.
    assert_eq!(after.puts - before.puts, 3, "{before:?} -> {after:?}");
    let objects = stored(&raw, &cfg, "run_p").await;
    assert_eq!(objects.len(), 2, "{objects:?}");
    assert!(objects.iter().any(|o| o.ends_with("/p0")), "{objects:?}");

    let cold = S3Store::open(cfg.clone()).await.unwrap();
    let keys: Vec<String> = puts.iter().map(|(k, _)| k.clone()).collect();
    for s in [&store, &cold] {
        for (k, v) in &puts {
            assert_eq!(s.get(&t, k).await.unwrap().as_ref(), Some(v), "{k}");
        }
        let many = s.get_many(&t, &keys).await.unwrap();
        let want: Vec<Option<Vec<u8>>> = puts.iter().map(|(_, v)| Some(v.clone())).collect();
        assert_eq!(many, want);
    }
    // The empty value costs no request.
    let gets = store.traffic().gets;
    assert_eq!(store.get(&t, &keys[0]).await.unwrap(), Some(Vec::new()));
    assert_eq!(store.traffic().gets - gets, 1, "the head only");
}

#[tokio::test]
async fn a_pack_stays_while_one_value_is_live_and_goes_with_the_last() {
    let Some((store, cfg)) = common::store("packs-gc").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_g").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let k = |i| key("run_g", i);
    let v = |s: &str| s.as_bytes().to_vec();
    store
        .commit(&commit(&r, epoch, &[(k(1), v("a1")), (k(2), v("a2"))]))
        .await
        .unwrap();
    let pack = stored(&raw, &cfg, "run_g").await;
    assert_eq!(pack.len(), 1);
    // Overwrite one of its values: the pack still holds the other.
    store
        .commit(&commit(&r, epoch, &[(k(1), v("b1"))]))
        .await
        .unwrap();
    assert!(pack.is_subset(&stored(&raw, &cfg, "run_g").await));
    assert_eq!(store.get(&t, &k(2)).await.unwrap(), Some(v("a2")));
    // Overwrite the other: the pack is garbage and goes.
    store
        .commit(&commit(&r, epoch, &[(k(2), v("b2")), (k(3), v("b3"))]))
        .await
        .unwrap();
    let now = stored(&raw, &cfg, "run_g").await;
    assert!(pack.is_disjoint(&now), "{pack:?} still in {now:?}");
    assert_eq!(store.get(&t, &k(1)).await.unwrap(), Some(v("b1")));
    // Deletes likewise: the pack of k2 and k3 stays for k3, then goes with it.
    let second: BTreeSet<String> = now.iter().filter(|o| o.ends_with("/p0")).cloned().collect();
    assert_eq!(second.len(), 1, "{now:?}");
    store.delete(&t, &[k(2)]).await.unwrap();
    assert!(second.is_subset(&stored(&raw, &cfg, "run_g").await));
    assert_eq!(store.get(&t, &k(3)).await.unwrap(), Some(v("b3")));
    store.delete(&t, &[k(3)]).await.unwrap();
    assert!(second.is_disjoint(&stored(&raw, &cfg, "run_g").await));
    assert_eq!(store.get(&t, &k(3)).await.unwrap(), None);
    assert_eq!(store.get(&t, &k(1)).await.unwrap(), Some(v("b1")));
}

/// A small deterministic generator, so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test]
async fn packs_across_flushes_and_merges_lose_nothing_and_leave_no_garbage() {
    let Some((store, cfg)) = common::store("packs-model").await else {
        return;
    };
    let seed = afk_core::testkit::seed_or(|| rand::random::<u64>() | 1);
    eprintln!("AFK_SEED={seed}");
    let raw = common::raw_client(&cfg).await;
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_m").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let mut rng = Rng(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let (mut collected, mut kept_partly_dead) = (0usize, 0usize);
    // Each pack seen so far, with the keys it held when first seen.
    let mut packs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for round in 0..160u64 {
        if round % 13 == 12 {
            let doomed: Vec<String> = (0..1 + rng.below(3))
                .map(|_| key("run_m", rng.below(70)))
                .collect();
            store.delete(&t, &doomed).await.unwrap();
            for d in &doomed {
                model.remove(d);
            }
            continue;
        }
        let mut puts: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for _ in 0..1 + rng.below(6) {
            let len = rng.below(120) as usize;
            let value = format!("{round}:{len}:").into_bytes().repeat(len / 8 + 1);
            puts.insert(key("run_m", rng.below(70)), value);
        }
        let puts: Vec<(String, Vec<u8>)> = puts.into_iter().collect();
        store.commit(&commit(&r, epoch, &puts)).await.unwrap();
        model.extend(puts);

        let objects = stored(&raw, &cfg, "run_m").await;
        let (any, live) = names(&raw, &cfg, "run_m").await;
        // Nothing a reader can reach is gone; nothing is kept that no layer names.
        for (k, obj) in &live {
            assert!(
                objects.contains(obj),
                "seed {seed} round {round}: {k} -> {obj}"
            );
        }
        assert!(objects.is_subset(&any), "seed {seed} round {round}");
        for (k, obj) in live.iter().filter(|(_, o)| o.contains("/p")) {
            packs.entry(obj.clone()).or_default().insert(k.clone());
        }
        packs.retain(|pack, keys| {
            if !objects.contains(pack) {
                collected += 1;
                return false;
            }
            // Kept while part of it is dead: one of its keys now lives elsewhere or is gone.
            if keys.iter().any(|k| live.get(k) != Some(pack)) {
                kept_partly_dead += 1;
            }
            true
        });
    }
    let head = common::raw_head(&raw, &cfg, "t", "run_m").await;
    let merged = head["segs"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s["l"].as_u64() >= Some(1)));
    eprintln!("packs collected {collected}, kept while partly dead {kept_partly_dead}");
    // The run reached the cases the test is about.
    assert!(merged, "no merge happened: {head}");
    assert!(collected > 0, "no pack was ever collected (seed {seed})");
    assert!(
        kept_partly_dead > 0,
        "no pack outlived a commit (seed {seed})"
    );

    let cold = S3Store::open(cfg.clone()).await.unwrap();
    for i in 0..70 {
        let k = key("run_m", i);
        assert_eq!(
            cold.get(&t, &k).await.unwrap().as_ref(),
            model.get(&k),
            "seed {seed}: {k}"
        );
    }
    store.delete_run(&t, &r).await.unwrap();
    assert!(
        common::objects(&raw, &cfg.bucket, "afk/test/t/run_m/")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_slot_naming_bytes_its_pack_lacks_is_corrupt_not_a_wrong_value() {
    let Some((store, cfg)) = common::store("packs-corrupt").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_c").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let (k1, k2) = (key("run_c", 1), key("run_c", 2));
    let puts = [(k1.clone(), vec![1u8; 40]), (k2.clone(), vec![2u8; 60])];
    store.commit(&commit(&r, epoch, &puts)).await.unwrap();
    // Break the head: k1's range runs past the pack's end, k2's starts past it.
    let mut head = common::raw_head(&raw, &cfg, "t", "run_c").await;
    head["keys"][&k1]["r"] = serde_json::json!([0, 1000]);
    head["keys"][&k2]["r"] = serde_json::json!([5000, 10]);
    raw.put_object()
        .bucket(&cfg.bucket)
        .key("afk/test/t/run_c/head")
        .body(serde_json::to_vec(&head).unwrap().into())
        .send()
        .await
        .unwrap();
    for k in [&k1, &k2] {
        let err = store.get(&t, k).await.unwrap_err();
        assert!(err.is_corrupt(), "{k}: {err:?}");
        assert_eq!(err.key(), Some(k.as_str()), "{err:?}");
    }
}
