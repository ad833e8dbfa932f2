//! `afk demo` end to end: it crashes, resumes, and the facts it prints come from counters.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

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
