//! [`RedisConfig`]: where the Redis server (or cluster) is and how to talk to it, parsed from a
//! URL. Passwords never appear in `Debug`, logs or error messages.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use afk_core::config::{Backend, Secret, StoreConfig, StoreUrl};
use afk_core::redact::redact_urls;
use afk_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::RedisStore;

/// URL schemes [`RedisConfig::from_url`] accepts (from [`Backend::schemes`], the one scheme
/// table).
pub const SCHEMES: &[&str] = Backend::Redis.schemes();

/// The query parameters of a Redis URL, in the order the unknown-parameter message lists them.
pub const PARAMETERS: &[&str] = &[
    "prefix",
    "connect_timeout_ms",
    "response_timeout_ms",
    "ttl_s",
    "tls_ca",
    "tls_cert",
    "tls_key",
];

/// Default key prefix (the first part of every hash tag).
pub const DEFAULT_PREFIX: &str = "afk";
/// Default time allowed to open one connection, in milliseconds.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Default time allowed for one answer, in milliseconds.
pub const DEFAULT_RESPONSE_TIMEOUT_MS: u64 = 5_000;

const DEFAULT_PORT: u16 = 6379;

/// Configuration of a [`crate::RedisStore`].
///
/// Usually parsed from a URL with [`RedisConfig::from_url`]:
///
/// - `redis://[user[:password]@]host[:port][/db][?options]`: one node; `rediss://` for TLS
///   (rustls; the server certificate is checked against the webpki roots, or against
///   `tls_ca` when given).
/// - `redis+cluster://[user[:password]@]h1:p1,h2:p2[?options]` (or `rediss+cluster://`): a
///   Redis Cluster, given by one or more seed nodes. A comma-separated list of plain
///   `redis://` URLs (`redis://h1:p1,redis://h2:p2`, the form of `AFK_TEST_REDIS_CLUSTER_URLS`)
///   is read as cluster seeds too. A cluster has only database 0.
///
/// Options (the grammar of [`afk_core::config::Query`]): `prefix` (key prefix, default `afk`;
/// ASCII letters, digits, `_`, `-`, `.`), `connect_timeout_ms` and `response_timeout_ms`
/// (durations; a bare number is milliseconds), `ttl_s` (optional per-run time to live; a
/// duration of whole seconds, a bare number is seconds), and for `rediss://` only: `tls_ca`
/// (PEM file of the CA certificates to trust instead of the webpki roots), `tls_cert` and
/// `tls_key` (PEM client certificate chain and private key for mutual TLS; both or neither).
/// Option values are percent-decoded (`%2F`, and `+` is a space). Unknown and repeated options
/// are rejected, so a typo does not silently do nothing. The TLS files are read when
/// connecting ([`crate::RedisStore::open`]), not when parsing.
///
/// The password is a [`Secret`]: `Debug`, [`RedisConfig::redacted_url`] and `Serialize` show
/// `***` (a serialized configuration cannot be read back with its password; see [`Secret`]).
///
/// Built with [`RedisConfig::default`] (`localhost:6379`), [`RedisConfig::single`],
/// [`RedisConfig::cluster`] or [`RedisConfig::from_url`], then adjusted with the `with_*`
/// setters (or field by field); the struct is `#[non_exhaustive]`, so a new option is not a
/// breaking change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisConfig {
    /// Seed nodes as `(host, port)`. Exactly one unless `cluster`.
    pub nodes: Vec<(String, u16)>,
    /// Talk to a Redis Cluster (slot routing, MOVED/ASK handled by the client).
    #[serde(default)]
    pub cluster: bool,
    /// Use TLS (rustls; the server is checked against `tls_ca`, or the webpki root
    /// certificates when `tls_ca` is `None`).
    #[serde(default)]
    pub tls: bool,
    /// PEM file with the CA certificate(s) that sign the server certificate (a private CA).
    /// Replaces the webpki roots. Only with `tls`.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// PEM file with the client certificate chain for mutual TLS. Only with `tls`, and only
    /// together with `tls_key`.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// PEM file with the private key of `tls_cert`. Its contents are never shown.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// ACL user name, if any.
    #[serde(default)]
    pub username: Option<String>,
    /// Password, if any. Never shown by `Debug`, `Serialize` or in errors.
    #[serde(default)]
    pub password: Option<Secret>,
    /// Database index (single node only; must be 0 on a cluster).
    #[serde(default)]
    pub db: i64,
    /// Key prefix: every key is under the hash tag `{<prefix>:<thread>}`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Time allowed to open one connection, in milliseconds.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Time allowed for one answer, in milliseconds.
    #[serde(default = "default_response_timeout_ms")]
    pub response_timeout_ms: u64,
    /// If set, every key of a finished run expires together, `ttl_s` seconds after the run
    /// ended; runs that have not finished (in progress, paused, suspended) never expire.
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

