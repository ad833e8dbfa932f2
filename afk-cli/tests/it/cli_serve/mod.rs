//! `afk serve` over HTTP against real stores: the security cases (`security.rs`) and the
//! browser walk-through in headless Chromium (`browser.rs`). The server is the real `afk`
//! binary on an ephemeral loopback port; requests go through a small HTTP/1.1 client over
//! `std::net` (`http.rs`), which is all these tests need and adds no dependency.

#![allow(clippy::unwrap_used)]

mod actions;
mod browser;
pub mod http;
mod paging;
mod security;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub use http::{Resp, form, request};

/// A token long enough for the server.
pub const TOKEN: &str = "serve-test-token-5f1c0a9e7d";

/// A RocksDB store in a temporary directory holding, in thread `t`, a run paused for approval
/// (`p`) and one stopped in its tool batch with an uncertain charge (`u`); `before`: what it
/// holds before anything acts on them.
pub struct TwoRuns {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub before: std::collections::BTreeMap<String, Vec<u8>>,
}

impl TwoRuns {
    pub fn new() -> TwoRuns {
        let dir = tempfile::tempdir().unwrap();
        let url = rocks(dir.path());
        crate::cli_ops::paused_run(&url, "t", "p");
        crate::cli_ops::uncertain_run(&url, "t", "u");
        let before = crate::cli_ops::contents(&url, "t");
        TwoRuns { dir, url, before }
    }
}

/// A running `afk serve`; killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    /// Its stderr (the logs).
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `afk --store url serve --bind 127.0.0.1:0 <extra>` with `AFK_SERVE_TOKEN` = `token` (unset
    /// when `None`); waits for its `listening on` line. `Err` with its stderr when it exits
    /// first.
    pub fn try_start(url: &str, token: Option<&str>, extra: &[&str]) -> Result<Server, String> {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stderr");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_afk"));
        cmd.args(["--store", url, "-vvv", "serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .current_dir(dir.path())
            .env_remove("AFK_STORE")
            .env_remove("RUST_LOG")
            .env_remove("AFK_SERVE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(File::create(&log).unwrap()));
        if let Some(t) = token {
            cmd.env("AFK_SERVE_TOKEN", t);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(port) = line
            .strip_prefix("listening on http://127.0.0.1:")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
        else {
            let _ = child.wait();
            return Err(std::fs::read_to_string(&log).unwrap_or_default());
        };
        Ok(Server {
            child,
            port,
            log,
            _dir: dir,
        })
    }

    /// [`Server::try_start`] with [`TOKEN`], panicking when it does not start.
    pub fn start(url: &str, extra: &[&str]) -> Server {
        Server::try_start(url, Some(TOKEN), extra).unwrap_or_else(|e| panic!("no server: {e}"))
    }

    /// `GET path` with `headers`.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        request(self.port, "GET", path, headers, b"")
    }

    /// `POST path` with a form body.
    pub fn post_form(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut h = headers.to_vec();
        h.push(("Content-Type", "application/x-www-form-urlencoded"));
        request(self.port, "POST", path, &h, body.as_bytes())
    }

    /// Log in with `token`: the `Cookie` header of the session.
    pub fn login(&self) -> String {
        let r = self.post_form("/login", &[], &form(&[("token", TOKEN)]));
        assert_eq!(r.status, 303, "{}", r.body);
        let c = r.header("set-cookie").expect("a session cookie");
        c.split(';').next().unwrap().to_owned()
    }

    /// Log in: a session with its cookie and the CSRF token of its forms.
    pub fn session(&self) -> Session<'_> {
        let cookie = self.login();
        let csrf = self.csrf(&cookie, "/");
        Session {
            server: self,
            cookie,
            csrf,
        }
    }

    /// The CSRF token of the forms on `path`, for the session `cookie`.
    pub fn csrf(&self, cookie: &str, path: &str) -> String {
        let page = self.get(path, &[("Cookie", cookie)]);
        assert_eq!(page.status, 200, "{}", page.body);
        let at = page.body.find("name=\"csrf\" value=\"").expect("a form") + 19;
        page.body[at..at + 64].to_owned()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stop it (and release the store: a RocksDB database has one process at a time).
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A person logged in to a [`Server`].
pub struct Session<'s> {
    server: &'s Server,
    /// The `Cookie` header of the session.
    pub cookie: String,
    /// The session's CSRF token.
    pub csrf: String,
}

impl Session<'_> {
    /// `GET path` in the session.
    pub fn get(&self, path: &str) -> Resp {
        self.server.get(path, &[("Cookie", &self.cookie)])
    }

    /// Post the form `fields` to `path` in the session, with `csrf` as its CSRF token
    /// (`None`: none at all).
    pub fn post_with(&self, path: &str, fields: &[(&str, &str)], csrf: Option<&str>) -> Resp {
        let mut all = fields.to_vec();
        if let Some(c) = csrf {
            all.push(("csrf", c));
        }
        self.server
            .post_form(path, &[("Cookie", &self.cookie)], &form(&all))
    }

    /// Post the form of `action` (`decide`, `settle`, `fork`) on the page of `run` in
    /// `thread`, with the session's CSRF token.
    pub fn act(&self, thread: &str, run: &str, action: &str, fields: &[(&str, &str)]) -> Resp {
        let path = format!("{}/{action}", run_path(thread, run));
        self.post_with(&path, fields, Some(&self.csrf))
    }
}

/// The path of a run's page.
pub fn run_path(thread: &str, run: &str) -> String {
    format!("/threads/{thread}/runs/{run}")
}

/// A RocksDB store URL in `dir`.
pub fn rocks(dir: &Path) -> String {
    crate::common::rocks(&dir.join("db"))
}
