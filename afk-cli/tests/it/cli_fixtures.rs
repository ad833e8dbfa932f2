//! `afk fixtures check` end to end, on the repo's AFK corpus and on a broken copy.

use std::path::PathBuf;
use std::process::Command;

fn afk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_afk"))
}

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python")
}

#[test]
fn the_whole_corpus_passes_at_the_normalize_level() {
    let out = afk()
        .args(["fixtures", "check", "--level", "normalize"])
        .arg(corpus())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        77,
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("77 passed, 0 failed"));
}

#[test]
fn a_broken_fixture_fails_and_sets_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let src =
        std::fs::read_to_string(corpus().join("a-crash-k06-latest-runtime_state-s1.json")).unwrap();
    let broken = src.replacen(
        "\"schema_version\": \"v1\"",
        "\"schema_version\": \"v7\"",
        1,
    );
    assert_ne!(broken, src);
    std::fs::write(dir.path().join("broken.json"), broken).unwrap();
    std::fs::write(dir.path().join("good.json"), &src).unwrap();
    std::fs::write(dir.path().join("README.md"), "not a fixture").unwrap();
    let out = afk()
        .args(["fixtures", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL ") && stdout.contains("broken.json") && stdout.contains("v7"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok ") && stdout.contains("good.json"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("1 passed, 1 failed"));
}

