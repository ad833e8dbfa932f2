//! The console on a store sealed at rest (`AFK_SEAL_KEYS`, `AFK_SEAL_KEYRING`): the demo's
//! values are sealed in the database, the commands read them given the keys and fail without
//! them, and `afk erase` leaves a thread unreadable.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use afk::backend::rocksdb::{RocksDbConfig, RocksDbStore};
use afk::store::Store;
use common::{afk_env, afk_in, rocks};
use serde_json::Value;

const KEYS: &str = "k1=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

#[test]
fn a_sealed_store_is_read_with_its_keys_and_erase_makes_a_thread_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let url = rocks(&db);
    let ring = dir.path().join("keyring");
    let ring = ring.to_str().unwrap();
    let env = [("AFK_SEAL_KEYS", KEYS), ("AFK_SEAL_KEYRING", ring)];
    let demo = afk_env(dir.path(), &["demo", "--store", &url], &env);
    assert_eq!(demo.code, Some(0), "{}{}", demo.stdout, demo.stderr);

    // At rest: every value but the fences is sealed.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let raw = RocksDbStore::open(RocksDbConfig::new(&db)).unwrap();
        let thread = afk::ThreadId::new("afk-demo").unwrap();
        let keys = raw.list(&thread, "", None, 1000).await.unwrap().keys;
        assert!(keys.len() > 5, "{keys:?}");
        for k in keys.iter().filter(|k| !k.starts_with("run:")) {
            let v = raw.get(&thread, k).await.unwrap().unwrap();
            assert!(v.starts_with(b"afk\x01"), "{k} is not sealed");
        }
    });

    let show = [
        "show",
        "--json",
        "--store",
        &url,
        "--thread",
        "afk-demo",
        "--run",
        "demo-order-42",
    ];
    let with = afk_env(dir.path(), &show, &env);
    assert_eq!(with.code, Some(0), "{}", with.stderr);
    let doc: Value = serde_json::from_str(&with.stdout).unwrap();
    assert_eq!(doc["state"], "completed", "{doc}");
    let without = afk_in(dir.path(), &show);
    assert_eq!(without.code, Some(1), "{}", without.stdout);

    let erase = afk_env(
        dir.path(),
        &["erase", "--json", "--thread", "afk-demo"],
        &env,
    );
    assert_eq!(erase.code, Some(0), "{}", erase.stderr);
    let doc: Value = serde_json::from_str(&erase.stdout).unwrap();
    assert_eq!(doc["erased"], true, "{doc}");
    let gone = afk_env(dir.path(), &show, &env);
    assert_eq!(gone.code, Some(1), "{}", gone.stdout);
    assert!(gone.stderr.contains("no data key"), "{}", gone.stderr);

    let no_ring = afk_in(dir.path(), &["erase", "--thread", "afk-demo"]);
    assert_eq!(no_ring.code, Some(1), "{}", no_ring.stdout);
    assert!(
        no_ring.stderr.contains("AFK_SEAL_KEYRING"),
        "{}",
        no_ring.stderr
    );
}

/// The raw values of the demo's thread in the RocksDB database `db`, fences aside.
fn raw_values(db: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let raw = RocksDbStore::open(RocksDbConfig::new(db)).unwrap();
        let thread = afk::ThreadId::new("afk-demo").unwrap();
        let keys = raw.list(&thread, "", None, 1000).await.unwrap().keys;
        let mut out = std::collections::BTreeMap::new();
        for k in keys.into_iter().filter(|k| !k.starts_with("run:")) {
            let v = raw.get(&thread, &k).await.unwrap().unwrap();
            out.insert(k, v);
        }
        out
    })
}

/// A temporary directory and the environments of two sealed stores in it: `src` with the
/// test's keys, `dst` with other keys, each with its own keyring file.
struct TwoSeals {
    dir: tempfile::TempDir,
    src_ring: String,
    dst_ring: String,
}

impl TwoSeals {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ring = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
        let (src_ring, dst_ring) = (ring("src-ring"), ring("dst-ring"));
        TwoSeals {
            dir,
            src_ring,
            dst_ring,
        }
    }

    fn src(&self) -> [(&'static str, &str); 2] {
        [
            ("AFK_SEAL_KEYS", KEYS),
            ("AFK_SEAL_KEYRING", &self.src_ring),
        ]
    }

    fn dst(&self) -> [(&'static str, &str); 2] {
        const OTHER: &str = "k9=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
        [
            ("AFK_SEAL_KEYS", OTHER),
            ("AFK_SEAL_KEYRING", &self.dst_ring),
        ]
    }

    /// `afk args` in the directory with `env`; its standard output, after checking it exited 0.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = afk_env(self.dir.path(), args, env);
        assert_eq!(out.code, Some(0), "{args:?}: {}{}", out.stdout, out.stderr);
        out.stdout
    }
}

