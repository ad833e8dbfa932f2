//! `afk rekey` and `afk erase` on a store sealed at rest, checked against the bytes the store
//! underneath holds: a rotation to a new key-encryption key lets the old one go; a new data
//! key re-seals every value of the thread and no other; errors name the variable or the key
//! id; and the real binary, SIGKILLed at random moments many times, leaves every value
//! readable, and a rerun finishes (RocksDB, Redis, S3).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use afk::store::{Commit, Store, StoreExt};
use afk::{RunId, ThreadId};
use afk_seal::{DirKeyring, SealedStore, StaticKeys};
use serde_json::Value;

#[cfg(feature = "s3")]
use crate::cli_ops::s3_url;
#[cfg(feature = "redis")]
use crate::cli_ops::{require_env, unique};
use crate::common::{afk_env, rocks};

const K1: &str = "k1=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const K2: &str = "k2=1111111111111111111111111111111111111111111111111111111111111111";

/// Both keys, the new one active.
fn k2_then_k1() -> String {
    format!("{K2},{K1}")
}

/// A small seeded generator (splitmix64): the seed is printed, `AFK_TEST_SEED` replays it.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("AFK_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("seed {seed} (AFK_TEST_SEED={seed} replays it)");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// The store `url`, sealed with `keys` and the keyring in `ring`, on a fresh runtime.
fn with_sealed<T>(
    url: &str,
    ring: &Path,
    keys: &str,
    body: impl AsyncFnOnce(SealedStore) -> T,
) -> T {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let inner = afk::open(url).await.unwrap();
        let source = Arc::new(StaticKeys::parse(keys).unwrap());
        let ring = Arc::new(DirKeyring::open(ring).unwrap());
        body(SealedStore::new(inner, source, ring)).await
    })
}

/// Write `runs` runs of `values` transcript entries (and a latest pointer) to each thread.
fn populate(url: &str, ring: &Path, threads: &[String], runs: usize, values: u64) {
    with_sealed(url, ring, K1, async |store| {
        let chunk = store.capabilities().max_commit_keys.unwrap_or(50).min(50);
        for thread in threads {
            let thread = ThreadId::new(thread).unwrap();
            for r in 0..runs {
                let run = RunId::new(format!("r{r}")).unwrap();
                let epoch = store.claim(&thread, &run).await.unwrap();
                let puts: Vec<(String, Vec<u8>)> = (0..values)
                    .map(|i| {
                        let v = format!("{{\"secret\":\"{thread} {run} {i}\"}}");
                        (afk::keys::messages_key(&run, i), v.into_bytes())
                    })
                    .collect();
                for (n, part) in puts.chunks(chunk).enumerate() {
                    let last = (n + 1) * chunk >= puts.len();
                    let c = Commit {
                        thread: thread.clone(),
                        run: run.clone(),
                        epoch,
                        puts: part.to_vec(),
                        latest: last.then(|| format!("latest of {run}").into_bytes()),
                        attention: None,
                    };
                    store.commit(&c).await.unwrap();
                }
            }
        }
    });
}

/// Every value of the threads opened with `keys` (fences aside), or the first error.
fn plain(
    url: &str,
    ring: &Path,
    keys: &str,
    threads: &[String],
) -> afk::Result<BTreeMap<String, Vec<u8>>> {
    with_sealed(url, ring, keys, async |store| {
        let mut out = BTreeMap::new();
        for thread in threads {
            let t = ThreadId::new(thread).unwrap();
            let mut ks = store.list_all(&t, "").await?;
            ks.retain(|k| !k.starts_with("run:"));
            for (k, v) in ks.iter().zip(store.get_many(&t, &ks).await?) {
                out.insert(format!("{thread}/{k}"), v.unwrap_or_default());
            }
        }
        Ok(out)
    })
}

/// The data key each stored value of the threads names, as the store underneath holds it.
fn key_ids(url: &str, threads: &[String]) -> BTreeMap<String, String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let raw = afk::open(url).await.unwrap();
        let mut out = BTreeMap::new();
        for thread in threads {
            let t = ThreadId::new(thread).unwrap();
            let mut ks = raw.list_all(&t, "").await.unwrap();
            ks.retain(|k| !k.starts_with("run:"));
            for (k, v) in ks.iter().zip(raw.get_many(&t, &ks).await.unwrap()) {
                let v = v.unwrap();
                let id = afk_seal::format::parse(&v, k).unwrap().key_id.to_owned();
                out.insert(format!("{thread}/{k}"), id);
            }
        }
        out
    })
}

