//! Progress lines appear on a terminal and nowhere else. The terminal is a real pseudo-terminal
//! (util-linux `script`, which puts the command's stdout and stderr on one pty).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{afk_in, corpus, rocks};

/// Run `afk args` on a pseudo-terminal in `dir`; everything it wrote, and its exit code.
fn on_terminal(dir: &Path, args: &[&str]) -> (String, Option<i32>) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut line = quote(env!("CARGO_BIN_EXE_afk"));
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .current_dir(dir)
        .env_remove("AFK_STORE")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux `script` runs (Debian: bsdutils)");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

#[test]
fn fixtures_check_counts_its_fixtures_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::fs::read_dir(corpus())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.ends_with(".json") && !name.to_ascii_lowercase().starts_with("readme")
        })
        .count();
    assert!(fixtures > 10, "{fixtures}");
    let corpus = corpus();
    let args = [
        "fixtures",
        "check",
        "--level",
        "normalize",
        corpus.to_str().unwrap(),
    ];
    let (tty, code) = on_terminal(dir.path(), &args);
    assert_eq!(code, Some(0), "{tty}");
    for n in [1, fixtures] {
        assert!(
            tty.contains(&format!("checking fixtures {n}/{fixtures}")),
            "no progress {n}/{fixtures} on the terminal:\n{tty}"
        );
    }
    assert!(
        tty.contains(&format!("{fixtures} passed, 0 failed")),
        "{tty}"
    );
    // Piped: the verdicts alone, no progress, no terminal escapes.
    let piped = afk_in(dir.path(), &args);
    assert_eq!(piped.code, Some(0));
    assert_eq!(piped.stderr, "");
    assert!(!piped.stdout.contains("checking") && !piped.stdout.contains('\x1b'));
    // --json on a terminal: the document alone.
    let mut json_args = vec!["--json"];
    json_args.extend(args);
    let (tty, _) = on_terminal(dir.path(), &json_args);
    assert!(!tty.contains("checking fixtures"), "{tty}");
}

#[test]
fn verify_all_shows_progress_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(&dir.path().join("db"));
    let demo = afk_in(dir.path(), &["--store", &url, "demo"]);
    assert_eq!(demo.code, Some(0), "{}", demo.stderr);
    let args = ["--store", &url, "verify", "--all"];
    let (tty, code) = on_terminal(dir.path(), &args);
    assert_eq!(code, Some(0), "{tty}");
    // Runs done so far, of all.
    assert!(tty.contains("verifying runs 0/1"), "{tty}");
    let piped = afk_in(dir.path(), &args);
    assert_eq!(piped.code, Some(0));
    assert!(!piped.stderr.contains("verifying"), "{}", piped.stderr);
}
