//! The store URL: scheme table, strict percent-decoding and the query grammar every store uses.

use std::fmt;
use std::time::Duration;

use super::Secret;
use crate::error::{Error, Result};
use crate::redact::redact_urls;

/// A store backend, as a URL's scheme names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// The process-local in-memory store (`memory://`), always there.
    Memory,
    /// The embedded RocksDB store (`rocksdb://`).
    RocksDb,
    /// The Redis and Redis Cluster store (`redis://`, `rediss://`, `redis+cluster://`,
    /// `rediss+cluster://`).
    Redis,
    /// The S3-compatible object store (`s3://`).
    S3,
}

impl Backend {
    /// Every backend, in the order the scheme table lists them.
    pub const ALL: [Backend; 4] = [
        Backend::Memory,
        Backend::RocksDb,
        Backend::Redis,
        Backend::S3,
    ];

    /// The URL schemes of this backend (lowercase, without `://`): the one scheme table.
    pub const fn schemes(self) -> &'static [&'static str] {
        match self {
            Backend::Memory => &["memory"],
            Backend::RocksDb => &["rocksdb"],
            Backend::Redis => &["redis", "rediss", "redis+cluster", "rediss+cluster"],
            Backend::S3 => &["s3"],
        }
    }

    /// A short name for messages: `"memory"`, `"rocksdb"`, `"redis"`, `"s3"`.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::RocksDb => "rocksdb",
            Backend::Redis => "redis",
            Backend::S3 => "s3",
        }
    }

    /// The Cargo feature of the `afk` crate (and of `afk-cli`) that compiles this backend in;
    /// `None` for the in-memory store, which is always there.
    pub const fn feature(self) -> Option<&'static str> {
        match self {
            Backend::Memory => None,
            Backend::RocksDb => Some("rocksdb"),
            Backend::Redis => Some("redis"),
            Backend::S3 => Some("s3"),
        }
    }

    /// The backend whose scheme `scheme` is (any case, without `://`).
    pub fn from_scheme(scheme: &str) -> Option<Backend> {
        let scheme = scheme.to_ascii_lowercase();
        Backend::ALL
            .into_iter()
            .find(|b| b.schemes().contains(&scheme.as_str()))
    }

    /// The backend a store URL names by its scheme.
    ///
    /// Errors: `InvalidConfig` for a URL without a scheme or with an unknown one; the message
    /// shows the URL with its secrets hidden ([`redact_urls`]) and lists the known schemes.
    pub fn of_url(url: &str) -> Result<Backend> {
        let url = url.trim();
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::invalid_config(format!(
                "store URL `{}` has no scheme; expected one of {}",
                redact_urls(url),
                all_schemes()
            )));
        };
        Backend::from_scheme(scheme).ok_or_else(|| {
            Error::invalid_config(format!(
                "store URL `{}` has an unknown scheme `{scheme}://`; expected one of {}",
                redact_urls(url),
                all_schemes()
            ))
        })
    }

    fn scheme_list(self) -> String {
        list(self.schemes().iter().map(|s| format!("{s}://")))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every known scheme as `a://, b://, …`.
fn all_schemes() -> String {
    list(
        Backend::ALL
            .iter()
            .flat_map(|b| b.schemes())
            .map(|s| format!("{s}://")),
    )
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// A store URL taken apart: `scheme://[user[:password]@]authority[/path][?query]`.
///
/// [`StoreUrl::parse`] checks the scheme against the backend's (see [`Backend::schemes`]),
/// refuses a fragment, percent-decodes the user, password and path strictly (a `%` must be
/// followed by two hex digits, and the result must be UTF-8), and reads the query with
/// [`Query`]. The authority (hosts and ports, a bucket) is kept as written. Every error is
/// `InvalidConfig`, names the backend, and never shows a secret.
#[derive(Clone)]
pub struct StoreUrl {
    backend: Backend,
    scheme: &'static str,
    redacted: String,
    user: Option<String>,
    password: Option<Secret>,
    authority: String,
    path: String,
    query: Query,
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreUrl")
            .field("url", &self.redacted)
            .finish_non_exhaustive()
    }
}

impl StoreUrl {
    /// Take `url` apart as a URL of `backend`, whose query may hold the parameters `known`
    /// (each at most once).
    pub fn parse(url: &str, backend: Backend, known: &[&'static str]) -> Result<StoreUrl> {
        let url = url.trim();
        let redacted = redact_urls(url);
        let wrong = || {
            Error::invalid_config(format!(
                "store URL `{redacted}` is not a {backend} URL (expected {})",
                backend.scheme_list()
            ))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(wrong)?;
        let scheme = scheme.to_ascii_lowercase();
        let scheme = *backend
            .schemes()
            .iter()
            .find(|s| **s == scheme)
            .ok_or_else(wrong)?;
        if rest.contains('#') {
            return Err(Error::invalid_config(format!(
                "{backend} URL `{redacted}` must not have a fragment (#)"
            )));
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, q),
            None => (rest, ""),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let (user, password, authority) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                let (user, password) = match userinfo.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (userinfo, None),
                };
                let bad = || {
                    Error::invalid_config(format!(
                        "{backend} URL `{redacted}`: the credentials are not valid percent-encoded UTF-8"
                    ))
                };
                let user = decode(user).ok_or_else(bad)?;
                let password = match password {
                    Some(p) => Some(decode(p).ok_or_else(bad)?),
                    None => None,
                };
                (
                    Some(user).filter(|u| !u.is_empty()),
                    password.filter(|p| !p.is_empty()).map(Secret::new),
                    host,
                )
            }
            None => (None, None, authority),
        };
        let path = decode(path).ok_or_else(|| {
            Error::invalid_config(format!(
                "{backend} URL `{redacted}`: the path is not valid percent-encoded UTF-8"
            ))
        })?;
        Ok(StoreUrl {
            backend,
            scheme,
            user,
            password,
            authority: authority.to_owned(),
            path,
            query: Query::parse(backend, query, known)?,
            redacted,
        })
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The scheme, lowercase, one of [`Backend::schemes`].
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The URL with its secrets hidden, for messages.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The decoded user name of the user info, if any (empty counts as none).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The decoded password of the user info, if any (empty counts as none).
    pub fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    /// Whether the URL has user info (a user or a password).
    pub fn has_credentials(&self) -> bool {
        self.user.is_some() || self.password.is_some()
    }

    /// The authority without user info, as written: `host:port`, `h1:p1,h2:p2`, a bucket, or
    /// empty (`rocksdb:///path`).
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The decoded path, with its leading `/` (empty when there is none).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The query parameters.
    pub fn query(&self) -> &Query {
        &self.query
    }

    /// `InvalidConfig`: this URL lacks `what` (`"host"`, `"bucket"`, `"path"`).
    pub fn missing(&self, what: &str) -> Error {
        Error::invalid_config(format!(
            "{} URL `{}` has no {what}",
            self.backend, self.redacted
        ))
    }

    /// `InvalidConfig` about this URL: ``<backend> URL `<redacted url>`: <why>``.
    pub fn invalid(&self, why: impl fmt::Display) -> Error {
        Error::invalid_config(format!("{} URL `{}`: {why}", self.backend, self.redacted))
    }
}

/// The query of a store URL: `name=value` pairs joined by `&`, each name at most once and one
/// of the parameters the store knows.
///
/// Names and values are form-decoded strictly: `+` is a space, `%XX` a byte, and the result
/// must be UTF-8. The typed getters read a value with the grammar every store shares:
///
/// | getter | grammar |
/// | --- | --- |
/// | [`Query::bool`] | `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0` (any case) |
/// | [`Query::size`] | a whole number of bytes, optionally with a unit `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case; powers of 1024): `1048576`, `64MiB` |
/// | [`Query::duration`] | a whole number with a unit `ms`, `s`, `m`, `h`: `500ms`, `30s`, `5m`; a bare number is in the unit the parameter's name ends with (`_ms`, `_s`) |
/// | [`Query::number`] | a whole number, no sign |
/// | [`Query::str`], [`Query::secret`] | any text |
///
/// A bad value is `InvalidConfig` naming the store, the parameter and the grammar, never the
/// value (it may be a secret given to the wrong parameter).
#[derive(Clone)]
pub struct Query {
    backend: Backend,
    known: Vec<&'static str>,
    pairs: Vec<(String, String)>,
}

impl fmt::Debug for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.pairs.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Query")
            .field("backend", &self.backend)
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

impl Query {
    /// Read `query` (the part after `?`, maybe empty) of a `backend` URL whose parameters are
    /// `known`.
    ///
    /// Errors (`InvalidConfig`): bad percent-encoding, a parameter given twice, a parameter
    /// not in `known` (the message lists them).
    pub fn parse(backend: Backend, query: &str, known: &[&'static str]) -> Result<Query> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode_form(name).ok_or_else(|| {
                Error::invalid_config(format!(
                    "{backend} URL: a parameter name is not valid percent-encoded UTF-8"
                ))
            })?;
            let value = decode_form(value).ok_or_else(|| {
                Error::invalid_config(format!(
                    "{backend} URL parameter `{name}` is not valid percent-encoded UTF-8"
                ))
            })?;
            if !known.contains(&name.as_str()) {
                return Err(Error::invalid_config(format!(
                    "unknown {backend} URL parameter `{name}`; known: {}",
                    known.join(", ")
                )));
            }
            if pairs.iter().any(|(k, _)| *k == name) {
                return Err(Error::invalid_config(format!(
                    "{backend} URL parameter `{name}` is given twice"
                )));
            }
            pairs.push((name, value));
        }
        Ok(Query {
            backend,
            known: known.to_vec(),
            pairs,
        })
    }

    /// The parameters given, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// The decoded value of `name`, if given.
    pub fn str(&self, name: &str) -> Option<&str> {
        debug_assert!(
            self.known.contains(&name),
            "`{name}` is not a known parameter"
        );
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name` as a credential.
    pub fn secret(&self, name: &str) -> Option<Secret> {
        self.str(name).map(Secret::new)
    }

    /// The value of `name` read with `parse`, whose error names what is expected (`"one of
    /// none, snappy, lz4"`): `InvalidConfig` ``<backend> URL parameter `name` must be <expected>``.
    pub fn parse_with<T>(
        &self,
        name: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.str(name) {
            None => Ok(None),
            Some(v) => parse(v).map(Some).ok_or_else(|| self.bad(name, expected)),
        }
    }

    /// `name` as a boolean (see the grammar in the type docs).
    pub fn bool(&self, name: &str) -> Result<Option<bool>> {
        self.parse_with(name, BOOL_GRAMMAR, parse_bool)
    }

    /// `name` as a size in bytes (see the grammar in the type docs).
    pub fn size(&self, name: &str) -> Result<Option<u64>> {
        self.parse_with(name, SIZE_GRAMMAR, parse_size)
    }

    /// `name` as a duration (see the grammar in the type docs).
    pub fn duration(&self, name: &str) -> Result<Option<Duration>> {
        let bare = bare_unit(name);
        let expected = match bare {
            Some(unit) => format!("{DURATION_GRAMMAR}, or a bare number of {unit}"),
            None => DURATION_GRAMMAR.to_owned(),
        };
        self.parse_with(name, &expected, |v| parse_duration(v, bare))
    }

    /// `name` as a whole number without sign that fits `T`.
    pub fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>> {
        self.parse_with(name, NUMBER_GRAMMAR, |v| {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            v.parse().ok()
        })
    }

    /// `InvalidConfig`: the value of `name` is not `expected`.
    pub fn bad(&self, name: &str, expected: &str) -> Error {
        Error::invalid_config(format!(
            "{} URL parameter `{name}` must be {expected}",
            self.backend
        ))
    }
}

