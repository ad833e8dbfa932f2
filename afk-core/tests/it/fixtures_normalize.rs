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

/// With `expect.rejects` the normalize level is exact: a corruption fixture whose edit was
/// undone is reported, and so is a rejected record the block does not list.
#[test]
fn an_explicit_rejects_list_is_checked_exactly() {
    let mut f = Fixture::load(dir().join("corrupt-schema-v999.json")).unwrap();
    let latest = format!("checkpoint:{}:latest", f.run_id);
    f.expect.rejects = Some(vec![latest.clone()]);
    check_normalize(&f).unwrap();
    f.state.get_mut(&latest).unwrap()["schema_version"] = "v1".into();
    let err = check_normalize(&f).unwrap_err();
    assert!(err.contains("must be rejected"), "{err}");

    let mut f = Fixture::load(dir().join("corrupt-schema-v999.json")).unwrap();
    f.expect.rejects = Some(Vec::new());
    let err = check_normalize(&f).unwrap_err();
    assert!(err.contains("only [] may be rejected"), "{err}");
}

/// The expectation comes from the `expect` block, not the name: a corruption fixture under
/// another name is still accepted (its latest record rejected as corrupt), and the same
/// records under a `completed` expectation fail.
#[test]
fn a_renamed_corruption_fixture_is_checked_by_its_expect_block() {
    for name in [
        "corrupt-schema-v999",
        "corrupt-payload-not-map",
        "corrupt-pending-garbage",
    ] {
        let mut f = Fixture::load(dir().join(format!("{name}.json"))).unwrap();
        f.name = "our-own-corpus-case-17".into();
        f.source = None;
        check_normalize(&f).unwrap_or_else(|e| panic!("{name} renamed: {e}"));
        f.expect.outcome = "completed".into();
        let err = check_normalize(&f).unwrap_err();
        assert!(err.contains("expected to complete"), "{name}: {err}");
    }
}

/// An `error` fixture may have its first-read record rejected, nothing else: a corrupt
/// effect row or an older step record is reported.
#[test]
fn only_the_record_resume_reads_first_may_be_rejected() {
    let mut f = Fixture::load(dir().join("corrupt-effect-hash-mismatch.json")).unwrap();
    check_normalize(&f).unwrap();
    let key = format!("checkpoint:{}:1:pre_llm", f.run_id);
    f.state.get_mut(&key).unwrap()["schema_version"] = "v999".into();
    let err = check_normalize(&f).unwrap_err();
    assert!(err.contains("not on this record"), "{err}");
}

/// A legacy-alias record must normalize to the record it was rewritten from, key by key
/// (`legacy-aliases` rewrites `b-crash-k16-effect-s1-call_b_2`, as its description says); the
/// normalize level checks each record lands at its own run, thread, step and phase.
#[test]
fn legacy_aliases_match_the_original_and_a_changed_record_is_caught() {
    let f = Fixture::load(dir().join("legacy-aliases.json")).unwrap();
    check_normalize(&f).unwrap();
    let original = Fixture::load(dir().join("b-crash-k16-effect-s1-call_b_2.json")).unwrap();
    let norm = |f: &Fixture, k: &str| -> Option<CheckpointRecord> {
        normalize_record_value(f.state[k].clone(), &f.thread_id, k).ok()
    };
    assert_eq!(
        f.state.keys().collect::<Vec<_>>(),
        original.state.keys().collect::<Vec<_>>()
    );
    let checkpoints: Vec<&String> = f
        .state
        .keys()
        .filter(|k| k.starts_with("checkpoint:"))
        .collect();
    assert_eq!(checkpoints.len(), 7, "{checkpoints:?}");
    for k in &checkpoints {
        assert_eq!(norm(&f, k), norm(&original, k), "{k}");
        assert!(norm(&f, k).is_some(), "{k}");
    }
    let mut changed = f.clone();
    let key = format!("checkpoint:{}:1:pre_llm", f.run_id);
    changed.state.get_mut(&key).unwrap()["data"]["message_count"] = 99.into();
    assert_ne!(norm(&changed, &key), norm(&original, &key));
    let mut moved = f.clone();
    moved.state.get_mut(&key).unwrap()["step"] = 2.into();
    let err = check_normalize(&moved).unwrap_err();
    assert!(err.contains("normalizes to a record of 2:pre_llm"), "{err}");
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
