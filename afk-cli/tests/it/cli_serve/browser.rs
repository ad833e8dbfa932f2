//! A person at a browser: headless Chromium (Debian's `chromium` and `chromium-driver`, which
//! `cargo xtask test` installs) driven over WebDriver, on the demo's own runs: its order left
//! uncertain by a crash (`afk demo --crash-after 10`) and its order paused for a human's
//! approval (`afk demo --approval`). On RocksDB, Redis and S3 the person logs in, finds the
//! thread and its paused run, approves it (from the keyboard: the token and Enter, Enter on
//! the button), settles the uncertain card charge as having run; the demo application's next
//! plain resume (`afk demo --approval --resume`, `afk demo --resume`) completes each run as
//! the library says: the approved charge runs once, the settled one is replayed without
//! running. Then the approval order again, denied (Enter in the reason's field): its resume
//! completes it with the charge a failed call carrying the reason, nothing charged and no
//! receipt sent; and the completed order forked from its step 2, which the application's
//! resume (`afk demo --resume --run <fork>`) runs from there. An unknown run shows the 404
//! page.
//!
//! Screenshots of each page are taken on RocksDB, into `$AFK_SERVE_SCREENSHOTS` when set (the
//! README's come from `AFK_SERVE_SCREENSHOTS=$PWD/docs/serve`), else into the target
//! directory.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Server, TOKEN, request, rocks, run_path};
use crate::common::afk_in;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver with one headless Chromium session; both end when dropped.
struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Where chromedriver and Chromium are, or `None` (after saying so) when they are not
/// installed; with `AFK_REQUIRE_INTEGRATION=1` a missing browser fails the test.
fn installed() -> Option<(PathBuf, PathBuf)> {
    let path = |var: &str, default: &str| {
        PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.to_owned()))
    };
    let driver = path("AFK_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
    let chromium = path("AFK_TEST_CHROMIUM", "/usr/bin/chromium");
    if driver.is_file() && chromium.is_file() {
        return Some((driver, chromium));
    }
    let msg = format!(
        "no browser: {} or {} is missing (`cargo xtask test` installs Debian's chromium and \
         chromium-driver)",
        driver.display(),
        chromium.display()
    );
    if std::env::var("AFK_REQUIRE_INTEGRATION").as_deref() == Ok("1") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

impl Browser {
    fn start() -> Option<Browser> {
        let (driver_bin, chromium) = installed()?;
        let port = free_port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=480,900",
            "--force-device-scale-factor=1",
            &format!("--user-data-dir={}", b._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}}}});
        let v = b.call("POST", "/session", &caps);
        b.session = v["sessionId"].as_str().unwrap().to_owned();
        Some(b)
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let h = [("Content-Type", "application/json")];
        let r = request(self.port, method, path, &h, body.as_bytes());
        let v = r.json();
        assert_eq!(r.status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn on(&self, method: &str, what: &str, body: &Value) -> Value {
        let path = format!("/session/{}{what}", self.session);
        self.call(method, &path, body)
    }

    fn goto(&self, url: &str) {
        self.on("POST", "/url", &json!({"url": url}));
    }

    fn find(&self, css: &str) -> String {
        let v = self.on(
            "POST",
            "/element",
            &json!({"using": "css selector", "value": css}),
        );
        let id = v[ELEMENT].as_str();
        id.unwrap_or_else(|| panic!("no element {css}: {v}\n{}", self.source()))
            .to_owned()
    }

    fn click(&self, css: &str) {
        let id = self.find(css);
        self.on("POST", &format!("/element/{id}/click"), &json!({}));
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.on(
            "POST",
            &format!("/element/{id}/value"),
            &json!({"text": text}),
        );
    }

    fn source(&self) -> String {
        self.on("GET", "/source", &Value::Null)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Wait until the page holds `text`; the page.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = self.source();
            if page.contains(text) {
                return page;
            }
            assert!(Instant::now() < deadline, "no {text:?} in:\n{page}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Save the page as `<name>.png` in `dir`, if given; check it is a PNG either way.
    fn screenshot(&self, dir: Option<&PathBuf>, name: &str) {
        let b64 = self.on("GET", "/screenshot", &Value::Null);
        let png = base64_decode(b64.as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = request(self.port, "DELETE", &path, &[], b"");
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s.bytes().filter(|c| !b"=\r\n".contains(c)).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | u32::from(val(*c)) << (18 - 6 * i));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// Where the screenshots go (RocksDB only: the shared servers' stores hold other tests'
/// threads too).
fn shots() -> PathBuf {
    match std::env::var_os("AFK_SERVE_SCREENSHOTS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots"),
    }
}

/// `afk --store url <args>` (the demo application, or another command); its stdout, after
/// checking it exited 0.
fn afk(url: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    let out = afk_in(dir.path(), &all);
    assert_eq!(out.code, Some(0), "{args:?}: {}{}", out.stdout, out.stderr);
    out.stdout
}

/// The person at `b` logs in to `s` from the keyboard (the token, then Enter).
fn log_in(b: &Browser, s: &Server, dir: Option<&PathBuf>) -> String {
    let base = format!("http://127.0.0.1:{}", s.port);
    b.goto(&format!("{base}/"));
    b.wait_for("id=\"token\"");
    b.screenshot(dir, "login");
    b.type_into("#token", &format!("{TOKEN}\u{E007}"));
    b.wait_for("<h1>Threads</h1>");
    base
}

const PAUSED: &str = "demo-order-43";
const UNCERTAIN: &str = "demo-order-42";

/// The walk-through on the store `url`, with the demo's runs: its order left uncertain by a
/// crash (`afk demo --crash-after 10`) and its order paused for approval (`afk demo
/// --approval`). `rocksdb`: the server is stopped before the application resumes (a RocksDB
/// database is open in one process at a time), and the screenshots are taken.
fn walk_through(url: &str, rocksdb: bool) {
    afk(url, &["demo", "--crash-after", "10"]);
    afk(url, &["demo", "--approval"]);
    let s = Server::start(url, &[]);
    let Some(b) = Browser::start() else { return };
    let dir = rocksdb.then(shots);
    let dir = dir.as_ref();
    let base = log_in(&b, &s, dir);
    b.screenshot(dir, "threads");
    b.click("a[href=\"/threads/afk-demo\"]");
    b.wait_for("<h1>Thread afk-demo</h1>");
    b.screenshot(dir, "runs");
    b.click("a[href=\"/threads/afk-demo?state=paused\"]");
    let page = b.wait_for("aria-current=\"page\">paused<");
    assert!(page.contains(PAUSED) && !page.contains(UNCERTAIN), "{page}");

    b.click(&format!("a[href=\"{}\"]", run_path("afk-demo", PAUSED)));
    b.wait_for("Waiting for your decision");
    b.screenshot(dir, "run-paused");
    // From the keyboard: Enter on the focused button.
    b.type_into("#approve", "\u{E007}");
    let page = b.wait_for("<h1>Recorded</h1>");
    assert!(
        page.contains("recorded `approve` for paused run demo-order-43"),
        "{page}"
    );
    b.screenshot(dir, "approved");

    b.goto(&format!("{base}/threads/afk-demo?state=uncertain"));
    b.wait_for("aria-current=\"page\">uncertain<");
    b.click(&format!("a[href=\"{}\"]", run_path("afk-demo", UNCERTAIN)));
    b.wait_for("Did tool call <code>call_charge</code> (<code>charge_card</code>) happen?");
    b.screenshot(dir, "demo-uncertain");
    b.click("#ran-1");
    b.type_into("#output-1", r#"{"charge_id": "ch_123"}"#);
    b.click("#settle-1");
    let page = b.wait_for("<h1>Recorded</h1>");
    assert!(
        page.contains("settled tool call call_charge of run demo-order-42"),
        "{page}"
    );
    b.screenshot(dir, "settled");

    b.goto(&format!("{base}{}", run_path("afk-demo", "no-such-run")));
    b.wait_for("<h1>Not found</h1>");
    b.screenshot(dir, "not-found");
    if rocksdb {
        s.stop();
    }
    the_application_completes_the_runs(url);
    denied_and_forked_in_the_browser(url, &b, rocksdb);
}

/// The demo application's next plain resume of each run: the approved charge runs once, the
/// settled one is replayed without running.
fn the_application_completes_the_runs(url: &str) {
    let out = afk(url, &["--json", "demo", "--approval", "--resume"]);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["outcome"], "completed", "{d}");
    assert_eq!(
        d["tool_executions"]["call_charge"], 1,
        "the approved call: {d}"
    );
    assert!(
        d["final_text"]
            .as_str()
            .unwrap()
            .starts_with("Order 43 is confirmed"),
        "{d}"
    );

    let out = afk(url, &["--json", "demo", "--resume"]);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["outcome"], "completed", "{d}");
    assert_eq!(d["tool_executions"], json!({"call_receipt": 1}), "{d}");
}

/// The approval order again, denied from the browser (Enter in the reason's field): the
/// application's resume completes it without charging or sending a receipt, the denied call a
/// failed tool call with the reason, as the library records it. And the completed order 42
/// forked from its step 2 in the browser: the application's resume of the new run makes step
/// 2 again (one more receipt) and not step 1 (no charge, no reservation).
fn denied_and_forked_in_the_browser(url: &str, b: &Browser, rocksdb: bool) {
    afk(url, &["demo", "--approval"]);
    let s = Server::start(url, &[]);
    let base = log_in(b, &s, None);
    b.goto(&format!("{base}{}", run_path("afk-demo", PAUSED)));
    b.wait_for("Waiting for your decision");
    b.type_into("#reason", "over budget\u{E007}");
    let page = b.wait_for("<h1>Recorded</h1>");
    assert!(
        page.contains("recorded `deny` for paused run demo-order-43"),
        "{page}"
    );
    b.goto(&format!("{base}{}", run_path("afk-demo", UNCERTAIN)));
    b.wait_for("Fork from a step");
    b.click("#step option[value=\"2\"]");
    b.click("#fork");
    let page = b.wait_for("<h1>Recorded</h1>");
    assert!(page.contains("as run demo-order-42-fork-2"), "{page}");
    if rocksdb {
        s.stop();
    }
    let fork = "demo-order-42-fork-2";
    let out = afk(url, &["--json", "demo", "--resume", "--run", fork]);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["outcome"], "completed", "{d}");
    assert_eq!(d["tool_executions"], json!({"call_receipt": 1}), "{d}");
    assert_eq!(d["llm_calls"], 2, "{d}");
    let out = afk(url, &["--json", "demo", "--approval", "--resume"]);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["outcome"], "completed", "{d}");
    assert_eq!(d["tool_executions"], json!({"call_reserve": 1}), "{d}");
    assert!(
        d["final_text"].as_str().unwrap().contains("not approved"),
        "{d}"
    );
    let show = afk(
        url,
        &[
            "--json", "timeline", "--thread", "afk-demo", "--run", PAUSED,
        ],
    );
    assert!(
        show.contains("Tool call denied: over budget"),
        "the denied call's record: {show}"
    );
}

#[test]
fn a_person_answers_the_demos_runs_from_a_browser_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    walk_through(&rocks(dir.path()), true);
}

#[cfg(feature = "redis")]
#[test]
fn a_person_answers_the_demos_runs_from_a_browser_on_redis() {
    if let Some(url) = crate::cli_ops::require_env("AFK_TEST_REDIS_URL") {
        // The demo's thread has a fixed name: a key prefix of its own keeps it apart.
        let prefix = crate::cli_ops::unique("serve_browser");
        walk_through(&format!("{url}?prefix={prefix}"), false);
    }
}

#[cfg(feature = "s3")]
#[test]
fn a_person_answers_the_demos_runs_from_a_browser_on_s3() {
    if let Some(url) = crate::cli_ops::s3_url() {
        walk_through(&url, false);
    }
}
