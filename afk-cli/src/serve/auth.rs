//! Who may use `afk serve`: the token from `AFK_SERVE_TOKEN`, the sessions a login opens, and
//! the CSRF token of each session.
//!
//! A person logs in with the token (a form); the server opens a session and sets its id in an
//! `HttpOnly`, `SameSite=Strict` cookie. Every action form carries the session's CSRF token,
//! checked before anything is written. Scripts use the JSON API with `Authorization: Bearer
//! <token>` (no cookie, so no CSRF token). Tokens are compared in constant time, as SHA-256
//! digests (equal lengths, so the comparison says nothing about the token's length either).
//! Session ids and CSRF tokens are 32 random bytes from the operating system's generator
//! (`rand`'s thread-local CSPRNG, seeded from it), hex-encoded; sessions live in memory and end
//! with the process, on logout, or after [`SESSION_TTL`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use afk_core::{Error, Result};
use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The variable holding the token.
pub const TOKEN_VAR: &str = "AFK_SERVE_TOKEN";
/// The shortest token accepted (characters).
pub const MIN_TOKEN_LEN: usize = 16;
/// The session cookie's name.
pub const COOKIE_NAME: &str = "afk_session";
/// How long a session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// At most this many sessions are kept; the oldest go first.
const MAX_SESSIONS: usize = 1024;

/// How requests are let in.
#[derive(Debug)]
pub struct Auth {
    /// SHA-256 of the token; `None` with `--no-auth`.
    token: Option<[u8; 32]>,
    /// Session id -> (CSRF token, when it was opened).
    sessions: Mutex<HashMap<String, (String, Instant)>>,
}

/// An open session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The session id (the cookie's value).
    pub id: String,
    /// The CSRF token every action form of this session carries.
    pub csrf: String,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// 32 random bytes, hex-encoded.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    bool::from(digest(a).ct_eq(&digest(b)))
}

impl Auth {
    /// The authentication `afk serve` runs with: the token in `token` (from
    /// [`TOKEN_VAR`]), or none with `no_auth`, which only a loopback `bind` may use.
    /// `InvalidConfig` naming the fix otherwise.
    pub fn new(token: Option<String>, no_auth: bool, bind: SocketAddr) -> Result<Auth> {
        let token = token.filter(|t| !t.is_empty());
        let hashed = match (token, no_auth) {
            (Some(_), true) => {
                return Err(Error::new(
                    afk_core::ErrorKind::InvalidConfig,
                    format!("{TOKEN_VAR} is set and --no-auth is given: choose one"),
                ));
            }
            (Some(t), false) if t.chars().count() < MIN_TOKEN_LEN => {
                return Err(Error::new(
                    afk_core::ErrorKind::InvalidConfig,
                    format!(
                        "{TOKEN_VAR} is shorter than {MIN_TOKEN_LEN} characters: use a long \
                         random token (e.g. `openssl rand -hex 32`)"
                    ),
                ));
            }
            (Some(t), false) => Some(digest(&t)),
            (None, true) if bind.ip().is_loopback() => None,
            (None, true) => {
                return Err(Error::new(
                    afk_core::ErrorKind::InvalidConfig,
                    format!(
                        "--no-auth is only allowed on a loopback address, not {bind}: set \
                         {TOKEN_VAR} instead"
                    ),
                ));
            }
            (None, false) => {
                return Err(Error::new(
                    afk_core::ErrorKind::InvalidConfig,
                    format!(
                        "{TOKEN_VAR} is not set: set it to a long random token (e.g. `openssl \
                         rand -hex 32`), or pass --no-auth to serve a loopback address without \
                         one"
                    ),
                ));
            }
        };
        Ok(Auth {
            token: hashed,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// Whether anyone may come in without a token (`--no-auth`).
    pub fn open(&self) -> bool {
        self.token.is_none()
    }

    /// Whether `given` is the token (always false with `--no-auth`: there is none to give).
    pub fn token_matches(&self, given: &str) -> bool {
        match &self.token {
            Some(expected) => bool::from(digest(given).ct_eq(expected)),
            None => false,
        }
    }

    /// Whether the request carries `Authorization: Bearer <token>` with the right token (or
    /// the server runs with `--no-auth`).
    pub fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        if self.open() {
            return true;
        }
        headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token_matches(t.trim()))
    }

    /// Open a new session.
    pub fn open_session(&self) -> Session {
        let session = Session {
            id: random_hex(),
            csrf: random_hex(),
        };
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < SESSION_TTL);
        while map.len() >= MAX_SESSIONS {
            let oldest = map
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        map.insert(session.id.clone(), (session.csrf.clone(), Instant::now()));
        session
    }

    /// The session the request's cookie names, if it is open.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE_NAME)?;
        let map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let (csrf, at) = map.get(&id)?;
        (at.elapsed() < SESSION_TTL).then(|| Session {
            id: id.clone(),
            csrf: csrf.clone(),
        })
    }

    /// End the session `id`.
    pub fn close_session(&self, id: &str) {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(id);
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The `Set-Cookie` value that opens `session` in the browser: `HttpOnly` (no script reads
/// it), `SameSite=Strict` (no other site's page sends it).
pub fn set_cookie(session: &Session) -> String {
    format!(
        "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        session.id,
        SESSION_TTL.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        "127.0.0.1:8080".parse().expect("address")
    }

    #[test]
    fn a_token_is_required_unless_no_auth_on_loopback() {
        let e = Auth::new(None, false, loopback()).unwrap_err();
        assert!(e.message().contains("AFK_SERVE_TOKEN is not set"), "{e}");
        assert!(Auth::new(None, true, loopback()).is_ok());
        let wide: SocketAddr = "0.0.0.0:8080".parse().expect("address");
        let e = Auth::new(None, true, wide).unwrap_err();
        assert!(e.message().contains("only allowed on a loopback"), "{e}");
        let e = Auth::new(Some("short".into()), false, loopback()).unwrap_err();
        assert!(e.message().contains("shorter than 16"), "{e}");
        let e = Auth::new(Some("x".repeat(20)), true, loopback()).unwrap_err();
        assert!(e.message().contains("choose one"), "{e}");
    }

    #[test]
    fn only_the_token_matches() {
        let auth = Auth::new(Some("a".repeat(20)), false, loopback()).expect("auth");
        assert!(auth.token_matches(&"a".repeat(20)));
        assert!(!auth.token_matches(&"a".repeat(19)));
        assert!(!auth.token_matches(""));
        let open = Auth::new(None, true, loopback()).expect("auth");
        assert!(!open.token_matches(""));
    }

    #[test]
    fn sessions_are_found_by_their_cookie_and_end_on_close() {
        let auth = Auth::new(Some("a".repeat(20)), false, loopback()).expect("auth");
        let s = auth.open_session();
        let mut h = HeaderMap::new();
        let value = format!("other=1; {COOKIE_NAME}={}", s.id);
        h.insert(COOKIE, value.parse().expect("header"));
        assert_eq!(auth.session(&h).map(|x| x.csrf), Some(s.csrf.clone()));
        auth.close_session(&s.id);
        assert!(auth.session(&h).is_none());
    }
}