fn default_prefix() -> String {
    DEFAULT_PREFIX.to_string()
}
fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}
fn default_response_timeout_ms() -> u64 {
    DEFAULT_RESPONSE_TIMEOUT_MS
}

impl Default for RedisConfig {
    /// A single node at `localhost:6379`, every option at its default (what `redis://` means).
    fn default() -> Self {
        RedisConfig::single("localhost", DEFAULT_PORT)
    }
}

impl RedisConfig {
    /// A single-node configuration for `host:port` with every option at its default.
    pub fn single(host: impl Into<String>, port: u16) -> Self {
        RedisConfig {
            nodes: vec![(host.into(), port)],
            cluster: false,
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            username: None,
            password: None,
            db: 0,
            prefix: default_prefix(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            response_timeout_ms: DEFAULT_RESPONSE_TIMEOUT_MS,
            ttl_s: None,
        }
    }

    /// Parse a URL (see the type docs for the forms). Fails with `InvalidConfig`; the message
    /// shows the URL with its password replaced by `***`.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = url.trim();
        if url.contains(',') && url.split(',').all(|p| p.contains("://")) {
            return parse_url_list(url);
        }
        let url = StoreUrl::parse(url, Backend::Redis, PARAMETERS)?;
        let (tls, cluster) = match url.scheme() {
            "rediss" => (true, false),
            "redis+cluster" => (false, true),
            "rediss+cluster" => (true, true),
            _ => (false, false),
        };
        let mut cfg = RedisConfig::single("", DEFAULT_PORT);
        cfg.nodes.clear();
        cfg.tls = tls;
        cfg.cluster = cluster;
        cfg.username = url.user().map(str::to_owned);
        cfg.password = url.password().cloned();
        if url.authority().is_empty() {
            return Err(url.missing("host"));
        }
        for host in url.authority().split(',') {
            cfg.nodes
                .push(parse_host(host).map_err(|why| url.invalid(why))?);
        }
        if !cluster && cfg.nodes.len() != 1 {
            return Err(url.invalid("several hosts need the redis+cluster:// scheme"));
        }
        let path = url.path().trim_matches('/');
        if !path.is_empty() {
            cfg.db = path
                .parse()
                .map_err(|_| url.invalid("the database must be a number"))?;
        }
        let q = url.query();
        if let Some(prefix) = q.str("prefix") {
            cfg.prefix = prefix.to_owned();
        }
        if let Some(d) = q.duration("connect_timeout_ms")? {
            cfg.connect_timeout_ms = millis(d);
        }
        if let Some(d) = q.duration("response_timeout_ms")? {
            cfg.response_timeout_ms = millis(d);
        }
        if let Some(d) = q.duration("ttl_s")? {
            if d.subsec_nanos() != 0 {
                return Err(q.bad("ttl_s", "a whole number of seconds"));
            }
            cfg.ttl_s = Some(d.as_secs());
        }
        cfg.tls_ca = q.str("tls_ca").map(PathBuf::from);
        cfg.tls_cert = q.str("tls_cert").map(PathBuf::from);
        cfg.tls_key = q.str("tls_key").map(PathBuf::from);
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check the combination of settings; `InvalidConfig` names the problem.
    pub fn validate(&self) -> Result<()> {
        if self.nodes.is_empty() {
            return Err(Error::invalid_config("redis: no host given"));
        }
        if !self.cluster && self.nodes.len() != 1 {
            return Err(Error::invalid_config(
                "redis: several hosts need cluster mode",
            ));
        }
        if self.cluster && self.db != 0 {
            return Err(Error::invalid_config(format!(
                "redis: a Redis Cluster has only database 0, got database {} in {}",
                self.db,
                self.redacted_url()
            )));
        }
        if self.db < 0 {
            return Err(Error::invalid_config(
                "redis: database index must not be negative",
            ));
        }
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 64
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(Error::invalid_config(format!(
                "redis: prefix {p:?} must be 1 to 64 ASCII letters, digits, '_', '-' or '.'"
            )));
        }
        if self.connect_timeout_ms == 0 || self.response_timeout_ms == 0 {
            return Err(Error::invalid_config(
                "redis: timeouts must be at least 1 ms",
            ));
        }
        let tls_options = [
            ("tls_ca", &self.tls_ca),
            ("tls_cert", &self.tls_cert),
            ("tls_key", &self.tls_key),
        ];
        for (name, value) in tls_options {
            if value.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(Error::invalid_config(format!(
                    "redis: option {name} is an empty path"
                )));
            }
            if value.is_some() && !self.tls {
                return Err(Error::invalid_config(format!(
                    "redis: option {name} needs TLS (a rediss:// or rediss+cluster:// URL)"
                )));
            }
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(Error::invalid_config(
                "redis: options tls_cert and tls_key go together (mutual TLS needs both)",
            ));
        }
        if self.ttl_s == Some(0) {
            return Err(Error::invalid_config(
                "redis: ttl_s must be at least 1 (omit it for no TTL)",
            ));
        }
        Ok(())
    }

    /// The time allowed to open one connection.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// The time allowed for one answer.
    pub fn response_timeout(&self) -> Duration {
        Duration::from_millis(self.response_timeout_ms)
    }

    /// The configuration as a URL with the password replaced by `***`, for logs and errors.
    pub fn redacted_url(&self) -> String {
        let scheme = match (self.tls, self.cluster) {
            (false, false) => "redis",
            (true, false) => "rediss",
            (false, true) => "redis+cluster",
            (true, true) => "rediss+cluster",
        };
        let auth = match (&self.username, &self.password) {
            (None, None) => String::new(),
            (Some(u), None) => format!("{u}@"),
            (u, Some(_)) => format!("{}:***@", u.as_deref().unwrap_or("")),
        };
        let hosts: Vec<String> = self.nodes.iter().map(|(h, p)| host_port(h, *p)).collect();
        let mut s = format!(
            "{scheme}://{auth}{}/{}?prefix={}",
            hosts.join(","),
            self.db,
            self.prefix
        );
        if let Some(ttl) = self.ttl_s {
            s.push_str(&format!("&ttl_s={ttl}"));
        }
        let tls_options = [
            ("tls_ca", &self.tls_ca),
            ("tls_cert", &self.tls_cert),
            ("tls_key", &self.tls_key),
        ];
        for (name, path) in tls_options {
            if let Some(path) = path {
                let path = path.to_string_lossy();
                let enc = url::form_urlencoded::byte_serialize(path.as_bytes()).collect::<String>();
                s.push_str(&format!("&{name}={enc}"));
            }
        }
        s
    }
}