#[test]
fn an_export_keeps_the_ciphertext_or_is_resealed_under_the_targets_keys() {
    let seals = TwoSeals::new();
    let (dir, src, dst) = (&seals.dir, seals.src(), seals.dst());
    let p = |name: &str| dir.path().join(name);
    let run = |args: &[&str], env: &[(&str, &str)]| seals.run(args, env);
    let show = |db: &str, env: &[(&str, &str)]| {
        let args = [
            "show",
            "--json",
            "--store",
            db,
            "--thread",
            "afk-demo",
            "--run",
            "demo-order-42",
        ];
        afk_env(dir.path(), &args, env)
    };
    let url = |name: &str| rocks(&p(name));
    run(&["demo", "--store", &url("src")], &src);
    let before = raw_values(&p("src"));

    // Keeping the ciphertext: every value as stored, even with the keys at hand.
    let ct = p("ct.jsonl");
    let ct_s = ct.to_str().unwrap();
    run(
        &[
            "export",
            "--ciphertext",
            "--store",
            &url("src"),
            "--thread",
            "afk-demo",
            "--out",
            ct_s,
        ],
        &src,
    );
    let text = std::fs::read_to_string(&ct).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["as_stored"], true, "{header}");
    let key_lines: Vec<Value> = lines
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["type"] == "key")
        .collect();
    assert_eq!(key_lines.len(), before.len());
    for v in &key_lines {
        let hex = v["value_hex"]
            .as_str()
            .unwrap_or_else(|| panic!("opened: {v}"));
        assert!(hex.starts_with("61666b01"), "not sealed: {v}");
    }
    // Imported with the source's keyring: the same bytes, verified, and readable.
    let out = run(&["import", "--json", "--store", &url("copy"), ct_s], &src);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (doc["ok"].clone(), doc["opened"].clone()),
        (true.into(), true.into()),
        "{doc}"
    );
    assert_eq!(
        raw_values(&p("copy")),
        before,
        "the ciphertext changed on the way"
    );
    assert_eq!(show(&url("copy"), &src).code, Some(0));
    // Without keys: written as it is, compared byte for byte, not opened.
    let out = run(&["import", "--json", "--store", &url("blind"), ct_s], &[]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (doc["ok"].clone(), doc["opened"].clone()),
        (true.into(), false.into()),
        "{doc}"
    );
    assert_eq!(raw_values(&p("blind")), before);

    // Re-sealed: opened with the source's keys, sealed with the target's.
    let pt = p("pt.jsonl");
    let pt_s = pt.to_str().unwrap();
    run(
        &[
            "export",
            "--store",
            &url("src"),
            "--thread",
            "afk-demo",
            "--out",
            pt_s,
        ],
        &src,
    );
    run(&["import", "--store", &url("resealed"), pt_s], &dst);
    let resealed = raw_values(&p("resealed"));
    assert_eq!(resealed.len(), before.len());
    for (k, v) in &resealed {
        assert!(v.starts_with(b"afk\x01"), "{k} is not sealed");
        assert_ne!(Some(v), before.get(k), "{k} kept the source's ciphertext");
    }
    assert_eq!(show(&url("resealed"), &dst).code, Some(0));
    assert_eq!(
        show(&url("resealed"), &src).code,
        Some(1),
        "opened with the source's keys"
    );

    // Erasing the thread at the source reaches the ciphertext copy, not the re-sealed one.
    run(
        &["erase", "--thread", "afk-demo", "--store", &url("src")],
        &src,
    );
    let gone = show(&url("copy"), &src);
    assert_eq!(gone.code, Some(1), "{}", gone.stdout);
    assert!(gone.stderr.contains("no data key"), "{}", gone.stderr);
    assert_eq!(show(&url("resealed"), &dst).code, Some(0));
}

/// A run stopped in the middle of a tool batch (the demo's uncertain charge) moved by a
/// re-sealing export and import, into a store sealed with other keys and into a plain one: in
/// each, the charge is settled and the run resumes to completion without charging again, as
/// it would have at the source. The effect row's hash is the source thread's keyed one at
/// rest; the import writes it in the target thread's form.
#[test]
fn a_resealed_import_of_a_run_stopped_mid_batch_settles_and_resumes_in_the_target() {
    let seals = TwoSeals::new();
    let (dir, src, dst) = (&seals.dir, seals.src(), seals.dst());
    let p = |name: &str| dir.path().join(name);
    let run = |args: &[&str], env: &[(&str, &str)]| seals.run(args, env);
    let url = |name: &str| rocks(&p(name));
    run(
        &["--store", &url("src"), "demo", "--crash-after", "10"],
        &src,
    );
    let pt = p("pt.jsonl");
    let pt = pt.to_str().unwrap();
    let export = ["--store", &url("src"), "export", "--thread", "afk-demo"];
    run(&[&export[..], &["--out", pt]].concat(), &src);

    let plain: [(&str, &str); 0] = [];
    for (target, env) in [("sealed", &dst[..]), ("plain", &plain[..])] {
        let at = url(target);
        let out = run(&["--store", &at, "import", "--json", pt], env);
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["ok"], true, "{target}: {doc}");
        // Plain in the file; keyed under the target thread's hash key when it is sealed.
        let rehashed = doc["rehashed"].as_u64().unwrap();
        assert_eq!(rehashed > 0, target == "sealed", "{target}: {doc}");
        let settle = [
            "--store",
            &at,
            "settle",
            "--thread",
            "afk-demo",
            "--run",
            "demo-order-42",
            "--call",
            "call_charge",
            "--ran",
            r#"{"charge_id": "ch_123"}"#,
        ];
        let settled = afk_env(dir.path(), &settle, env);
        assert_eq!(
            settled.code,
            Some(0),
            "{target}: {}{}",
            settled.stdout,
            settled.stderr
        );
        let resumed = run(&["--store", &at, "demo", "--resume"], env);
        let executions = common::line(&resumed, "tool executions:");
        assert!(
            !executions.contains("call_charge"),
            "{target}: {executions}"
        );
        let state = common::line(&resumed, "run demo-order-42:");
        assert!(state.contains("completed"), "{target}: {resumed}");
    }
}
