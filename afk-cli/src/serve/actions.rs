//! The actions of the run page: decide, settle, fork. Each is let through only with an open
//! session whose CSRF token the form carries, and never on a `--read-only` server; then it
//! calls the function the CLI command calls ([`decide_report`], [`settle_report`],
//! [`fork_report`]) and shows that command's message, or its error as the CLI prints it.
//! Nothing here writes to the store by itself, and nothing serializes the actions: when two
//! people answer the same run at once, the store's claim and its compare-and-set decide who
//! wins, as between two `afk decide` processes.

use afk_core::runner::{Decision, Settlement};
use afk_core::schema::Phase;
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::super::common::latest;
use super::super::fork::fork_report;
use super::super::output::{Report, error_text};
use super::super::settle::{decide_report, settle_report};
use super::auth::{Session, same_secret};
use super::pages::chrome;
use super::view::{self, html};
use super::{App, Shared, status_of};

/// The message of a refused request: (status, heading, text).
fn refusal(app: &App, session: Option<&Session>, status: StatusCode, text: &str) -> Response {
    let page = view::Message {
        c: chrome(app, session),
        heading: "Refused: nothing was changed".to_owned(),
        text: text.to_owned(),
        ok: false,
        links: vec![("/".to_owned(), "All threads".to_owned())],
    };
    html(status, &page)
}

