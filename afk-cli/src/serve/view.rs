//! The pages of `afk serve` (templates in `afk-cli/templates/`, compiled and checked by askama
//! at build time; every value is HTML-escaped) and how to answer with one.

use askama::Template;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::response::{IntoResponse, Response};

/// What every page shows around its content.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// The store's URL, password redacted.
    pub store: String,
    /// `--read-only`.
    pub read_only: bool,
    /// The session's CSRF token (for the logout form); `None` before login.
    pub csrf: Option<String>,
}

/// The login form.
#[derive(Debug, Template)]
#[template(path = "login.html")]
pub struct Login {
    pub c: Chrome,
    /// Why the last try failed.
    pub problem: Option<String>,
}

/// The answer to an action, an error, or a missing page.
#[derive(Debug, Template)]
#[template(path = "message.html")]
pub struct Message {
    pub c: Chrome,
    pub heading: String,
    pub text: String,
    pub ok: bool,
    /// Links to go on with: (href, label).
    pub links: Vec<(String, String)>,
}

/// A thread's row on the threads page.
#[derive(Debug)]
pub struct ThreadRow {
    pub thread: String,
    pub runs: u64,
    pub paused: u64,
    pub uncertain: u64,
    pub failed: u64,
    pub in_progress: u64,
    pub last_activity: String,
}

/// The threads page: one page of the store's listing.
#[derive(Debug, Template)]
#[template(path = "threads.html")]
pub struct Threads {
    pub c: Chrome,
    pub rows: Vec<ThreadRow>,
    pub pages: Pages,
}

/// The links between pages: each an href, when there is such a page.
#[derive(Debug, Default)]
pub struct Pages {
    /// The first page, unless this is it.
    pub first: Option<String>,
    /// The next page, unless this is the last.
    pub next: Option<String>,
}

/// A run's row on a thread's page.
#[derive(Debug)]
pub struct RunRow {
    pub run: String,
    pub state: String,
    pub step: String,
    pub phase: String,
    pub last_activity: String,
    pub note: String,
}

/// One page of a thread's runs.
#[derive(Debug, Template)]
#[template(path = "runs.html")]
pub struct Runs {
    pub c: Chrome,
    pub thread: String,
    /// The state shown, or all.
    pub filter: Option<String>,
    /// The states one can filter by.
    pub states: &'static [&'static str],
    /// Runs in the thread, all states.
    pub total: u64,
    pub rows: Vec<RunRow>,
    pub pages: Pages,
}

/// A tool call a human has to answer for.
#[derive(Debug, Default)]
pub struct Call {
    pub call: String,
    pub tool: String,
    /// Its arguments as pretty JSON.
    pub arguments: String,
    /// Why it needs approval.
    pub reason: String,
}

/// A run's page.
#[derive(Debug, Template)]
#[template(path = "run.html")]
pub struct Run {
    pub c: Chrome,
    pub csrf: String,
    pub thread: String,
    pub run: String,
    pub state: String,
    /// What the run's entry in the attention index says it needs.
    pub note: Option<String>,
    pub paused: Option<Call>,
    pub uncertain: Vec<Call>,
    /// The text of `afk show`.
    pub summary: String,
    pub effects: Vec<String>,
    /// (role, text) per message.
    pub transcript: Vec<(String, String)>,
    pub timeline: Vec<String>,
    /// The steps the run began (a fork can start at any of them).
    pub steps: Vec<u64>,
}

/// `page` rendered, with `status`.
pub fn html<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(body) => (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page did not render").into_response()
        }
    }
}

/// 303 to `to`, optionally setting a cookie.
pub fn see_other(to: &str, cookie: Option<String>) -> Response {
    let mut res = (StatusCode::SEE_OTHER, [(LOCATION, to.to_owned())]).into_response();
    if let Some(c) = cookie.and_then(|c| c.parse().ok()) {
        res.headers_mut().insert(SET_COOKIE, c);
    }
    res
}

/// `s` percent-encoded for a query value (everything but unreserved characters).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
