//! The JSON API: the documents the commands print with `--json`, from the same reports, and
//! their errors as the CLI's `{"error": {…}}` document. Reading takes the bearer token or a
//! session cookie; acting takes the bearer token only (a cookie would need a CSRF token), and
//! never on a `--read-only` server.

use afk_core::runner::Decision;
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::super::entry::now_ms;
use super::super::fork::fork_report;
use super::super::output::{Progress, Report, error_doc};
use super::super::settle::{decide_report, settle_report};
use super::super::threads::Shown;
use super::super::{runs, show, threads, timeline};
use super::actions::settlement_of;
use super::pages::{RunsQuery, ThreadsQuery, page_size};
use super::{App, Shared, status_of};

/// The error document of command `cmd`, with `status`.
fn error(app: &App, cmd: &str, status: StatusCode, e: &Error) -> Response {
    (status, Json(error_doc(cmd, &app.store_name, e))).into_response()
}

/// A report as its JSON document, or the error document.
fn answer(app: &App, cmd: &str, res: Result<Report>) -> Response {
    match res {
        Ok(r) => Json(r.json).into_response(),
        Err(e) => error(app, cmd, status_of(&e), &e),
    }
}

/// 401 unless the request may read.
fn may_read(app: &App, headers: &HeaderMap, cmd: &str) -> Option<Response> {
    if app.auth.bearer_ok(headers) || app.auth.session(headers).is_some() {
        return None;
    }
    let e = Error::new(
        ErrorKind::InvalidConfig,
        "not authenticated: send Authorization: Bearer <AFK_SERVE_TOKEN>",
    );
    Some(error(app, cmd, StatusCode::UNAUTHORIZED, &e))
}

/// 401 or 403 unless the request may act.
fn may_act(app: &App, headers: &HeaderMap, cmd: &str) -> Option<Response> {
    if !app.auth.bearer_ok(headers) {
        let e = Error::new(
            ErrorKind::InvalidConfig,
            "not authenticated: actions take Authorization: Bearer <AFK_SERVE_TOKEN>",
        );
        return Some(error(app, cmd, StatusCode::UNAUTHORIZED, &e));
    }
    if app.read_only {
        let e = Error::unsupported("this server is read-only (afk serve --read-only)");
        return Some(error(app, cmd, StatusCode::FORBIDDEN, &e));
    }
    None
}

/// `GET /api/threads`: `afk threads --json`; with `?limit=N` and/or `?cursor=C`, one page of
/// the store's listing, `afk threads --page-size N --cursor C --json` (`N` defaults to 50).
pub async fn threads(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<ThreadsQuery>,
) -> Response {
    if let Some(r) = may_read(&app, &headers, "threads") {
        return r;
    }
    let shown = if q.limit.is_none() && q.cursor.is_none() {
        Ok(Shown::Newest(None))
    } else {
        page_size(q.limit.as_deref()).map(|size| Shown::Page {
            cursor: q.cursor.filter(|c| !c.is_empty()),
            size,
        })
    };
    let quiet = Progress::none();
    let res = match shown {
        Ok(s) => threads::report(app.store.as_ref(), &app.store_name, s, None, quiet).await,
        Err(e) => Err(e),
    };
    answer(&app, "threads", res)
}

