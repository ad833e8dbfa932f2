//! The protections of `afk serve`, each over HTTP against a real store: a wrong token gets
//! nothing, a form post without the session's CSRF token changes nothing, `--read-only`
//! refuses every action, an unknown run is a 404 page, two people approving at once leave one
//! decision (the other is told it was already decided), no token means no server, and the
//! token appears in no page and no log line. The JSON API answers with the documents of the
//! CLI's `--json`.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::{Server, TOKEN, TwoRuns, form, rocks, run_path};
use crate::cli_ops::{completed, contents, paused_run, resume};
use crate::common::afk_in;

/// A wrong token opens no session and reads nothing; nor does a made-up session cookie.
#[test]
fn a_wrong_token_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    paused_run(&url, "secret-thread", "r1");
    let s = Server::start(&url, &[]);
    for token in ["wrong-token-wrong-token", "", &TOKEN[..TOKEN.len() - 1]] {
        let r = s.post_form("/login", &[], &form(&[("token", token)]));
        assert_eq!(r.status, 401, "{token:?}: {}", r.body);
        assert!(r.header("set-cookie").is_none(), "{token:?}");
        assert!(r.body.contains("Wrong token"), "{}", r.body);
    }
    let forged = "afk_session=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    for headers in [vec![], vec![("Cookie", forged)]] {
        let page = s.get("/", &headers);
        assert_eq!(page.status, 303, "{}", page.body);
        assert_eq!(page.header("location"), Some("/login"));
        assert!(!page.body.contains("secret-thread"));
        let run = s.get(&run_path("secret-thread", "r1"), &headers);
        assert_eq!(run.status, 303);
    }
    for auth in ["Bearer wrong-token-wrong-token", "Basic Zm9vOmJhcg=="] {
        let api = s.get("/api/threads", &[("Authorization", auth)]);
        assert_eq!(api.status, 401, "{}", api.body);
        assert!(!api.body.contains("secret-thread"), "{}", api.body);
    }
    let bearer = format!("Bearer {TOKEN}");
    let api = s.get("/api/threads", &[("Authorization", &bearer)]);
    assert_eq!(api.status, 200, "{}", api.body);
    assert!(api.body.contains("secret-thread"));
    // The right token opens a session whose cookie no script reads and no other site sends.
    let r = s.post_form("/login", &[], &form(&[("token", TOKEN)]));
    assert_eq!(r.status, 303);
    let cookie = r.header("set-cookie").unwrap();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    // Logging out (with the session's CSRF token) ends the session.
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let csrf = s.csrf(&cookie, "/");
    let out = s.post_form("/logout", &[("Cookie", &cookie)], &form(&[("csrf", &csrf)]));
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let page = s.get("/", &[("Cookie", &cookie)]);
    assert_eq!(page.header("location"), Some("/login"), "{}", page.body);
}

/// Posts without the session's CSRF token (none, a wrong one, another session's) change
/// nothing; the same post with it is recorded.
#[test]
fn a_forged_post_without_the_csrf_token_changes_nothing() {
    let TwoRuns {
        dir: _dir,
        url,
        before,
    } = TwoRuns::new();
    let s = Server::start(&url, &[]);
    let me = s.session();
    let others = s.session().csrf;
    let decide = format!("{}/decide", run_path("t", "p"));
    for csrf in [None, Some("0".repeat(64)), Some(others)] {
        let csrf = csrf.as_deref();
        let r = me.post_with(&decide, &[("decision", "approve")], csrf);
        assert_eq!(r.status, 403, "{csrf:?}: {}", r.body);
        assert!(
            r.body.contains("CSRF token is missing or wrong"),
            "{}",
            r.body
        );
        let path = format!("{}/settle", run_path("t", "u"));
        let r = me.post_with(&path, &[("call", "c1"), ("outcome", "did_not_run")], csrf);
        assert_eq!(r.status, 403, "{}", r.body);
        let path = format!("{}/fork", run_path("t", "p"));
        let r = me.post_with(&path, &[("step", "1")], Some(csrf.unwrap_or("")));
        assert_eq!(r.status, 403, "{}", r.body);
    }
    // Without a session cookie at all (a cross-site post: SameSite=Strict keeps it home).
    let body = form(&[("decision", "approve"), ("csrf", &me.csrf)]);
    let r = s.post_form(&decide, &[], &body);
    assert_eq!(r.status, 403, "{}", r.body);
    s.stop();
    assert_eq!(contents(&url, "t"), before, "a forged post wrote");

    let s = Server::start(&url, &[]);
    let r = s
        .session()
        .act("t", "p", "decide", &[("decision", "approve")]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("recorded `approve` for paused run p"),
        "{}",
        r.body
    );
    s.stop();
    let (out, charge) = resume(&url, "t", "p", true);
    completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 1);
}

