//! The pages: login, threads, a thread's runs, a run, and the 404 page. Each reads what the
//! matching command reads, through its report (`afk threads`, `afk runs`, `afk show`, `afk
//! timeline`).

use std::collections::BTreeSet;

use afk_core::schema::{LlmResponse, PhasePayload};
use afk_core::store::MAX_LIST_LIMIT;
use afk_core::{Error, RunId, ThreadId};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::super::common::{latest, newest_snapshot};
use super::super::entry::{entry_of, has_index, now_ms};
use super::super::output::{Progress, error_text, utc};
use super::super::runs::RunsPage;
use super::super::threads::Shown;
use super::super::{runs, show, threads, timeline};
use super::auth::{Session, clear_cookie, same_secret, set_cookie};
use super::view::{self, Call, Chrome, html, see_other};
use super::{App, Shared, status_of};

/// The frame of a page for `session` (none before login: then the page does not name the
/// store either).
pub fn chrome(app: &App, session: Option<&Session>) -> Chrome {
    Chrome {
        store: session.map_or_else(String::new, |_| app.store_name.clone()),
        read_only: app.read_only,
        csrf: session.map(|s| s.csrf.clone()),
    }
}

/// The request's session, or the answer that sends the browser to the login form.
fn session_or_login(app: &App, headers: &HeaderMap) -> Result<Session, Box<Response>> {
    app.auth
        .session(headers)
        .ok_or_else(|| Box::new(see_other("/login", None)))
}

/// The page saying that command `cmd` failed with `e`: the CLI's text, the status by kind.
pub fn error_page(app: &App, session: Option<&Session>, cmd: &str, e: &Error) -> Response {
    let heading = match e.kind() {
        afk_core::ErrorKind::NotFound => "Not found",
        _ => "Refused: nothing was changed",
    };
    let page = view::Message {
        c: chrome(app, session),
        heading: heading.to_owned(),
        // Before login, only the message: the CLI's text names the store.
        text: match session {
            Some(_) => error_text(cmd, &app.store_name, e),
            None => e.message().to_owned(),
        },
        ok: false,
        links: vec![("/".to_owned(), "All threads".to_owned())],
    };
    html(status_of(e), &page)
}

/// `GET /login`: the form; with `--no-auth`, a session right away.
pub async fn login_form(State(app): State<Shared>, headers: HeaderMap) -> Response {
    if app.auth.open() {
        let s = app.auth.open_session();
        return see_other("/", Some(set_cookie(&s)));
    }
    if app.auth.session(&headers).is_some() {
        return see_other("/", None);
    }
    let page = view::Login {
        c: chrome(&app, None),
        problem: None,
    };
    html(StatusCode::OK, &page)
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: Option<String>,
}

/// `POST /login`: a session for the right token (cookie set, off to the threads); 401 and the
/// form again, a moment later, for a wrong one.
pub async fn login(State(app): State<Shared>, form: axum::Form<LoginForm>) -> Response {
    if app.auth.open() {
        let s = app.auth.open_session();
        return see_other("/", Some(set_cookie(&s)));
    }
    let given = form.token.as_deref().unwrap_or("");
    if !app.auth.token_matches(given) {
        tracing::warn!("login refused: wrong token");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let page = view::Login {
            c: chrome(&app, None),
            problem: Some("Wrong token.".to_owned()),
        };
        return html(StatusCode::UNAUTHORIZED, &page);
    }
    tracing::info!("login accepted");
    let s = app.auth.open_session();
    see_other("/", Some(set_cookie(&s)))
}

/// A form with only the CSRF token.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    csrf: Option<String>,
}

/// `POST /logout`: ends the session (with its CSRF token) and removes the cookie.
pub async fn logout(
    State(app): State<Shared>,
    headers: HeaderMap,
    form: axum::Form<CsrfForm>,
) -> Response {
    if let Some(s) = app.auth.session(&headers)
        && same_secret(form.csrf.as_deref().unwrap_or(""), &s.csrf)
    {
        app.auth.close_session(&s.id);
        return see_other("/login", Some(clear_cookie()));
    }
    see_other("/", None)
}

/// Any other path: the 404 page.
pub async fn not_found(State(app): State<Shared>, headers: HeaderMap) -> Response {
    let session = app.auth.session(&headers);
    let e = Error::not_found("no such page");
    error_page(&app, session.as_ref(), "serve", &e)
}

fn count(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or(0)
}

fn time_of(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".to_owned(), utc)
}

/// The query of the threads page and of `GET /api/threads`: a page of the store's listing.
#[derive(Debug, Deserialize)]
pub struct ThreadsQuery {
    /// Where the page starts (the store's cursor); the first page when absent.
    pub cursor: Option<String>,
    /// Threads per page (1 to 1000).
    pub limit: Option<String>,
}

/// Rows per page unless `?limit=` says otherwise.
pub const PAGE_SIZE: usize = 50;

