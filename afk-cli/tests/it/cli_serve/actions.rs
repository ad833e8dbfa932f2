//! The actions of `afk serve` are the commands': a refused action shows, word for word, the
//! error `afk decide`, `afk settle` or `afk fork` prints for it; the API's answers are the
//! commands' `--json` documents; a fork from the page or the API is a run the application
//! resumes; and the API acts only with the bearer token (a session cookie alone, which a
//! browser would send, does not do).

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::{Server, TOKEN, TwoRuns, request, run_path};
use crate::cli_ops::{contents, resume};
use crate::common::afk_in;

/// The text of the page's `<pre>` block, HTML entities undone.
fn pre_text(page: &str) -> String {
    let start = page.find("<pre>").expect("a <pre> block") + 5;
    let end = start + page[start..].find("</pre>").unwrap();
    unescape(&page[start..end])
}

/// `text` with the HTML entities askama writes (`&#NN;`, `&amp;`, `&lt;`, `&gt;`, `&quot;`)
/// undone.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find(';').unwrap_or(0);
        let entity = &tail[1..end.max(1)];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            e => e
                .strip_prefix('#')
                .and_then(|n| n.parse::<u32>().ok())
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) if end > 0 => {
                out.push(c);
                rest = &tail[end + 1..];
            }
            _ => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A refused action: the run, the action, the form's fields, and the same as a command line.
type Case = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<&'static str>,
);

#[test]
fn a_refused_action_says_what_the_command_says() {
    let TwoRuns { dir, url, before } = TwoRuns::new();
    let cases: [Case; 4] = [
        (
            "u",
            "settle",
            vec![("call", "nope"), ("outcome", "did_not_run")],
            vec!["settle", "--run", "u", "--call", "nope", "--did-not-run"],
        ),
        (
            "p",
            "settle",
            vec![("call", "c1"), ("outcome", "failed"), ("error", "declined")],
            vec![
                "settle", "--run", "p", "--call", "c1", "--failed", "declined",
            ],
        ),
        (
            "u",
            "decide",
            vec![("decision", "approve")],
            vec!["decide", "--run", "u", "--approve"],
        ),
        (
            "p",
            "fork",
            vec![("step", "9")],
            vec!["fork", "--run", "p", "--step", "9"],
        ),
    ];
    let s = Server::start(&url, &[]);
    let me = s.session();
    let mut pages = Vec::new();
    for (run, action, fields, _) in &cases {
        let r = me.act("t", run, action, fields);
        assert!(r.status >= 400, "{action} {run}: {}", r.body);
        pages.push(pre_text(&r.body));
    }
    s.stop();
    assert_eq!(contents(&url, "t"), before, "a refused action wrote");
    for ((_, _, _, args), page) in cases.iter().zip(pages) {
        let mut all = vec!["--store", url.as_str(), args[0], "--thread", "t"];
        all.extend(&args[1..]);
        let out = afk_in(dir.path(), &all);
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stdout);
        assert_eq!(page, out.stderr, "{args:?}");
    }
}

#[test]
fn the_api_acts_with_the_bearer_token_and_answers_as_the_commands() {
    let TwoRuns {
        dir: _dir,
        url,
        before,
    } = TwoRuns::new();
    let s = Server::start(&url, &[]);
    let cookie = s.login();
    // A session cookie alone does not act through the API: a browser sends it by itself.
    let h = [
        ("Cookie", cookie.as_str()),
        ("Content-Type", "application/json"),
    ];
    let path = format!("/api{}/decide", run_path("t", "p"));
    let r = request(s.port, "POST", &path, &h, br#"{"approve": true}"#);
    assert_eq!(r.status, 401, "{}", r.body);
    s.stop();
    assert_eq!(contents(&url, "t"), before, "a cookie-only API post wrote");

    let s = Server::start(&url, &[]);
    let bearer = format!("Bearer {TOKEN}");
    let h = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let post = |run: &str, action: &str, body: Value| {
        let path = format!("/api{}/{action}", run_path("t", run));
        request(s.port, "POST", &path, &h, body.to_string().as_bytes())
    };
    let r = post("u", "settle", json!({"call": "c1", "did_not_run": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"thread": "t", "run": "u", "call": "c1", "settlement": "did_not_run",
            "written": true})
    );
    let r = post("p", "fork", json!({"step": 1, "new_run": "p2"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"thread": "t", "run": "p", "step": 1, "new_run": "p2",
            "message_replaced": false})
    );
    // The same fork from the page.
    let r = s.session().act("t", "p", "fork", &[("step", "1")]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("as run p-fork-1"), "{}", r.body);
    assert!(
        r.body.contains("href=\"/threads/t/runs/p-fork-1\""),
        "{}",
        r.body
    );
    let r = post("p", "decide", json!({"approve": true, "deny": "both"}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["kind"], "invalid_input");
    s.stop();

    // The application's resume of each fork runs step 1 again: the gate asks again.
    for run in ["p2", "p-fork-1"] {
        let (out, charge) = resume(&url, "t", run, true);
        let out = out.unwrap();
        assert!(
            matches!(out, afk::runner::Outcome::Paused { .. }),
            "{out:?}"
        );
        assert_eq!(charge.calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
    let (out, charge) = resume(&url, "t", "u", false);
    crate::cli_ops::completed(out);
    assert_eq!(charge.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
