//! The AFK golden corpus at the resume level: every fixture resumed on a fresh MemoryStore
//! with its scripted model and tools must meet its `expect` block.

use std::path::PathBuf;
use std::sync::Arc;

use afk_core::MemoryStore;
use afk_core::runner::fixture_check::check_fixture;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_afk_fixture_resumes_as_expected() {
    let mut files: Vec<_> = std::fs::read_dir(fixtures_dir())
        .expect("fixture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| n != "hash-vectors.json")
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), 76, "fixture corpus size");
    let mut failed = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read fixture");
        let v: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
        let verdict = check_fixture(&v, Arc::new(MemoryStore::new()))
            .await
            .expect("fixture well formed");
        if !verdict.passed() {
            failed.push(format!("{}: {}", f.display(), verdict.problems.join("; ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

/// The checker can fail: a fixture whose expectation is altered is reported.
#[tokio::test]
async fn an_altered_expectation_is_caught() {
    let text = std::fs::read_to_string(fixtures_dir().join("a-crash-k15-effect-s1-call_a_1.json"))
        .expect("read fixture");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    let ok = check_fixture(&v, Arc::new(MemoryStore::new()))
        .await
        .expect("well formed");
    assert!(ok.passed(), "{:?}", ok.problems);
    v["expect"]["llm_calls_during_resume"] = serde_json::json!(2);
    v["expect"]["tool_invocations_during_resume"] = serde_json::json!({"call_a_1": 1});
    let bad = check_fixture(&v, Arc::new(MemoryStore::new()))
        .await
        .expect("well formed");
    assert_eq!(bad.problems.len(), 2, "{:?}", bad.problems);
}