/// `?limit=`: [`PAGE_SIZE`] when absent; `InvalidInput` unless a number from 1 to 1000.
pub fn page_size(limit: Option<&str>) -> afk_core::Result<usize> {
    match limit.filter(|l| !l.is_empty()) {
        None => Ok(PAGE_SIZE),
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "limit must be a number from 1 to {MAX_LIST_LIMIT}, not {l:?}"
                ))
            }),
    }
}

/// `&limit=N` when the request chose its page size, to carry into the page links.
fn limit_param(limit: Option<&str>) -> String {
    limit
        .filter(|l| !l.is_empty())
        .map_or_else(String::new, |l| format!("&limit={}", view::encode(l)))
}

/// `GET /?cursor=C&limit=N`: one page of the store's threads, with the counts of `afk
/// threads` (newest activity first within the page) and links to the first and next page.
pub async fn threads(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<ThreadsQuery>,
) -> Response {
    let session = match session_or_login(&app, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let res = match page_size(q.limit.as_deref()) {
        Ok(size) => {
            let shown = Shown::Page {
                cursor: cursor.clone(),
                size,
            };
            let quiet = Progress::none();
            threads::report(app.store.as_ref(), &app.store_name, shown, None, quiet).await
        }
        Err(e) => Err(e),
    };
    let report = match res {
        Ok(r) => r,
        Err(e) => return error_page(&app, Some(&session), "threads", &e),
    };
    let rows = report.json["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| view::ThreadRow {
            thread: t["thread"].as_str().unwrap_or("").to_owned(),
            runs: count(t, "runs"),
            paused: count(t, "paused"),
            uncertain: count(t, "uncertain"),
            failed: count(t, "failed"),
            in_progress: count(t, "in_progress"),
            last_activity: time_of(&t["last_activity_ms"]),
        })
        .collect();
    let limit = limit_param(q.limit.as_deref());
    let pages = view::Pages {
        first: cursor.map(|_| format!("/?{}", limit.trim_start_matches('&')).replace("/?", "/")),
        next: report.json["next_cursor"]
            .as_str()
            .map(|c| format!("/?cursor={}{limit}", view::encode(c))),
    };
    let page = view::Threads {
        c: chrome(&app, Some(&session)),
        rows,
        pages,
    };
    html(StatusCode::OK, &page)
}

/// The query of a thread's page and of `GET /api/threads/{thread}/runs`.
#[derive(Debug, Deserialize)]
pub struct RunsQuery {
    /// Only the runs in this state.
    pub state: Option<String>,
    /// Only the runs after this run id (the cursor).
    pub after: Option<String>,
    /// Runs per page (1 to 1000).
    pub limit: Option<String>,
}

impl RunsQuery {
    /// The page it asks for (`InvalidInput` for a bad limit).
    pub fn page(&self) -> afk_core::Result<RunsPage> {
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        Ok(RunsPage {
            after: nonempty(&self.after),
            size: page_size(self.limit.as_deref())?,
            state: nonempty(&self.state),
        })
    }
}