impl FromStr for RedisConfig {
    type Err = Error;

    /// Same as [`RedisConfig::from_url`].
    fn from_str(s: &str) -> Result<Self> {
        RedisConfig::from_url(s)
    }
}

#[async_trait::async_trait]
impl StoreConfig for RedisConfig {
    type Store = RedisStore;
    const BACKEND: Backend = Backend::Redis;

    fn validate(&self) -> Result<()> {
        RedisConfig::validate(self)
    }

    /// [`RedisStore::open`].
    async fn open(self) -> Result<RedisStore> {
        RedisStore::open(self).await
    }
}

/// A duration of the URL grammar as whole milliseconds (it has no finer unit).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `redis://h1:p1,redis://h2:p2`: cluster seeds given as separate URLs, which must agree on
/// everything but the host.
fn parse_url_list(list: &str) -> Result<RedisConfig> {
    let mut merged: Option<RedisConfig> = None;
    for part in list.split(',') {
        let mut one = RedisConfig::from_url(part)?;
        one.cluster = true;
        match &mut merged {
            None => merged = Some(one),
            Some(m) => {
                let mut probe = one.clone();
                probe.nodes = m.nodes.clone();
                if &probe != m {
                    return Err(Error::invalid_config(format!(
                        "cluster seed URLs disagree on options or credentials: {}",
                        redact_urls(list)
                    )));
                }
                m.nodes.extend(one.nodes);
            }
        }
    }
    let cfg = merged.ok_or_else(|| Error::invalid_config("redis: empty URL list"))?;
    cfg.validate()?;
    Ok(cfg)
}