/// `--read-only`: no action form on the pages, and every action (form or API) is a 403 that
/// writes nothing.
#[test]
fn read_only_refuses_every_action() {
    let TwoRuns {
        dir: _dir,
        url,
        before,
    } = TwoRuns::new();
    let s = Server::start(&url, &["--read-only"]);
    let me = s.session();
    let page = me.get(&run_path("t", "p"));
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("This server is read-only"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("/decide\""), "{}", page.body);
    // The logout form carries the session's CSRF token: a post with it is refused for being
    // read-only, not for a missing token.
    let posts = [
        ("p", "decide", vec![("decision", "approve")]),
        (
            "u",
            "settle",
            vec![("call", "c1"), ("outcome", "did_not_run")],
        ),
        ("p", "fork", vec![("step", "1")]),
    ];
    for (run, action, fields) in posts {
        let r = me.act("t", run, action, &fields);
        assert_eq!(r.status, 403, "{action}: {}", r.body);
        assert!(r.body.contains("read-only"), "{}", r.body);
    }
    let bearer = format!("Bearer {TOKEN}");
    let h = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let api = [
        ("p", "decide", r#"{"approve": true}"#),
        ("u", "settle", r#"{"call": "c1", "did_not_run": true}"#),
        ("p", "fork", r#"{"step": 1}"#),
    ];
    for (run, action, body) in api {
        let path = format!("/api{}/{action}", run_path("t", run));
        let r = super::request(s.port, "POST", &path, &h, body.as_bytes());
        assert_eq!(r.status, 403, "{action}: {}", r.body);
        assert_eq!(r.json()["error"]["command"], action);
    }
    s.stop();
    assert_eq!(contents(&url, "t"), before, "a read-only server wrote");
}

/// An unknown run, thread or path is a 404 page (and a `not_found` document in the API).
#[test]
fn an_unknown_run_is_a_404_page() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    paused_run(&url, "t", "p");
    let s = Server::start(&url, &[]);
    let me = s.session();
    for path in [
        run_path("t", "nope"),
        "/threads/nope".into(),
        "/nowhere".into(),
    ] {
        let r = me.get(&path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert!(r.body.contains("<h1>Not found</h1>"), "{}", r.body);
    }
    let r = me.get(&run_path("t", "nope"));
    assert!(
        r.body
            .contains("run nope in thread t has no latest pointer"),
        "{}",
        r.body
    );
    let api = me.get(&format!("/api{}", run_path("t", "nope")));
    assert_eq!(api.status, 404, "{}", api.body);
    assert_eq!(api.json()["error"]["kind"], "not_found");
    // Deciding an unknown run is refused as `afk decide` refuses it.
    let r = me.act("t", "nope", "decide", &[("decision", "approve")]);
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("afk decide: not_found"), "{}", r.body);
}

/// Two people approve the same paused run at the same moment: one decision is recorded, the
/// other is told it was already decided (the store's claim, not the server, decides), and the
/// application's resume runs the call once.
pub fn approving_at_once(url: &str, thread: &str, stop_before_resume: bool) {
    paused_run(url, thread, "race");
    let s = Server::start(url, &[]);
    let people: Vec<_> = (0..2).map(|_| s.session()).collect();
    let barrier = std::sync::Barrier::new(2);
    let answers: Vec<super::Resp> = std::thread::scope(|scope| {
        let handles: Vec<_> = people
            .iter()
            .map(|person| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    person.act(thread, "race", "decide", &[("decision", "approve")])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // One request wins ("Recorded"); the other is told the run is already decided. When the
    // store fenced the winner after its record was durable (the other claimed the run in
    // between), both are told "already decided": still one decision, stored once.
    let won = answers
        .iter()
        .filter(|r| r.body.contains("<h1>Recorded</h1>"))
        .count();
    assert!(won <= 1, "{answers:#?}");
    for lost in answers
        .iter()
        .filter(|r| !r.body.contains("<h1>Recorded</h1>"))
    {
        let heading = lost
            .body
            .split("<h1>")
            .nth(1)
            .and_then(|h| h.split("</h1>").next());
        eprintln!("the other person saw: {heading:?}");
        assert!(
            heading.is_some_and(|h| h.to_lowercase().contains("already decided")),
            "{}",
            lost.body
        );
    }
    drop(people);
    if stop_before_resume {
        s.stop();
    }
    let (out, charge) = resume(url, thread, "race", true);
    completed(out);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn two_people_approving_at_once_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    approving_at_once(&rocks(dir.path()), "t", true);
}

#[cfg(feature = "redis")]
#[test]
fn two_people_approving_at_once_on_redis() {
    if let Some(url) = crate::cli_ops::require_env("AFK_TEST_REDIS_URL") {
        approving_at_once(&url, &crate::cli_ops::unique("serve_race"), false);
    }
}

#[cfg(feature = "s3")]
#[test]
fn two_people_approving_at_once_on_s3() {
    if let Some(url) = crate::cli_ops::s3_url() {
        approving_at_once(&url, &crate::cli_ops::unique("serve_race"), false);
    }
}

/// No token, no server (unless `--no-auth` on loopback); a short token is refused too.
#[test]
fn no_token_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    paused_run(&url, "t", "p");
    let err = Server::try_start(&url, None, &[]).err().unwrap();
    assert!(err.contains("AFK_SERVE_TOKEN is not set"), "{err}");
    let err = Server::try_start(&url, Some("short"), &[]).err().unwrap();
    assert!(err.contains("shorter than 16"), "{err}");
    let out = afk_in(
        dir.path(),
        &["--store", &url, "serve", "--no-auth", "--bind", "0.0.0.0:0"],
    );
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains("only allowed on a loopback"),
        "{}",
        out.stderr
    );
    let open = Server::try_start(&url, None, &["--no-auth"]).unwrap();
    // Even without a token, actions need the session's CSRF token.
    let r = open.get("/login", &[]);
    assert_eq!(r.status, 303);
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let path = format!("{}/decide", run_path("t", "p"));
    let r = open.post_form(
        &path,
        &[("Cookie", &cookie)],
        &form(&[("decision", "approve")]),
    );
    assert_eq!(r.status, 403, "{}", r.body);
}

/// The token, the session cookie and the CSRF token appear in no log line (at trace level) and
/// the token in no page; a page shown before login does not name the store.
#[test]
fn secrets_stay_out_of_pages_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    paused_run(&url, "t", "p");
    let s = Server::start(&url, &[]);
    let me = s.session();
    let mut pages = Vec::new();
    for path in ["/", "/threads/t", &run_path("t", "p"), "/login", "/nowhere"] {
        pages.push(me.get(path).body);
    }
    let fields = [("decision", "deny"), ("reason", "no")];
    pages.push(me.act("t", "p", "decide", &fields).body);
    let (cookie, csrf) = (me.cookie, me.csrf);
    let bearer = format!("Bearer {TOKEN}");
    pages.push(s.get("/api/threads", &[("Authorization", &bearer)]).body);
    let log = s.stop();
    assert!(log.contains("login accepted"), "{log}");
    let session = cookie.split('=').nth(1).unwrap();
    for secret in [TOKEN, session, &csrf] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    for page in &pages {
        assert!(!page.contains(TOKEN), "{page}");
    }
    // Before login, pages do not even name the store.
    let s = Server::start(&url, &[]);
    for path in ["/login", "/nowhere"] {
        let page = s.get(path, &[]).body;
        assert!(!page.contains(dir.path().to_str().unwrap()), "{page}");
    }
}

/// The API's documents are those of `afk threads`, `runs`, `show` and `timeline` `--json`.
#[test]
fn the_api_answers_with_the_documents_of_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    paused_run(&url, "t", "p");
    let s = Server::start(&url, &[]);
    let bearer = format!("Bearer {TOKEN}");
    let api = |path: &str| s.get(path, &[("Authorization", &bearer)]).json();
    let docs = [
        (api("/api/threads"), vec!["threads"]),
        (api("/api/threads/t/runs"), vec!["runs", "--thread", "t"]),
        (
            api("/api/threads/t/runs/p"),
            vec!["show", "--thread", "t", "--run", "p"],
        ),
        (
            api("/api/threads/t/runs/p/timeline"),
            vec!["timeline", "--thread", "t", "--run", "p"],
        ),
    ];
    s.stop();
    for (doc, args) in docs {
        let mut all = vec!["--store", url.as_str(), "--json"];
        all.extend(args.iter().copied());
        let out = afk_in(dir.path(), &all);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let cli: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(doc, cli, "{args:?}");
    }
}