/// What a run's row says it needs.
fn run_note(r: &Value) -> String {
    let calls: Vec<&str> = r["uncertain_effects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(super::super::status::call_of)
        .collect();
    let mut notes = Vec::new();
    if !calls.is_empty() {
        notes.push(format!("no result for call(s) {}", calls.join(", ")));
    }
    if let Some(w) = r["attention"]["waiting_for_human"].as_str() {
        notes.push(format!("waiting for a human: a {w}"));
    }
    notes.join("; ")
}

/// The states a thread's page filters by.
const STATES: &[&str] = &[
    "paused",
    "uncertain",
    "failed",
    "in_progress",
    "suspended",
    "completed",
];

/// `GET /threads/{thread}?state=S&after=R&limit=N`: one page of the runs of `afk runs`, by run
/// id, only those in state `S` when given; 404 for a thread without runs.
pub async fn runs(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<RunsQuery>,
) -> Response {
    let session = match session_or_login(&app, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let res = match (ThreadId::new(&thread), q.page()) {
        (Ok(t), Ok(page)) => runs::report_page(app.store.as_ref(), &t, now_ms(), Some(&page))
            .await
            .map(|r| (r, page)),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let (report, page) = match res {
        Ok(r) => r,
        Err(e) => return error_page(&app, Some(&session), "runs", &e),
    };
    let total = count(&report.json, "total_runs");
    if total == 0 {
        let e = Error::not_found(format!("thread {thread} has no runs"));
        return error_page(&app, Some(&session), "runs", &e);
    }
    let rows = report.json["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| view::RunRow {
            run: r["run"].as_str().unwrap_or("").to_owned(),
            state: r["state"].as_str().unwrap_or("").to_owned(),
            step: r["step"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            phase: r["phase"].as_str().unwrap_or("-").to_owned(),
            last_activity: time_of(&r["timestamp_ms"]),
            note: run_note(r),
        })
        .collect();
    let base = format!("/threads/{}?", view::encode(&thread));
    let keep = format!(
        "{}{}",
        page.state
            .as_deref()
            .map_or_else(String::new, |s| format!("&state={}", view::encode(s))),
        limit_param(q.limit.as_deref())
    );
    let pages = view::Pages {
        first: page
            .after
            .as_ref()
            .map(|_| format!("{base}{}", keep.trim_start_matches('&'))),
        next: report.json["next_after"]
            .as_str()
            .map(|r| format!("{base}after={}{keep}", view::encode(r))),
    };
    let page = view::Runs {
        c: chrome(&app, Some(&session)),
        thread,
        filter: page.state,
        states: STATES,
        total,
        rows,
        pages,
    };
    html(StatusCode::OK, &page)
}

/// `GET /threads/{thread}/runs/{run}`: what the run waits for, with the forms that answer it;
/// the text of `afk show`; its effect rows, transcript and timeline (`afk timeline`); the fork
/// form. 404 for an unknown run.
pub async fn run(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
) -> Response {
    let session = match session_or_login(&app, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match run_page(&app, &session, &thread, &run).await {
        Ok(page) => html(StatusCode::OK, &page),
        Err(e) => error_page(&app, Some(&session), "show", &e),
    }
}

async fn run_page(
    app: &App,
    session: &Session,
    thread: &str,
    run: &str,
) -> afk_core::Result<view::Run> {
    let (t, r) = (ThreadId::new(thread)?, RunId::new(run)?);
    let store = app.store.as_ref();
    let now = now_ms();
    let shown = show::report(store, &t, &r, now).await?;
    let lines = timeline::report(store, &t, &r).await?;
    let rec = latest(store, &t, &r).await?;
    let snap = newest_snapshot(store, &t, &r, rec.as_ref()).await?;
    let pending = snap
        .as_ref()
        .and_then(|s| s.snapshot())
        .and_then(|s| s.pending_llm_response.clone());
    let state = shown.json["state"].as_str().unwrap_or("").to_owned();
    let paused = match rec.as_ref().map(|r| &r.payload) {
        Some(PhasePayload::Paused(p)) if state == "paused" => p.request.as_ref().map(|req| {
            let id = req.tool_call_id.clone().unwrap_or_default();
            Call {
                reason: req.reason.clone().unwrap_or_default(),
                ..call_of(pending.as_deref(), &id)
            }
        }),
        _ => None,
    };
    let uncertain = shown.json["uncertain_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|id| call_of(pending.as_deref(), id))
        .collect();
    let note = if has_index(store) {
        entry_of(store, &t, &r, now)
            .await?
            .map(|e| e.note())
            .filter(|n| !n.is_empty())
    } else {
        None
    };
    let parts = Parts::of(&lines.json["entries"]);
    Ok(view::Run {
        c: chrome(app, Some(session)),
        csrf: session.csrf.clone(),
        thread: thread.to_owned(),
        run: run.to_owned(),
        state,
        note,
        paused,
        uncertain,
        summary: shown.human,
        effects: parts.effects,
        transcript: parts.transcript,
        timeline: parts.timeline,
        steps: parts.steps.into_iter().collect(),
    })
}

/// The tool call `id` of the pending model response: its tool and arguments.
fn call_of(pending: Option<&LlmResponse>, id: &str) -> Call {
    let found = pending
        .into_iter()
        .flat_map(|p| p.tool_calls.iter())
        .find(|c| c.id.as_deref() == Some(id));
    Call {
        call: id.to_owned(),
        tool: found.map(|c| c.tool_name.clone()).unwrap_or_default(),
        arguments: found
            .and_then(|c| serde_json::to_string_pretty(&c.arguments).ok())
            .unwrap_or_default(),
        reason: String::new(),
    }
}

/// A timeline's entries sorted for the run page.
#[derive(Debug, Default)]
struct Parts {
    effects: Vec<String>,
    transcript: Vec<(String, String)>,
    timeline: Vec<String>,
    steps: BTreeSet<u64>,
}

impl Parts {
    fn of(entries: &Value) -> Parts {
        let mut p = Parts::default();
        for e in entries.as_array().into_iter().flatten() {
            let text = e["text"].as_str().unwrap_or("").to_owned();
            match e["kind"].as_str() {
                Some("effect") => p.effects.push(text),
                Some("messages") => {
                    for m in e["value"]["messages"].as_array().into_iter().flatten() {
                        p.transcript.push(message_row(m));
                    }
                }
                Some("checkpoint") => {
                    if let Some(step) = e["step"].as_u64().filter(|s| *s >= 1) {
                        p.steps.insert(step);
                    }
                    p.timeline.push(text);
                }
                _ => p.timeline.push(text),
            }
        }
        p
    }
}

/// A stored message as (role, text): its text (or its parts as JSON) and the tool calls it
/// made.
fn message_row(m: &Value) -> (String, String) {
    let role = m["role"].as_str().unwrap_or("?").to_owned();
    let mut text = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    for c in m["tool_calls"].as_array().into_iter().flatten() {
        let name = c["tool_name"]
            .as_str()
            .or(c["name"].as_str())
            .unwrap_or("?");
        let id = c["id"].as_str().unwrap_or("-");
        text.push_str(&format!(" [calls {name} ({id}) with {}]", c["arguments"]));
    }
    if let Some(id) = m["tool_call_id"].as_str() {
        text = format!("[result of {id}] {text}");
    }
    (role, text)
}
