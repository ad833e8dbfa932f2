//! The AFK golden corpus at the resume level: every fixture resumed on a fresh MemoryStore
//! with its scripted model and tools must meet its `expect` block.

use std::path::PathBuf;
use std::sync::Arc;

use afk_core::MemoryStore;
use afk_core::runner::fixture_check::{check_fixture, scripted_tools};

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
        let verdict = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
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
    let ok = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
        .await
        .expect("well formed");
    assert!(ok.passed(), "{:?}", ok.problems);
    v["expect"]["llm_calls_during_resume"] = serde_json::json!(2);
    v["expect"]["tool_invocations_during_resume"] = serde_json::json!({"call_a_1": 1});
    let bad = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
        .await
        .expect("well formed");
    assert_eq!(bad.problems.len(), 2, "{:?}", bad.problems);
}

/// A team's own corpus uses its own tools: the same fixture with the tool renamed needs that
/// tool (the scripted set does not have it) and passes with the caller's implementation.
#[tokio::test]
async fn a_fixture_is_resumed_with_the_callers_tools() {
    use afk_core::runner::{Tool, ToolContext, ToolError, ToolSpec};
    use serde_json::{Value, json};

    #[derive(Debug)]
    struct Sum;
    #[async_trait::async_trait]
    impl Tool for Sum {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "sum".into(),
                description: "a + b".into(),
                parameters: json!({"type": "object"}),
            }
        }
        async fn call(&self, _ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
            let n = |k: &str| args.get(k).and_then(Value::as_i64);
            match (n("a"), n("b")) {
                (Some(a), Some(b)) => Ok(json!({"result": a + b})),
                _ => Err(ToolError::new("a and b must be integers")),
            }
        }
    }

    let text = std::fs::read_to_string(fixtures_dir().join("a-crash-k11-s1-runtime_state.json"))
        .expect("read fixture")
        .replace("\"add\"", "\"sum\"");
    let v: Value = serde_json::from_str(&text).expect("fixture JSON");
    let scripted = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
        .await
        .expect("well formed");
    assert_eq!(scripted.missing_tools, vec!["sum".to_string()]);
    assert!(scripted.problems.is_empty() && !scripted.passed());

    let ours: Vec<afk_core::runner::ToolRef> = vec![Arc::new(Sum)];
    let verdict = check_fixture(&v, Arc::new(MemoryStore::new()), &ours)
        .await
        .expect("well formed");
    assert!(verdict.passed(), "{:?}", verdict.problems);
    assert_eq!(
        v["expect"]["tool_invocations_during_resume"],
        json!({"call_a_1": 1}),
        "the fixture really runs the tool"
    );
}

/// A corruption fixture under another name is still checked right at the resume level, and
/// its error must name the record the normalize level rejected.
#[tokio::test]
async fn a_renamed_corruption_fixture_resumes_to_its_expected_error() {
    let text = std::fs::read_to_string(fixtures_dir().join("corrupt-schema-v999.json"))
        .expect("read fixture");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    v["name"] = serde_json::json!("renamed-case");
    let verdict = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
        .await
        .expect("well formed");
    assert!(verdict.passed(), "{:?}", verdict.problems);

    // The same records expected to complete: reported.
    v["expect"]["outcome"] = serde_json::json!("completed");
    let verdict = check_fixture(&v, Arc::new(MemoryStore::new()), &scripted_tools())
        .await
        .expect("well formed");
    assert!(!verdict.passed());
}