/// `GET /api/threads/{thread}/runs`: `afk runs --json`; with any of `?limit=N`, `?after=R`,
/// `?state=S`, one page, `afk runs --page-size N --after R --state S --json` (`N` defaults to
/// 50).
pub async fn runs(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(thread): Path<String>,
    Query(q): Query<RunsQuery>,
) -> Response {
    if let Some(r) = may_read(&app, &headers, "runs") {
        return r;
    }
    let paged = q.limit.is_some() || q.after.is_some() || q.state.is_some();
    let res = match (ThreadId::new(thread), q.page()) {
        (Ok(t), Ok(page)) => {
            let page = paged.then_some(page);
            runs::report_page(app.store.as_ref(), &t, now_ms(), page.as_ref()).await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    answer(&app, "runs", res)
}

fn ids(thread: String, run: String) -> Result<(ThreadId, RunId)> {
    Ok((ThreadId::new(thread)?, RunId::new(run)?))
}

/// `GET /api/threads/{thread}/runs/{run}`: `afk show --json`.
pub async fn show(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
) -> Response {
    if let Some(r) = may_read(&app, &headers, "show") {
        return r;
    }
    let res = match ids(thread, run) {
        Ok((t, r)) => show::report(app.store.as_ref(), &t, &r, now_ms()).await,
        Err(e) => Err(e),
    };
    answer(&app, "show", res)
}

/// `GET /api/threads/{thread}/runs/{run}/timeline`: `afk timeline --json`.
pub async fn timeline(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
) -> Response {
    if let Some(r) = may_read(&app, &headers, "timeline") {
        return r;
    }
    let res = match ids(thread, run) {
        Ok((t, r)) => timeline::report(app.store.as_ref(), &t, &r).await,
        Err(e) => Err(e),
    };
    answer(&app, "timeline", res)
}

/// The body of `POST …/decide`: `{"approve": true}` or `{"deny": "why"}` (the flags of `afk
/// decide`).
#[derive(Debug, Deserialize)]
pub struct DecideBody {
    #[serde(default)]
    approve: bool,
    deny: Option<String>,
}

/// `POST /api/threads/{thread}/runs/{run}/decide`: `afk decide --json`.
pub async fn decide(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    Json(body): Json<DecideBody>,
) -> Response {
    if let Some(r) = may_act(&app, &headers, "decide") {
        return r;
    }
    let res = match (body.approve, body.deny) {
        (true, None) => decide_report(app.store.clone(), &thread, &run, Decision::Approve).await,
        (false, Some(why)) => {
            decide_report(app.store.clone(), &thread, &run, Decision::Deny(why)).await
        }
        _ => Err(Error::invalid_input(
            "say \"approve\": true or \"deny\": \"why\"",
        )),
    };
    answer(&app, "decide", res)
}

/// The body of `POST …/settle`: `{"call", "ran": <output>}`, `{"call", "did_not_run":
/// true}` or `{"call", "failed": "error"}` (the flags of `afk settle`).
#[derive(Debug, Deserialize)]
pub struct SettleBody {
    call: String,
    ran: Option<Value>,
    #[serde(default)]
    did_not_run: bool,
    failed: Option<String>,
}

/// `POST /api/threads/{thread}/runs/{run}/settle`: `afk settle --json`.
pub async fn settle(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    Json(body): Json<SettleBody>,
) -> Response {
    if let Some(r) = may_act(&app, &headers, "settle") {
        return r;
    }
    let given = [body.ran.is_some(), body.did_not_run, body.failed.is_some()];
    let res = if given.iter().filter(|g| **g).count() != 1 {
        Err(Error::invalid_input("say ran, did_not_run or failed"))
    } else {
        let output = body.ran.as_ref().map(Value::to_string);
        let what = match (&body.ran, body.did_not_run) {
            (Some(_), _) => "ran",
            (_, true) => "did_not_run",
            _ => "failed",
        };
        match settlement_of(Some(what), output.as_deref(), body.failed) {
            Ok(s) => settle_report(app.store.clone(), &thread, &run, &body.call, s).await,
            Err(e) => Err(e),
        }
    };
    answer(&app, "settle", res)
}

/// The body of `POST …/fork`: `{"step", "new_run"?, "message"?}` (the flags of `afk fork`).
#[derive(Debug, Deserialize)]
pub struct ForkBody {
    step: u64,
    new_run: Option<String>,
    message: Option<String>,
}

/// `POST /api/threads/{thread}/runs/{run}/fork`: `afk fork --json`.
pub async fn fork(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    Json(body): Json<ForkBody>,
) -> Response {
    if let Some(r) = may_act(&app, &headers, "fork") {
        return r;
    }
    let store = app.store.clone();
    let new_run = body.new_run.as_deref();
    let res = fork_report(store, &thread, &run, body.step, new_run, body.message).await;
    answer(&app, "fork", res)
}