fn parse_host(s: &str) -> std::result::Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or("unclosed '[' in host")?;
        (h, after.strip_prefix(':'))
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("empty host".into());
    }
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("bad port {p:?}"))?,
        None => DEFAULT_PORT,
    };
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use afk_core::ErrorKind;

    #[test]
    fn parses_single_node_with_everything() {
        let c = RedisConfig::from_url(
            "rediss://bob:s%40cret@cache.example:6380/3?prefix=team.a&connect_timeout_ms=150&response_timeout_ms=900&ttl_s=60",
        )
        .unwrap();
        assert_eq!(c.nodes, vec![("cache.example".to_string(), 6380)]);
        assert!(c.tls && !c.cluster);
        assert_eq!(c.username.as_deref(), Some("bob"));
        assert_eq!(c.password.as_ref().map(Secret::expose), Some("s@cret"));
        assert_eq!((c.db, c.prefix.as_str()), (3, "team.a"));
        assert_eq!(
            (c.connect_timeout_ms, c.response_timeout_ms, c.ttl_s),
            (150, 900, Some(60))
        );
    }

    #[test]
    fn defaults() {
        let c = RedisConfig::from_url("redis://localhost").unwrap();
        assert_eq!(c, RedisConfig::single("localhost", 6379));
        assert_eq!(c.prefix, "afk");
        assert_eq!(
            RedisConfig::from_url("redis://[::1]:7000/").unwrap().nodes[0],
            ("::1".into(), 7000)
        );
    }

    #[test]
    fn parses_cluster_seeds_both_forms() {
        let a = RedisConfig::from_url("redis+cluster://:pw@h1:7001,h2:7002,h3").unwrap();
        assert!(a.cluster && !a.tls);
        assert_eq!(a.nodes.len(), 3);
        assert_eq!(a.nodes[2], ("h3".to_string(), 6379));
        assert_eq!(a.password.as_ref().map(Secret::expose), Some("pw"));
        let b = RedisConfig::from_url("redis://127.0.0.1:7001,redis://127.0.0.1:7002").unwrap();
        assert!(b.cluster);
        assert_eq!(b.nodes.len(), 2);
        assert!(
            RedisConfig::from_url("rediss+cluster://h1:1,h2:2")
                .unwrap()
                .tls
        );
    }

    #[test]
    fn rejects_db_on_cluster_and_bad_options() {
        let e = RedisConfig::from_url("redis+cluster://h1:1,h2:2/2").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.message().contains("only database 0"), "{e}");
        for bad in [
            "http://h",
            "redis://h:notaport",
            "redis://h1:1,h2:2",
            "redis://h/x",
            "redis://h?prefx=a",
            "redis://h?prefix=a{b}",
            "redis://h?ttl_s=0",
            "redis://h?connect_timeout_ms=abc",
            "redis://:pw@",
        ] {
            assert_eq!(
                RedisConfig::from_url(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }

    #[test]
    fn password_never_shown() {
        let secret = "hunter2-topsecret";
        let url = format!("redis://alice:{secret}@h:1/0?prefix=p");
        let c = RedisConfig::from_url(&url).unwrap();
        assert!(!format!("{c:?}").contains(secret));
        let json = serde_json::to_string(&c).unwrap();
        assert!(
            !json.contains(secret) && json.contains(r#""password":"***""#),
            "{json}"
        );
        assert!(serde_json::from_str::<RedisConfig>(&json).is_err());
        assert_eq!(c.password.as_ref().map(Secret::expose), Some(secret));
        assert!(!c.redacted_url().contains(secret));
        assert!(
            c.redacted_url().contains("alice:***@h:1"),
            "{}",
            c.redacted_url()
        );
        let e =
            RedisConfig::from_url(&format!("redis://alice:{secret}@h:1/0?bogus=1")).unwrap_err();
        assert!(!e.to_string().contains(secret), "{e}");
        assert!(!format!("{e:?}").contains(secret));
        let e = RedisConfig::from_url(&format!("redis+cluster://:{secret}@h:1,h:2/4")).unwrap_err();
        assert!(!e.to_string().contains(secret), "{e}");
        let e = RedisConfig::from_url(&format!("redis://u:{secret}@h:1,redis://u:other@h:2"))
            .unwrap_err();
        assert!(
            !e.to_string().contains(secret) && !e.to_string().contains("other"),
            "{e}"
        );
    }

    #[test]
    fn tls_options() {
        let c = RedisConfig::from_url(
            "rediss://h:6380?tls_ca=/etc/ca%20dir/ca.pem&tls_cert=/c.pem&tls_key=/k.pem",
        )
        .unwrap();
        assert_eq!(c.tls_ca, Some(PathBuf::from("/etc/ca dir/ca.pem")));
        assert_eq!(c.tls_cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(c.tls_key, Some(PathBuf::from("/k.pem")));
        assert_eq!(
            c.redacted_url(),
            "rediss://h:6380/0?prefix=afk&tls_ca=%2Fetc%2Fca+dir%2Fca.pem&tls_cert=%2Fc.pem&tls_key=%2Fk.pem"
        );
        assert_eq!(RedisConfig::from_url(&c.redacted_url()).unwrap(), c);
        let cl = RedisConfig::from_url("rediss+cluster://h1:1,h2:2?tls_ca=ca.pem").unwrap();
        assert_eq!(cl.tls_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(RedisConfig::from_url("rediss://h").unwrap().tls_ca, None);
        for (bad, names) in [
            ("redis://h?tls_ca=/ca.pem", "tls_ca"),
            ("redis+cluster://h1:1?tls_key=/k.pem", "tls_key"),
            ("rediss://h?tls_cert=/c.pem", "tls_cert and tls_key"),
            ("rediss://h?tls_key=/k.pem", "tls_cert and tls_key"),
            ("rediss://h?tls_ca=", "tls_ca"),
        ] {
            let e = RedisConfig::from_url(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad}");
            assert!(e.message().contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn serde_round_trip_with_defaults() {
        let c: RedisConfig = serde_json::from_str(r#"{"nodes": [["h", 1]]}"#).unwrap();
        assert_eq!(c, RedisConfig::single("h", 1));
        let back: RedisConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
