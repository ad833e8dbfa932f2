//! `afk demo` end to end: it crashes, resumes, and the facts it prints come from counters.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{afk_in, line, numbers, rocks};

/// (before crash, on resume, total, uncrashed) of a tool line of the summary.
fn tool_counts(stdout: &str, tool: &str) -> (u64, u64, u64, u64) {
    let l = stdout
        .lines()
        .find(|l| l.starts_with(&format!("  {tool} (")) && l.contains("in total"))
        .unwrap_or_else(|| panic!("no summary line for {tool}:\n{stdout}"));
    let n = numbers(l);
    assert_eq!(n.len(), 4, "{l}");
    (n[0], n[1], n[2], n[3])
}

#[test]
fn default_demo_crashes_after_the_batch_and_resume_executes_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let out = afk_in(dir.path(), &["demo"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let s = &out.stdout;
    // The default store is ./.afk-demo in the working directory.
    assert!(dir.path().join(".afk-demo").is_dir());
    let crash = line(s, "CRASH: commit #");
    let saved = numbers(crash)[0] - 1;
    assert!(s.contains(&format!("  saved #{saved}: ")), "{s}");
    assert!(!s.contains(&format!("  saved #{}: ", saved + 1)), "{s}");
    // The two tools of the parallel batch ran once before the crash and zero times again.
    for tool in ["reserve_stock", "charge_card"] {
        assert_eq!(tool_counts(s, tool), (1, 0, 1, 1), "{tool}: {s}");
        assert!(s.contains(&format!("{tool} (call_")), "{s}");
    }
    assert_eq!(tool_counts(s, "send_receipt"), (0, 1, 1, 1));
    assert!(
        line(s, "step 1: charge_card (call_charge)").contains("replayed from the effect journal")
    );
    assert!(line(s, "step 1: ").contains("saved model answer reused (no model call)"));
    let calls = numbers(line(s, "model calls:"));
    assert_eq!(calls[0] + calls[1], calls[2]);
    assert_eq!(
        calls[2], calls[3],
        "same model calls as the uncrashed run: {s}"
    );
    assert_eq!(calls[1], 2);
    assert_eq!(numbers(line(s, "effects replayed from the journal"))[0], 2);
    assert!(
        s.contains("result identical to the uncrashed run: yes"),
        "{s}"
    );
    // Rerunnable: the demo wipes its own thread first.
    let again = afk_in(dir.path(), &["demo"]);
    assert_eq!(again.code, Some(0), "{}", again.stdout);
    assert_eq!(again.stdout.lines().count(), out.stdout.lines().count());
}

#[test]
fn every_crash_point_resumes_to_the_uncrashed_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = rocks(dir.path());
    let first = afk_in(
        dir.path(),
        &["demo", "--store", &store, "--crash-after", "0"],
    );
    let total = numbers(line(&first.stdout, "reference:"))[0];
    assert!(total > 20, "{}", first.stdout);
    let (mut completed, mut uncertain) = (0, 0);
    for k in 0..=total {
        let k = k.to_string();
        let out = afk_in(
            dir.path(),
            &["demo", "--store", &store, "--crash-after", &k],
        );
        let s = &out.stdout;
        assert_eq!(out.code, Some(0), "crash after {k}:\n{s}\n{}", out.stderr);
        assert!(!s.contains("PROBLEM"), "{s}");
        let (c1, c2, _, _) = tool_counts(s, "charge_card");
        assert!(
            c1 + c2 <= 1,
            "at-most-once charge ran {} times: {s}",
            c1 + c2
        );
        if s.contains("result identical to the uncrashed run: yes") {
            completed += 1;
            let calls = numbers(line(s, "model calls:"));
            assert!(calls[2] >= calls[3], "{s}");
        } else if s.contains("EffectUncertain") {
            uncertain += 1;
            assert_eq!(numbers(line(s, "model calls:"))[1], 0, "{s}");
        } else {
            assert!(s.contains("nothing to resume"), "{s}");
        }
    }
    assert!(completed > 10, "{completed}");
    assert!(
        uncertain >= 1,
        "a crash between the charge's intent and result"
    );
}

/// `stdout` parsed as exactly one JSON document.
fn one_document(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{stdout}"))
}

