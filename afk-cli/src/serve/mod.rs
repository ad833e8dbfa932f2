//! `afk serve`: the operator console in a browser. Pages for the threads, a thread's runs and a
//! run (what it waits for, its summary, effect rows, timeline and transcript); the actions of
//! `afk decide`, `afk settle` and `afk fork`, through the very functions those commands call
//! (same writes, same refusals, same messages); and a JSON API returning the documents of
//! `--json`.
//!
//! Routes:
//!
//! * pages: `/?cursor=C` (one page of the store's threads: the store's listing cursor),
//!   `/threads/{thread}?state=S&after=R` (one page of its runs by id, after run `R`, optionally
//!   only those in state `S`), `/threads/{thread}/runs/{run}`; `/login` (form), `POST
//!   /logout`. Pages hold 50 rows unless `&limit=N` (1 to 1000) says otherwise, and link to
//!   the first and the next page;
//! * actions (forms, each with the session's CSRF token): `POST
//!   /threads/{thread}/runs/{run}/decide`, `…/settle`, `…/fork`;
//! * JSON (`Authorization: Bearer <token>` or the session cookie): `GET /api/threads` (the
//!   document of `afk threads --json`; `?limit=N&cursor=C` one page, as `afk threads
//!   --page-size N --cursor C`), `/api/threads/{thread}/runs` (`afk runs`; `?limit=N&after=R&
//!   state=S` one page, as `afk runs --page-size N --after R --state S`),
//!   `/api/threads/{thread}/runs/{run}` (`afk show`), `…/timeline` (`afk timeline`); `POST
//!   …/decide`, `…/settle`, `…/fork` with a JSON body (bearer token only) answer as `afk decide
//!   --json` and the others do. Errors are the CLI's `{"error": {…}}` document.
//!
//! Security: see `auth.rs` (token, sessions, CSRF); `--read-only` refuses every action with 403;
//! every response says `Cache-Control: no-store` and carries a content security policy that
//! allows no script at all. Logs name the method, path and status of each request, never a
//! header, cookie or form field.

mod actions;
mod api;
mod auth;
mod pages;
mod view;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use afk_core::store::Store;
use afk_core::{Error, ErrorKind, Result};
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use super::output::{Ctx, Report};
pub use auth::Auth;

/// `afk serve`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The address to listen on. A loopback address unless you mean to serve others; put a
    /// TLS-terminating proxy in front for anything beyond this machine.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Refuse every action (decide, settle, fork): pages and the JSON API only.
    #[arg(long)]
    read_only: bool,
    /// Serve without a token. Only on a loopback address: anyone who can open a connection to
    /// it can then act on the store.
    #[arg(long)]
    no_auth: bool,
}

/// What every request handler shares.
#[derive(Debug)]
pub struct App {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Its URL, password redacted.
    pub store_name: String,
    /// `--read-only`.
    pub read_only: bool,
    /// The token and the sessions.
    pub auth: Auth,
}

/// Shared state of the handlers.
pub type Shared = Arc<App>;

/// Serve until Ctrl-C or SIGTERM. Prints `listening on http://<address>` on stdout once the
/// socket is bound (`--bind 127.0.0.1:0` picks a free port). Exit 1 when the configuration is
/// refused, the store cannot be opened or the address cannot be bound.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let auth = match Auth::new(std::env::var(auth::TOKEN_VAR).ok(), args.no_auth, args.bind) {
        Ok(a) => a,
        Err(e) => return ctx.fail("serve", &e),
    };
    let store_name = ctx.store_name();
    let read_only = args.read_only;
    ctx.run("serve", |store| async move {
        let app = Arc::new(App {
            store,
            store_name,
            read_only,
            auth,
        });
        serve(app, args.bind).await
    })
}

async fn serve(app: Shared, bind: SocketAddr) -> Result<Report> {
    let listener = tokio::net::TcpListener::bind(bind).await.map_err(|e| {
        Error::new(ErrorKind::InvalidConfig, format!("cannot listen on {bind}")).with_source(e)
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::unexpected("no local address").with_source(e))?;
    let mode = match (app.read_only, app.auth.open()) {
        (true, _) => "read-only",
        (false, true) => "actions allowed, no authentication (--no-auth)",
        (false, false) => "actions allowed",
    };
    tracing::info!(%addr, store = %app.store_name, mode, "afk serve listening");
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{addr} ({mode})");
        let _ = out.flush();
    }
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| Error::unexpected("the server stopped").with_source(e))?;
    Ok(Report::ok(
        serde_json::json!({"stopped": true}),
        String::new(),
    ))
}

/// Every route (see the module docs).
pub fn router(app: Shared) -> Router {
    let run = "/threads/{thread}/runs/{run}";
    let api_run = "/api/threads/{thread}/runs/{run}";
    Router::new()
        .route("/", get(pages::threads))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/threads/{thread}", get(pages::runs))
        .route(run, get(pages::run))
        .route(&format!("{run}/decide"), post(actions::decide))
        .route(&format!("{run}/settle"), post(actions::settle))
        .route(&format!("{run}/fork"), post(actions::fork))
        .route("/api/threads", get(api::threads))
        .route("/api/threads/{thread}/runs", get(api::runs))
        .route(api_run, get(api::show))
        .route(&format!("{api_run}/timeline"), get(api::timeline))
        .route(&format!("{api_run}/decide"), post(api::decide))
        .route(&format!("{api_run}/settle"), post(api::settle))
        .route(&format!("{api_run}/fork"), post(api::fork))
        .fallback(pages::not_found)
        .layer(middleware::from_fn(harden))
        .with_state(app)
}

/// Log each request (method, path, status; nothing else) and add the headers every response
/// carries: no caching, no scripts, no framing, no sniffing, no referrer.
async fn harden(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut res = next.run(req).await;
    tracing::info!(%method, %path, status = res.status().as_u16(), "request");
    let h = res.headers_mut();
    let set = [
        (header::CACHE_CONTROL, "no-store"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in set {
        h.insert(name, HeaderValue::from_static(value));
    }
    res
}

/// The HTTP status an error of the store or the runner answers with.
pub fn status_of(e: &Error) -> StatusCode {
    match e.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict | ErrorKind::Fenced => StatusCode::CONFLICT,
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::Unavailable | ErrorKind::Timeout => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("afk serve stopping");
}