#[test]
fn the_whole_corpus_passes_at_the_resume_level_and_a_wrong_expectation_fails() {
    let out = afk()
        .args([
            "fixtures",
            "check",
            "--level",
            "resume",
            "--store",
            "memory://",
        ])
        .arg(corpus())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("77 passed, 0 failed"));

    let dir = tempfile::tempdir().unwrap();
    let src =
        std::fs::read_to_string(corpus().join("a-crash-k15-effect-s1-call_a_1.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
    v["expect"]["llm_calls_during_resume"] = serde_json::json!(7);
    std::fs::write(dir.path().join("wrong.json"), v.to_string()).unwrap();
    let out = afk()
        .args(["fixtures", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL ") && stdout.contains("llm calls 1 (want 7)"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("0 passed, 1 failed"));
}

#[test]
fn a_store_whose_feature_is_off_is_an_error_naming_the_feature() {
    let out = afk()
        .args([
            "fixtures",
            "check",
            "--store",
            "redis://:hunter2@127.0.0.1:1",
        ])
        .arg(corpus())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "redis") {
        return; // then it is a connection error, covered by the store's own tests
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("`redis` Cargo feature"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn the_whole_corpus_passes_at_the_resume_level_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("rocksdb://{}", dir.path().join("db").display());
    let out = afk()
        .args(["fixtures", "check", "--store", &url])
        .arg(corpus())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("77 passed, 0 failed"));
    // Each fixture's runs were deleted after its check: nothing is left behind.
    let listed = afk()
        .args(["runs", "--store", &url, "--thread", "thread_scenario_a"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("no runs"));
}

/// Expectations come from each fixture's `expect` block, not its file or fixture name: a
/// corruption fixture copied under another name passes both levels.
#[test]
fn a_renamed_corruption_fixture_is_checked_by_its_expect_block() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["corrupt-schema-v999", "corrupt-pending-garbage"] {
        let src = std::fs::read_to_string(corpus().join(format!("{name}.json"))).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&src).unwrap();
        v["name"] = serde_json::json!(format!("ours-{name}"));
        std::fs::write(dir.path().join(format!("ours-{name}.json")), v.to_string()).unwrap();
    }
    for level in ["normalize", "resume"] {
        let out = afk()
            .args(["fixtures", "check", "--level", level])
            .arg(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{level}: {stdout}");
        assert_eq!(
            stdout.lines().last(),
            Some("2 passed, 0 failed"),
            "{stdout}"
        );
    }
}

/// A fixture whose script calls a tool the CLI does not have is reported as needing it, not
/// as a wrong result.
#[test]
fn a_fixture_with_an_unknown_tool_needs_that_tool() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(corpus().join("a-crash-k11-s1-runtime_state.json"))
        .unwrap()
        .replace("\"add\"", "\"multiply\"");
    std::fs::write(dir.path().join("multiply.json"), src).unwrap();
    let out = afk()
        .args(["fixtures", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("SKIP ") && stdout.contains("needs tool multiply"),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL "), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("0 passed, 0 failed, 1 need another tool")
    );
}

/// `--json`: one document with the counts and each fixture's result, the same exit code.
#[test]
fn the_json_report_names_each_fixture_and_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let name = "a-crash-k11-s1-runtime_state.json";
    let src = std::fs::read_to_string(corpus().join(name)).unwrap();
    std::fs::write(dir.path().join("good.json"), &src).unwrap();
    std::fs::write(
        dir.path().join("multiply.json"),
        src.replace("\"add\"", "\"multiply\""),
    )
    .unwrap();
    let mut wrong: serde_json::Value = serde_json::from_str(&src).unwrap();
    wrong["expect"]["llm_calls_during_resume"] = serde_json::json!(7);
    std::fs::write(dir.path().join("wrong.json"), wrong.to_string()).unwrap();

    let out = afk()
        .args(["--json", "fixtures", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc["command"], "fixtures check");
    assert_eq!(doc["level"], "resume");
    assert_eq!(
        (&doc["passed"], &doc["failed"], &doc["needs_tools"]),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{doc:#}"
    );
    let results: Vec<(String, String)> = doc["fixtures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap();
            let base = file.rsplit('/').next().unwrap().to_owned();
            (base, f["result"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        results,
        [
            ("good.json".to_owned(), "ok".to_owned()),
            ("multiply.json".to_owned(), "needs_tools".to_owned()),
            ("wrong.json".to_owned(), "failed".to_owned()),
        ]
    );
    assert_eq!(doc["fixtures"][1]["tools"], serde_json::json!(["multiply"]));
    assert!(
        doc["fixtures"][2]["problem"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "{doc:#}"
    );
}

/// `fixtures load` ends with what each run now holds, counted from the fixture's own state,
/// and says when it replaced runs already there.
#[test]
fn fixtures_load_summarises_what_each_run_holds() {
    let dir = tempfile::tempdir().unwrap();
    let file = corpus().join("b-crash-k42-s3-pre_llm.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let state = fixture["state"].as_object().unwrap();
    let count = |prefix: &str| {
        state
            .keys()
            .filter(|k| k.starts_with(prefix) && !k.ends_with(":latest"))
            .count()
    };
    let url = format!("rocksdb://{}", dir.path().join("db").display());
    let load = |json: bool| {
        let mut cmd = afk();
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .args(["--store", &url, "fixtures", "load", "--thread", "fx"])
            .arg(&file)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", out);
        String::from_utf8(out.stdout).unwrap()
    };
    let first: serde_json::Value = serde_json::from_str(&load(true)).unwrap();
    assert_eq!(first["thread"], "fx");
    assert_eq!(first["keys"], state.len());
    let run = &first["runs"][0];
    assert_eq!(run["run"], fixture["run_id"]);
    assert_eq!(run["keys"], state.len());
    assert_eq!(run["records"], count("checkpoint:"));
    assert_eq!(run["effect_rows"], count("effect:"));
    assert_eq!(run["transcript_entries"], count("messages:"));
    assert_eq!(run["replaced"], false);
    let latest_key = format!("checkpoint:{}:latest", fixture["run_id"].as_str().unwrap());
    let pointer = &state[&latest_key];
    assert_eq!(run["latest"]["step"], pointer["step"], "{run}");
    assert_eq!(run["latest"]["phase"], pointer["phase"], "{run}");
    // Again, as text: the same run, now replacing the first load.
    let text = load(false);
    let row = text
        .lines()
        .find(|l| l.starts_with(fixture["run_id"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("no row for the run:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], state.len().to_string(), "{row}");
    assert_eq!(cells.last(), Some(&"yes"), "{row}");
    assert!(
        text.contains(&format!(
            "loaded {} keys of 1 run(s) into thread fx",
            state.len()
        )),
        "{text}"
    );
}