/// The session of an action request, if it may act: not read-only, logged in, and the form's
/// CSRF token is the session's. Otherwise the 403 answer.
fn gate(
    app: &App,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> std::result::Result<Session, Box<Response>> {
    let session = app.auth.session(headers);
    if app.read_only {
        let text = "this server is read-only (afk serve --read-only): it takes no actions";
        return Err(Box::new(refusal(
            app,
            session.as_ref(),
            StatusCode::FORBIDDEN,
            text,
        )));
    }
    let Some(session) = session else {
        let text = "not logged in (or the session ended): log in, then send the form again";
        return Err(Box::new(refusal(app, None, StatusCode::FORBIDDEN, text)));
    };
    if !csrf.is_some_and(|c| same_secret(c, &session.csrf)) {
        tracing::warn!("action refused: missing or wrong CSRF token");
        let text = "the form's CSRF token is missing or wrong (a form from another page or an \
                    older session): reload the run's page and send it again";
        return Err(Box::new(refusal(
            app,
            Some(&session),
            StatusCode::FORBIDDEN,
            text,
        )));
    }
    Ok(session)
}

/// The page of an action's outcome, for command `cmd` on `run`: its report's message, or its
/// error as the CLI prints it. `already` is the heading when the report says nothing was
/// written (the same answer was there already), `fenced` when the store fenced this request
/// (another claimed the run meanwhile), `more` links shown first.
fn outcome(
    app: &App,
    session: &Session,
    cmd: &str,
    (thread, run): (&str, &str),
    res: Result<Report>,
    (already, fenced, more): (&str, &str, Vec<(String, String)>),
) -> Response {
    let back = (
        format!("/threads/{thread}/runs/{run}"),
        format!("Back to run {run}"),
    );
    let (status, heading, text, ok) = match res {
        Ok(report) => {
            let heading = if report.json["written"] == false {
                already.to_owned()
            } else {
                "Recorded".to_owned()
            };
            (StatusCode::OK, heading, report.human, true)
        }
        Err(e) => {
            let heading = match e.kind() {
                ErrorKind::Fenced => fenced,
                ErrorKind::Conflict if e.message().contains("already decided") => {
                    "Not recorded: the run was already decided"
                }
                ErrorKind::NotFound => "Not found",
                _ => "Refused: nothing was changed",
            };
            let text = error_text(cmd, &app.store_name, &e);
            (status_of(&e), heading.to_owned(), text, false)
        }
    };
    let page = view::Message {
        c: chrome(app, Some(session)),
        heading,
        text,
        ok,
        links: more.into_iter().chain([back]).collect(),
    };
    html(status, &page)
}

/// The decide form.
#[derive(Debug, Deserialize)]
pub struct DecideForm {
    csrf: Option<String>,
    /// `approve` or `deny`.
    decision: Option<String>,
    /// Why it is denied.
    reason: Option<String>,
}

/// What a form's `decision` and `reason` ask for.
fn decision_of(decision: Option<&str>, reason: Option<String>) -> Result<Decision> {
    match decision {
        Some("approve") => Ok(Decision::Approve),
        Some("deny") => match reason.filter(|r| !r.trim().is_empty()) {
            Some(r) => Ok(Decision::Deny(r)),
            None => Err(Error::invalid_input("say why the call is denied")),
        },
        _ => Err(Error::invalid_input("say approve or deny")),
    }
}

/// `POST /threads/{thread}/runs/{run}/decide`: `afk decide`.
pub async fn decide(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    form: axum::Form<DecideForm>,
) -> Response {
    let form = form.0;
    let session = match gate(&app, &headers, form.csrf.as_deref()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let res = match decision_of(form.decision.as_deref(), form.reason) {
        Ok(d) => decide_report(app.store.clone(), &thread, &run, d).await,
        Err(e) => Err(e),
    };
    let already = "Already decided: the run already has this decision; nothing written";
    let fenced = match &res {
        Err(e) if e.kind() == ErrorKind::Fenced => fenced_decision(&app, &thread, &run).await,
        _ => FENCED,
    };
    outcome(
        &app,
        &session,
        "decide",
        (&thread, &run),
        res,
        (already, fenced, vec![]),
    )
}

/// The heading of an action the store fenced: another request or process claimed the run
/// between this one's claim and its write.
const FENCED: &str = "Not confirmed: another request or process claimed the run at the same \
                      moment; look at the run again";

/// The heading of a decision the store fenced, from what the run holds now: decided (by the
/// request that won, or by this one before the other claimed the run), or not yet.
async fn fenced_decision(app: &App, thread: &str, run: &str) -> &'static str {
    let (Ok(t), Ok(r)) = (ThreadId::new(thread), RunId::new(run)) else {
        return FENCED;
    };
    match latest(app.store.as_ref(), &t, &r).await {
        Ok(Some(rec)) if rec.phase == Phase::Resumed => {
            "Already decided: the run holds a decision now, stored at the same moment by \
             another request (or by this one before the store fenced it)"
        }
        _ => {
            "Not recorded: someone else is deciding this run at this moment, or already \
             decided it; look at the run again"
        }
    }
}

/// The settle form.
#[derive(Debug, Deserialize)]
pub struct SettleForm {
    csrf: Option<String>,
    call: Option<String>,
    /// `ran`, `did_not_run` or `failed`.
    outcome: Option<String>,
    /// The output (JSON) when it ran.
    output: Option<String>,
    /// The error when it failed.
    error: Option<String>,
}

/// What a settle form says happened.
pub fn settlement_of(
    outcome: Option<&str>,
    output: Option<&str>,
    error: Option<String>,
) -> Result<Settlement> {
    match outcome {
        Some("ran") => {
            let text = output.unwrap_or("").trim();
            if text.is_empty() {
                return Err(Error::invalid_input("give the call's output as JSON"));
            }
            let output = serde_json::from_str(text)
                .map_err(|e| Error::invalid_input(format!("the output is not JSON: {e}")))?;
            Ok(Settlement::Ran { output })
        }
        Some("did_not_run") => Ok(Settlement::DidNotRun),
        Some("failed") => match error.filter(|e| !e.trim().is_empty()) {
            Some(error) => Ok(Settlement::Failed { error }),
            None => Err(Error::invalid_input("say how the call failed")),
        },
        _ => Err(Error::invalid_input(
            "say what happened: it ran, it did not run, or it failed",
        )),
    }
}

/// `POST /threads/{thread}/runs/{run}/settle`: `afk settle`.
pub async fn settle(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    form: axum::Form<SettleForm>,
) -> Response {
    let form = form.0;
    let session = match gate(&app, &headers, form.csrf.as_deref()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let call = form.call.unwrap_or_default();
    let res = match settlement_of(form.outcome.as_deref(), form.output.as_deref(), form.error) {
        Ok(s) => settle_report(app.store.clone(), &thread, &run, &call, s).await,
        Err(e) => Err(e),
    };
    let already = "Already settled: the call already has this answer; nothing written";
    outcome(
        &app,
        &session,
        "settle",
        (&thread, &run),
        res,
        (already, FENCED, vec![]),
    )
}

/// The fork form.
#[derive(Debug, Deserialize)]
pub struct ForkForm {
    csrf: Option<String>,
    step: Option<String>,
    new_run: Option<String>,
    message: Option<String>,
}

/// `POST /threads/{thread}/runs/{run}/fork`: `afk fork`; links to the new run.
pub async fn fork(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path((thread, run)): Path<(String, String)>,
    form: axum::Form<ForkForm>,
) -> Response {
    let form = form.0;
    let session = match gate(&app, &headers, form.csrf.as_deref()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let step = form.step.as_deref().unwrap_or("").trim().parse::<u64>();
    let new_run = form.new_run.filter(|s| !s.trim().is_empty());
    let message = form.message.filter(|s| !s.trim().is_empty());
    let res = match step {
        Ok(step) => {
            let store = app.store.clone();
            fork_report(store, &thread, &run, step, new_run.as_deref(), message).await
        }
        Err(_) => Err(Error::invalid_input("the step must be a number")),
    };
    let new_link = res
        .as_ref()
        .ok()
        .and_then(|r| r.json["new_run"].as_str())
        .map(|n| {
            (
                format!("/threads/{thread}/runs/{n}"),
                format!("The new run {n}"),
            )
        });
    let links = new_link.into_iter().collect();
    outcome(
        &app,
        &session,
        "fork",
        (&thread, &run),
        res,
        ("Forked", FENCED, links),
    )
}