/// The data key ids the thread's keyring record holds, the active one first.
fn record(ring: &Path, thread: &str) -> Vec<String> {
    let bytes = std::fs::read(ring.join(format!("{thread}.key"))).unwrap();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let active = doc["active"].as_str().unwrap().to_owned();
    let mut ids = vec![active.clone()];
    ids.extend(
        doc["keys"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| **k != active)
            .cloned(),
    );
    ids
}

fn env<'a>(keys: &'a str, ring: &'a str) -> [(&'a str, &'a str); 2] {
    [("AFK_SEAL_KEYS", keys), ("AFK_SEAL_KEYRING", ring)]
}

#[test]
fn rekey_lets_the_old_key_go_and_a_new_data_key_reseals_one_thread_only() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let ring = dir.path().join("ring");
    let threads = ["a".to_owned(), "b".to_owned()];
    populate(&url, &ring, &threads, 2, 5);
    let before = plain(&url, &ring, K1, &threads).unwrap();
    let both = k2_then_k1();
    let ring_s = ring.to_str().unwrap();
    let run = |args: &[&str], keys: &str| {
        let mut all = vec!["--json", "--store", &url];
        all.extend(args);
        afk_env(dir.path(), &all, &env(keys, ring_s))
    };
    let out = run(&["rekey", "--thread", "a", "--new-data-key"], &both);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    let t = &doc["threads"][0];
    assert_eq!(
        (t["kek"].as_str(), t["data_key"].as_str()),
        (Some("k2"), Some("d2")),
        "{doc}"
    );
    assert_eq!(
        (t["resealed"].as_u64(), t["retired"].clone()),
        (Some(12), serde_json::json!(["d1"])),
        "{doc}"
    );
    assert_eq!(doc["finished"], true, "{doc}");
    let ids = key_ids(&url, &threads);
    for (k, id) in &ids {
        let want = if k.starts_with("a/") { "d2" } else { "d1" };
        assert_eq!(id, want, "{k}");
    }
    assert_eq!(record(&ring, "a"), ["d2"]);
    // Thread a opens with k2 alone; b, not rekeyed yet, names k1.
    let a = plain(&url, &ring, K2, &threads[..1]).unwrap();
    assert!(a.iter().all(|(k, v)| before[k] == *v) && a.len() == 12);
    let err = plain(&url, &ring, K2, &threads[1..]).unwrap_err();
    assert!(err.to_string().contains("k1"), "{err}");
    let out = run(&["rekey", "--all"], &both);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert_eq!(plain(&url, &ring, K2, &threads).unwrap(), before);

    // No keys: the variable is named. A key the source lacks: its id is named.
    let none = crate::common::afk_in(dir.path(), &["rekey", "--all", "--store", &url]);
    assert_eq!(none.code, Some(1), "{}", none.stdout);
    assert!(none.stderr.contains("AFK_SEAL_KEYS"), "{}", none.stderr);
    let wrong = run(&["rekey", "--all"], K1);
    assert_eq!(wrong.code, Some(1), "{}", wrong.stdout);
    let doc: Value = serde_json::from_str(&wrong.stdout).unwrap();
    assert_eq!(doc["failed"].as_array().unwrap().len(), 2, "{doc}");
    let failed = &doc["failed"][0];
    assert_eq!(failed["kind"], "invalid_config", "{doc}");
    let msg = failed["message"].as_str().unwrap();
    assert!(msg.contains("by key k2"), "{doc}");
    assert!(
        failed["hint"].as_str().unwrap().contains("AFK_SEAL_KEYS"),
        "{doc}"
    );
    let one = run(&["rekey", "--thread", "a"], K1);
    assert_eq!(one.code, Some(1), "{}", one.stdout);
    let doc: Value = serde_json::from_str(&one.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "invalid_config", "{doc}");
}

