//! The AFK corpus (repo copy under fixtures/afk-python) at the normalize level, and v1 → v2
//! migration of every stored snapshot.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::PathBuf;

use afk_core::fixture::{Fixture, FixtureFile, check_file_normalize, check_normalize};
use afk_core::normalize::normalize_record_value;
use afk_core::schema::migrate::v1_to_v2;
use afk_core::schema::{CheckpointRecord, Phase, reassemble};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python")
}

fn fixture_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| !p.ends_with("hash-vectors.json"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_file_passes_the_normalize_check() {
    let paths = fixture_paths();
    assert_eq!(paths.len(), 76, "the corpus has 76 fixtures");
    let mut failures = Vec::new();
    for p in paths.iter().chain([dir().join("hash-vectors.json")].iter()) {
        let file = FixtureFile::load(p).unwrap();
        if let Err(e) = check_file_normalize(&file) {
            failures.push(format!("{}: {e}", p.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_stored_record_normalizes_outside_the_corruption_fixtures() {
    let mut records = 0;
    for p in fixture_paths() {
        let f = Fixture::load(&p).unwrap();
        if f.name.starts_with("corrupt-")
            && f.name != "corrupt-effect-hash-mismatch"
            && f.name != "corrupt-latest-missing"
        {
            continue;
        }
        for (key, value) in &f.state {
            if key.starts_with("checkpoint:") {
                let r = normalize_record_value(value.clone(), &f.thread_id, key)
                    .unwrap_or_else(|e| panic!("{}: {key}: {e}", p.display()));
                assert_eq!(r.thread_id, f.thread_id);
                assert_eq!(r.run_id, f.run_id);
                records += 1;
            } else {
                afk_core::normalize::normalize_effect_row_value(value.clone(), key).unwrap();
            }
        }
    }
    assert!(records > 500, "walked {records} records");
}

fn corruption_error(name: &str, key_suffix: &str) -> afk_core::Error {
    let f = Fixture::load(dir().join(format!("{name}.json"))).unwrap();
    let key = format!("checkpoint:{}:{key_suffix}", f.run_id);
    normalize_record_value(f.state[&key].clone(), &f.thread_id, &key).unwrap_err()
}

#[test]
fn content_corruption_fixtures_fail_with_the_field_named() {
    for (name, suffix, field) in [
        ("corrupt-schema-v999", "latest", "schema_version"),
        ("corrupt-payload-not-map", "latest", "payload"),
        ("corrupt-payload-not-map", "2:runtime_state", "payload"),
        ("corrupt-pending-garbage", "latest", "pending_llm_response"),
        (
            "corrupt-pending-garbage",
            "1:runtime_state",
            "pending_llm_response",
        ),
    ] {
        let e = corruption_error(name, suffix);
        assert!(e.is_corrupt(), "{name}: {e}");
        assert!(e.key().unwrap().ends_with(suffix), "{name}: {e}");
        assert!(e.message().contains(field), "{name}: {e}");
    }
}

#[test]
fn check_normalize_rejects_a_corruption_fixture_whose_edit_was_undone() {
    let mut f = Fixture::load(dir().join("corrupt-schema-v999.json")).unwrap();
    let latest = format!("checkpoint:{}:latest", f.run_id);
    f.state.get_mut(&latest).unwrap()["schema_version"] = "v1".into();
    let err = check_normalize(&f).unwrap_err();
    assert!(err.contains("must be rejected"), "{err}");
}

#[test]
fn legacy_aliases_match_the_original_and_a_changed_record_is_caught() {
    let mut f = Fixture::load(dir().join("legacy-aliases.json")).unwrap();
    check_normalize(&f).unwrap();
    let key = format!("checkpoint:{}:1:pre_llm", f.run_id);
    f.state.get_mut(&key).unwrap()["data"]["message_count"] = 99.into();
    let err = check_normalize(&f).unwrap_err();
    assert!(err.contains("normalizes differently"), "{err}");
}

/// Every v1 snapshot of the corpus migrates to a v2 snapshot whose transcript log reassembles
/// to the inline transcript and tool records, with a verifying digest; the migrated record
/// round-trips.
#[test]
fn v1_to_v2_migration_keeps_the_transcript() {
    let (mut snapshots, mut migrated_tools) = (0, 0);
    for p in fixture_paths() {
        let f = Fixture::load(&p).unwrap();
        for (key, value) in &f.state {
            let Ok(r) = normalize_record_value(value.clone(), &f.thread_id, key) else {
                continue;
            };
            let inline = r.snapshot().and_then(|s| s.messages.clone());
            let inline_tools = r.snapshot().map(|s| s.tool_executions.clone());
            let m = v1_to_v2(r.clone());
            assert_eq!(m.record.schema_version, "v2");
            if r.phase != Phase::RuntimeState {
                assert!(m.transcript.is_empty());
                let mut back = m.record.clone();
                back.schema_version = "v1".into();
                assert_eq!(back, r, "only the version changes");
                continue;
            }
            snapshots += 1;
            let inline = inline.expect("v1 snapshots carry messages");
            let s = m.record.snapshot().unwrap();
            assert!(s.messages.is_none(), "v2 snapshot leaves messages out");
            let tref = s.transcript.as_ref().unwrap();
            assert!(
                s.tool_executions.is_empty(),
                "v2 snapshot leaves records out"
            );
            let log = reassemble(&m.transcript, tref).unwrap();
            assert_eq!(log.messages, inline);
            assert_eq!(Some(log.records.tool_executions), inline_tools);
            if inline_tools.as_ref().is_some_and(|t| !t.is_empty()) {
                migrated_tools += 1;
            }
            assert_eq!(tref.message_count as usize, inline.len());
            // Round trip through bytes.
            let bytes = m.record.to_bytes().unwrap();
            let again: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert!(again["payload"].get("messages").is_none());
            let again = normalize_record_value(again, &f.thread_id, key).unwrap();
            assert_eq!(again, m.record);
            let strict: CheckpointRecord = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(strict, m.record);
            // Migrating twice changes nothing.
            assert_eq!(v1_to_v2(m.record.clone()).record, m.record);
        }
    }
    assert!(snapshots > 100, "migrated {snapshots} snapshots");
    assert!(
        migrated_tools > 10,
        "{migrated_tools} snapshots had tool records"
    );
}