#[test]
fn demo_json_is_one_document_with_the_facts_the_narrative_prints() {
    let dir = tempfile::tempdir().unwrap();
    let text = afk_in(dir.path(), &["demo"]);
    let out = afk_in(dir.path(), &["demo", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let d = one_document(&out.stdout);
    assert_eq!(d["mode"], "crash_and_resume");
    assert_eq!(d["ok"], true);
    assert_eq!(d["problems"], serde_json::json!([]));
    assert_eq!(
        (d["thread"].as_str(), d["run"].as_str()),
        (Some("afk-demo"), Some("demo-order-42"))
    );
    // The same figures as the narrative.
    let crash = numbers(line(&text.stdout, "CRASH: commit #"))[0];
    assert_eq!(d["crash_after"], crash - 1);
    assert_eq!(d["first_process"]["commits_saved"], crash - 1);
    assert_eq!(d["first_process"]["crashed"], true);
    let commits = d["first_process"]["commits"].as_array().unwrap();
    assert_eq!(commits.len() as u64, crash - 1);
    assert_eq!(
        numbers(line(&text.stdout, "reference:"))[0],
        d["reference"]["commits"].as_u64().unwrap()
    );
    let calls = numbers(line(&text.stdout, "model calls:"));
    let m = &d["model_calls"];
    assert_eq!(
        [
            &m["before_crash"],
            &m["on_resume"],
            &m["total"],
            &m["uncrashed"]
        ],
        [calls[0], calls[1], calls[2], calls[3]]
    );
    for t in d["tools"].as_array().unwrap() {
        let tool = t["tool"].as_str().unwrap();
        let (c1, c2, total, base) = tool_counts(&text.stdout, tool);
        assert_eq!(
            (
                &t["before_crash"],
                &t["on_resume"],
                &t["total"],
                &t["uncrashed"]
            ),
            (&c1.into(), &c2.into(), &total.into(), &base.into()),
            "{tool}"
        );
    }
    let r = &d["resume"];
    assert_eq!(r["outcome"], "completed");
    assert_eq!(r["identical_to_uncrashed"], true);
    assert_eq!(r["replayed_effects"], 2);
    let replayed: Vec<&str> = r["tool_results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["replayed"] == true)
        .map(|t| t["call"].as_str().unwrap())
        .collect();
    assert_eq!(replayed, ["call_reserve", "call_charge"]);
    let charge = d["stored"]["effects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["call"] == "call_charge")
        .unwrap();
    assert_eq!(charge["status"], "result");
    assert!(!out.stdout.contains("== 1."), "no narrative in --json");
}

#[test]
fn demo_json_reports_an_uncertain_stop_and_resume_json_its_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let out = afk_in(dir.path(), &["--json", "demo", "--crash-after", "10"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let d = one_document(&out.stdout);
    assert_eq!(d["resume"]["outcome"], "effect_uncertain", "{d}");
    assert_eq!(d["resume"]["llm_calls"], 0);
    assert!(
        d["resume"]["error"]
            .as_str()
            .unwrap()
            .contains("call_charge"),
        "{d}"
    );
    let statuses: Vec<&str> = d["stored"]["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    // Commit 10 holds the reservation's result; the charge's intent has no result.
    assert_eq!(statuses, ["result", "intent", "none"]);
    // The application's plain resume refuses too: an error document, exit 1.
    let again = afk_in(dir.path(), &["--json", "demo", "--resume"]);
    assert_eq!(again.code, Some(1), "{}", again.stdout);
    let e = one_document(&again.stdout);
    assert_eq!(e["error"]["kind"], "effect_uncertain", "{e}");
    assert_eq!(e["error"]["command"], "demo");
}

/// `afk demo --approval` leaves order 43 paused before any of its tools ran, next to the plain
/// demo's run (here left uncertain); approved with `afk decide`, the application's resume
/// (`afk demo --approval --resume`) charges once and completes; denied, it completes without
/// charging or sending a receipt, and says so.
#[test]
fn the_approval_order_pauses_for_a_human_and_resumes_as_decided() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let afk = |args: &[&str]| {
        let mut all = vec!["--store", url.as_str()];
        all.extend_from_slice(args);
        afk_in(dir.path(), &all)
    };
    let stuck = afk(&["demo", "--crash-after", "10"]);
    assert_eq!(stuck.code, Some(0), "{}", stuck.stdout);
    for (answer, reason) in [("--approve", None), ("--deny", Some("over budget"))] {
        let out = afk(&["demo", "--approval"]);
        assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
        let paused = line(&out.stdout, "run demo-order-43:");
        assert!(paused.contains("paused before any tool ran"), "{paused}");
        assert!(paused.contains("call_charge"), "{paused}");
        assert_eq!(
            line(&out.stdout, "model calls:"),
            "model calls: 1; tool executions: none"
        );
        let doc = one_document(&afk(&["--json", "runs", "--thread", "afk-demo"]).stdout);
        let states: Vec<(&str, &str)> = doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["run"].as_str().unwrap(), r["state"].as_str().unwrap()))
            .collect();
        assert_eq!(
            states,
            [("demo-order-42", "uncertain"), ("demo-order-43", "paused")]
        );
        let mut decide = vec![
            "decide",
            "--thread",
            "afk-demo",
            "--run",
            "demo-order-43",
            answer,
        ];
        decide.extend(reason);
        let decided = afk(&decide);
        assert_eq!(decided.code, Some(0), "{}", decided.stderr);
        let resumed = afk(&["--json", "demo", "--approval", "--resume"]);
        assert_eq!(resumed.code, Some(0), "{}", resumed.stdout);
        let d = one_document(&resumed.stdout);
        assert_eq!(d["run"], "demo-order-43");
        assert_eq!(d["outcome"], "completed", "{d}");
        let text = d["final_text"].as_str().unwrap();
        let executed = &d["tool_executions"];
        if reason.is_none() {
            assert_eq!(
                executed,
                &serde_json::json!({"call_charge": 1, "call_receipt": 1, "call_reserve": 1})
            );
            assert!(text.starts_with("Order 43 is confirmed"), "{text}");
        } else {
            assert_eq!(executed, &serde_json::json!({"call_reserve": 1}));
            assert!(text.contains("not approved"), "{text}");
        }
    }
}