#[test]
fn rekey_all_goes_past_a_failing_thread_names_it_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let ring = dir.path().join("ring");
    let threads = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
    populate(&url, &ring, &threads, 2, 3);
    // Thread b's keyring record is damaged: its rotation fails.
    std::fs::write(ring.join("b.key"), b"not a record").unwrap();
    let both = k2_then_k1();
    let mut all = vec!["--store", url.as_str(), "rekey", "--all", "--new-data-key"];
    let out = afk_env(dir.path(), &all, &env(&both, ring.to_str().unwrap()));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("thread b: failed: corrupt")
            && out.stdout.contains("1 thread(s) failed (b)"),
        "{}",
        out.stdout
    );
    // Again, in JSON (the new data keys made above stay: no `--new-data-key`).
    all.insert(0, "--json");
    all.pop();
    let out = afk_env(dir.path(), &all, &env(&both, ring.to_str().unwrap()));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    let failed = doc["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{doc}");
    assert_eq!(
        (failed[0]["thread"].as_str(), failed[0]["kind"].as_str()),
        (Some("b"), Some("corrupt")),
        "{doc}"
    );
    assert_eq!(doc["finished"], false, "{doc}");
    // The threads after b were rotated all the same.
    let ids = key_ids(&url, &threads);
    for (k, id) in ids.iter().filter(|(k, _)| !k.starts_with("b/")) {
        assert_eq!(id, "d2", "{k} was not re-sealed");
    }
    assert!(ids.keys().any(|k| k.starts_with("c/")));
    assert_eq!(record(&ring, "c"), ["d2"]);
}