/// What [`Query::bool`] accepts, for messages and docs.
pub const BOOL_GRAMMAR: &str = "a boolean: true/false, yes/no, on/off or 1/0";
/// What [`Query::size`] accepts, for messages and docs.
pub const SIZE_GRAMMAR: &str = "a size in bytes: a whole number with an optional unit B, KiB, MiB, GiB or TiB (like 1048576 or 64MiB)";
/// What [`Query::duration`] accepts, for messages and docs.
pub const DURATION_GRAMMAR: &str =
    "a duration: a whole number with a unit ms, s, m or h (like 500ms, 30s or 5m)";
/// What [`Query::number`] accepts, for messages and docs.
pub const NUMBER_GRAMMAR: &str = "a whole number without sign, in range";

/// A boolean of the URL grammar: `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, any case.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// A size of the URL grammar in bytes: a whole number with an optional unit `B`, `K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case; powers of 1024). `None` when malformed or over
/// `u64`. Decimal units (`KB`, `MB`) are refused: they are ambiguous.
pub fn parse_size(value: &str) -> Option<u64> {
    let (n, unit) = split_number(value)?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// A duration of the URL grammar: a whole number with a unit `ms`, `s`, `m`, `h`; a bare
/// number is in `bare` (`None`: a unit is required).
pub fn parse_duration(value: &str, bare: Option<TimeUnit>) -> Option<Duration> {
    let (n, unit) = split_number(value)?;
    let unit = match unit.to_ascii_lowercase().as_str() {
        "" => bare?,
        "ms" => TimeUnit::Millis,
        "s" => TimeUnit::Secs,
        "m" => TimeUnit::Mins,
        "h" => TimeUnit::Hours,
        _ => return None,
    };
    let ms = n.checked_mul(unit.millis())?;
    Some(Duration::from_millis(ms))
}

/// The unit of a bare number in [`parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeUnit {
    /// Milliseconds (`ms`).
    Millis,
    /// Seconds (`s`).
    Secs,
    /// Minutes (`m`).
    Mins,
    /// Hours (`h`).
    Hours,
}

impl TimeUnit {
    fn millis(self) -> u64 {
        match self {
            TimeUnit::Millis => 1,
            TimeUnit::Secs => 1_000,
            TimeUnit::Mins => 60_000,
            TimeUnit::Hours => 3_600_000,
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeUnit::Millis => "milliseconds",
            TimeUnit::Secs => "seconds",
            TimeUnit::Mins => "minutes",
            TimeUnit::Hours => "hours",
        })
    }
}

/// The unit a parameter's name gives a bare number: `_ms` milliseconds, `_s` seconds.
fn bare_unit(name: &str) -> Option<TimeUnit> {
    if name.ends_with("_ms") {
        Some(TimeUnit::Millis)
    } else if name.ends_with("_s") {
        Some(TimeUnit::Secs)
    } else {
        None
    }
}

/// `"64MiB"` → `(64, "MiB")`; `None` without leading digits or over `u64`.
fn split_number(value: &str) -> Option<(u64, &str)> {
    let end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(end);
    Some((digits.parse().ok()?, unit))
}

/// Strict percent-decoding: `%` must start `%XX`, and the bytes must be UTF-8.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// [`decode`] of a form value: `+` is a space.
fn decode_form(s: &str) -> Option<String> {
    decode(&s.replace('+', " "))
}