/// Run `afk <args>` to completion; its exit code.
fn complete(dir: &Path, url: &str, keys: &str, ring: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json", "--store", url];
    all.extend(args);
    let out = afk_env(dir, &all, &env(keys, ring.to_str().unwrap()));
    assert_eq!(out.code, Some(0), "{args:?}: {}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// Spawn `afk <args>`, SIGKILL it after `delay`; whether it was still running then.
fn kill_after(
    dir: &Path,
    url: &str,
    keys: &str,
    ring: &Path,
    args: &[&str],
    delay: Duration,
) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_afk"))
        .args(["--store", url])
        .args(args)
        .current_dir(dir)
        .env_remove("AFK_STORE")
        .env_remove("RUST_LOG")
        .env_remove("AFK_SEAL_KEY_FILE")
        .env_remove("AFK_SEAL_MODE")
        .envs(env(keys, ring.to_str().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let alive = child.try_wait().unwrap().is_none();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    alive
}

/// `afk rekey --all --new-data-key` SIGKILLed at random moments, 24 times: after each kill
/// every value opens, with the same plaintext; a rerun finishes; then every value names the
/// thread's one data key, a fresh one, and opens with the new key-encryption key alone.
fn rekey_survives_sigkill(url: &str, (runs, values): (usize, u64)) {
    let mut rng = Rng::seeded();
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    let threads: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
    populate(url, &ring, &threads, runs, values);
    let before = plain(url, &ring, K1, &threads).unwrap();
    let both = k2_then_k1();
    let args = ["rekey", "--all", "--new-data-key"];
    // One whole rotation, timed: the kills fall within that long.
    let start = Instant::now();
    let doc = complete(dir.path(), url, &both, &ring, &args);
    let whole = start.elapsed();
    assert_eq!(doc["finished"], true, "{doc}");
    eprintln!("one rotation took {whole:?}");
    let (mut kills, mut mid) = (0, 0);
    for _ in 0..24 {
        let delay = Duration::from_micros(rng.below(whole.as_micros() as u64 + 1));
        let alive = kill_after(dir.path(), url, &both, &ring, &args, delay);
        kills += u32::from(alive);
        // Killed while a rotation was under way: a record holds two data keys.
        if alive && threads.iter().any(|t| record(&ring, t).len() > 1) {
            mid += 1;
        }
        let now =
            plain(url, &ring, &both, &threads).unwrap_or_else(|e| panic!("after a kill: {e}"));
        assert!(now == before, "a value changed after a kill");
    }
    eprintln!("{kills} kills of a running afk, {mid} in the middle of a rotation");
    assert!(
        mid > 0,
        "no kill landed in the middle of a rotation ({kills} kills)"
    );
    let doc = complete(dir.path(), url, &both, &ring, &["rekey", "--all"]);
    assert_eq!(doc["finished"], true, "{doc}");
    let ids = key_ids(url, &threads);
    for t in &threads {
        let rec = record(&ring, t);
        assert_eq!(rec.len(), 1, "{t}: {rec:?}");
        assert_ne!(rec[0], "d1", "{t}");
        let prefix = format!("{t}/");
        assert!(
            ids.iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .all(|(_, id)| *id == rec[0]),
            "{t}: {ids:?}"
        );
    }
    assert_eq!(plain(url, &ring, K2, &threads).unwrap(), before);
    // An erased thread stays erased through a later rotation.
    complete(dir.path(), url, K2, &ring, &["erase", "--thread", "t0"]);
    complete(dir.path(), url, K2, &ring, &args);
    assert!(plain(url, &ring, K2, &threads[..1]).is_err());
    assert!(!ring.join("t0.key").exists());
    let rest = plain(url, &ring, K2, &threads[1..]).unwrap();
    assert!(rest.iter().all(|(k, v)| before[k] == *v) && !rest.is_empty());
}

#[test]
fn rekey_survives_sigkill_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    rekey_survives_sigkill(&rocks(&dir.path().join("db")), (3, 30));
}

#[cfg(feature = "redis")]
#[test]
fn rekey_survives_sigkill_on_redis() {
    if let Some(url) = require_env("AFK_TEST_REDIS_URL") {
        rekey_survives_sigkill(&format!("{url}?prefix={}", unique("rekey")), (3, 30));
    }
}

#[cfg(feature = "s3")]
#[test]
fn rekey_survives_sigkill_on_s3() {
    if let Some(url) = s3_url() {
        // Fewer values: every request to the test server takes milliseconds.
        rekey_survives_sigkill(&url, (2, 6));
    }
}

/// `afk erase` SIGKILLed at random moments, 24 times (the thread's keyring record put back
/// after each erasure, as a fresh thread): the thread is either whole or unreadable, never in
/// between, and other threads stay readable; a rerun erases it. Erasing touches the keyring
/// alone, never the store; it runs on every store all the same, since the console opens the
/// store before it erases and reads through it after.
fn erase_survives_sigkill(url: &str) {
    let mut rng = Rng::seeded();
    let dir = tempfile::tempdir().unwrap();
    let url = url.to_owned();
    let ring = dir.path().join("ring");
    let threads = ["gone".to_owned(), "kept".to_owned()];
    populate(&url, &ring, &threads, 2, 10);
    let before = plain(&url, &ring, K1, &threads).unwrap();
    let saved = std::fs::read(ring.join("gone.key")).unwrap();
    let args = ["erase", "--thread", "gone"];
    // One erasure of a thread without keys, timed: the kills fall within that long.
    let start = Instant::now();
    complete(dir.path(), &url, K1, &ring, &["erase", "--thread", "none"]);
    let whole = start.elapsed();
    let (mut before_erasure, mut after_erasure) = (0, 0);
    for _ in 0..24 {
        let delay = Duration::from_micros(rng.below(whole.as_micros() as u64 + 1));
        let alive = kill_after(dir.path(), &url, K1, &ring, &args, delay);
        match plain(&url, &ring, K1, &threads[..1]) {
            Ok(now) => {
                assert!(now.iter().all(|(k, v)| before[k] == *v) && now.len() == 22);
                before_erasure += u32::from(alive);
            }
            Err(e) => {
                assert_eq!(e.kind(), afk::ErrorKind::NotFound, "{e}");
                after_erasure += 1;
                std::fs::write(ring.join("gone.key"), &saved).unwrap();
            }
        }
        let kept = plain(&url, &ring, K1, &threads[1..]).unwrap();
        assert!(kept.iter().all(|(k, v)| before[k] == *v) && kept.len() == 22);
    }
    eprintln!("{before_erasure} kills before the erasure, {after_erasure} after it");
    complete(dir.path(), &url, K1, &ring, &args);
    let e = plain(&url, &ring, K1, &threads[..1]).unwrap_err();
    assert_eq!(e.kind(), afk::ErrorKind::NotFound, "{e}");
}

#[test]
fn erase_survives_sigkill_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    erase_survives_sigkill(&rocks(&dir.path().join("db")));
}

#[cfg(feature = "redis")]
#[test]
fn erase_survives_sigkill_on_redis() {
    if let Some(url) = require_env("AFK_TEST_REDIS_URL") {
        erase_survives_sigkill(&format!("{url}?prefix={}", unique("erase")));
    }
}

#[cfg(feature = "s3")]
#[test]
fn erase_survives_sigkill_on_s3() {
    if let Some(url) = s3_url() {
        erase_survives_sigkill(&url);
    }
}

/// The time to live (ms) of each key of a thread's run records on a plain Redis connection.
#[cfg(feature = "redis")]
fn pttls(url: &str, prefix: &str, thread: &str) -> BTreeMap<String, i64> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = redis::Client::open(url).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{prefix}:{thread}}}:checkpoint:*"))
            .query_async(&mut c)
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for k in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&k)
                .query_async(&mut c)
                .await
                .unwrap();
            out.insert(k, ttl);
        }
        out
    })
}

/// On Redis with a time to live, claiming a finished run and writing to it makes it live
/// (nothing of it expires); a rekey that re-sealed it tells the store it has ended, so it
/// expires again.
#[cfg(feature = "redis")]
#[test]
fn a_finished_run_rekeyed_on_redis_with_a_ttl_still_expires() {
    let Some(base) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let prefix = unique("rekeyttl");
    let url = format!("{base}?prefix={prefix}&ttl_s=3600");
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    let ring_s = ring.to_str().unwrap();
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env(K1, ring_s));
    assert_eq!(demo.code, Some(0), "{}{}", demo.stdout, demo.stderr);
    let before = pttls(&base, &prefix, "afk-demo");
    assert!(
        !before.is_empty() && before.values().all(|t| *t > 0),
        "{before:?}"
    );
    let args = ["rekey", "--thread", "afk-demo", "--new-data-key"];
    let doc = complete(dir.path(), &url, K1, &ring, &args);
    assert!(doc["resealed"].as_u64().unwrap() > 0, "{doc}");
    let after = pttls(&base, &prefix, "afk-demo");
    assert_eq!(after.len(), before.len());
    assert!(after.values().all(|t| *t > 0), "{after:?}");
}

/// A run whose owner holds an unexpired lease is skipped and named, the old data key kept, and
/// the command exits 1; nothing of that run is claimed or rewritten.
#[test]
fn rekey_skips_a_run_a_live_owner_holds_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let ring = dir.path().join("ring");
    let threads = ["a".to_owned()];
    populate(&url, &ring, &threads, 1, 3);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let epoch = with_sealed(&url, &ring, K1, async |store| {
        let (thread, run) = (ThreadId::new("a").unwrap(), RunId::new("held").unwrap());
        let epoch = store.claim(&thread, &run).await.unwrap();
        let mut mark = afk::schema::RunMark::new(afk::schema::MarkState::Running);
        (mark.owner, mark.lease_until_ms, mark.epoch) =
            (Some("worker-7".into()), now_ms + 3_600_000, epoch.0);
        let c = Commit {
            thread,
            run,
            epoch,
            puts: vec![("messages:held:0".into(), b"{}".to_vec())],
            latest: None,
            attention: Some(afk::store::Attention::Open(mark.encode())),
        };
        store.commit(&c).await.unwrap();
        epoch
    });
    let ring_s = ring.to_str().unwrap();
    let args = ["rekey", "--all", "--new-data-key", "--store", &url];
    let out = afk_env(dir.path(), &args, &env(K1, ring_s));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("skipped run held"), "{}", out.stdout);
    assert!(out.stdout.contains("worker-7"), "{}", out.stdout);
    assert!(
        out.stdout.contains("old data key(s) d1 kept"),
        "{}",
        out.stdout
    );
    let ids = key_ids(&url, &threads);
    assert_eq!(ids["a/messages:held:0"], "d1");
    let r0: Vec<_> = ids
        .iter()
        .filter(|(k, _)| k.starts_with("a/messages:r0:"))
        .collect();
    assert!(
        r0.len() == 3 && r0.iter().all(|(_, id)| *id == "d2"),
        "{ids:?}"
    );
    assert_eq!(record(&ring, "a"), ["d2", "d1"]);
    // The owner's claim still holds: its next commit goes through.
    with_sealed(&url, &ring, K1, async |store| {
        let c = Commit {
            thread: ThreadId::new("a").unwrap(),
            run: RunId::new("held").unwrap(),
            epoch,
            puts: vec![("messages:held:1".into(), b"{}".to_vec())],
            latest: None,
            attention: None,
        };
        store.commit(&c).await.unwrap();
    });
    let mut json = vec!["--json"];
    json.extend(args);
    let out = afk_env(dir.path(), &json, &env(K1, ring_s));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["finished"], false, "{doc}");
    assert_eq!(
        doc["threads"][0]["skipped"][0]["owner"], "worker-7",
        "{doc}"
    );
    assert_eq!(doc["threads"][0]["created"], false, "{doc}");
}
