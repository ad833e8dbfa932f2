//! [`KmsConfig`]: which KMS key wraps the data keys and how to reach the service, from a
//! `kms://` URL or serde.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use afk_core::config::{DURATION_GRAMMAR, NUMBER_GRAMMAR, Secret, TimeUnit, parse_duration};
use afk_core::redact::redact_urls;
use afk_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The URL scheme of a KMS key source: `kms://<key id>?…`.
pub const SCHEME: &str = "kms";

/// The query parameters of a `kms://` URL, in the order the unknown-parameter message lists
/// them.
pub const PARAMETERS: &[&str] = &[
    "region",
    "endpoint",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "connect_timeout_ms",
    "attempt_timeout_ms",
    "operation_timeout_ms",
    "max_attempts",
];

/// Default of [`KmsConfig::connect_timeout_ms`]: 3 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// Default of [`KmsConfig::attempt_timeout_ms`]: 10 s (a wrap or unwrap is one small request).
pub const DEFAULT_ATTEMPT_TIMEOUT_MS: u64 = 10_000;
/// Default of [`KmsConfig::operation_timeout_ms`]: 30 s.
pub const DEFAULT_OPERATION_TIMEOUT_MS: u64 = 30_000;
/// Default of [`KmsConfig::max_attempts`]: 3.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Configuration of a [`KmsKeys`](crate::KmsKeys) source.
///
/// Parsed from `kms://<key id>?region=…&endpoint=…&access_key_id=…&secret_access_key=…&session_token=…`
/// plus the request bounds `connect_timeout_ms`, `attempt_timeout_ms`, `operation_timeout_ms`
/// (durations; a bare number is milliseconds) and `max_attempts`, every parameter optional.
/// The key id is everything between `kms://` and `?`, percent-decoded: a key id, a key ARN, an
/// alias (`alias/afk-seal`) or an alias ARN. Without `access_key_id` and `secret_access_key`
/// the standard AWS credentials chain is used; without `region`, the AWS environment's.
///
/// ```
/// use afk_seal::KmsConfig;
///
/// let cfg: KmsConfig = "kms://alias/afk-seal?region=eu-west-1&max_attempts=2".parse()?;
/// assert_eq!(cfg.key_id, "alias/afk-seal");
/// assert_eq!(cfg.region.as_deref(), Some("eu-west-1"));
/// assert_eq!(cfg.max_attempts, Some(2));
/// # Ok::<(), afk_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KmsConfig {
    /// The KMS key that wraps new data keys: key id, key ARN, alias or alias ARN.
    pub key_id: String,
    /// Region; `None` takes it from the AWS environment or profile.
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint URL of a KMS-compatible service; `None` for AWS.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Static access key id; set together with `secret_access_key`.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Static secret access key; set together with `access_key_id`.
    #[serde(default)]
    pub secret_access_key: Option<Secret>,
    /// Session token of temporary credentials, with the two above.
    #[serde(default)]
    pub session_token: Option<Secret>,
    /// Connect timeout of one request, in milliseconds ([`DEFAULT_CONNECT_TIMEOUT_MS`]).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Timeout of one attempt of a request, in milliseconds ([`DEFAULT_ATTEMPT_TIMEOUT_MS`]).
    #[serde(default)]
    pub attempt_timeout_ms: Option<u64>,
    /// Timeout of one request with all its attempts, in milliseconds
    /// ([`DEFAULT_OPERATION_TIMEOUT_MS`]).
    #[serde(default)]
    pub operation_timeout_ms: Option<u64>,
    /// Attempts per request (throttling, 5xx, I/O errors, timeouts), 1 to 10
    /// ([`DEFAULT_MAX_ATTEMPTS`]).
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

impl fmt::Debug for KmsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KmsConfig")
            .field("key_id", &self.key_id)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id.as_ref().map(|_| "***"))
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("attempt_timeout_ms", &self.attempt_timeout_ms)
            .field("operation_timeout_ms", &self.operation_timeout_ms)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl KmsConfig {
    /// A configuration for the KMS key `key_id` with every option at its default.
    pub fn new(key_id: impl Into<String>) -> Self {
        KmsConfig {
            key_id: key_id.into(),
            region: None,
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            connect_timeout_ms: None,
            attempt_timeout_ms: None,
            operation_timeout_ms: None,
            max_attempts: None,
        }
    }

    /// Parse a `kms://<key id>?…` URL (see the type docs). Errors: `InvalidConfig` naming
    /// the offending part, showing the URL only with its secrets hidden.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = url.trim();
        let shown = redact_urls(url);
        let bad = |why: String| Error::invalid_config(format!("kms URL `{shown}`: {why}"));
        let rest = url
            .split_once("://")
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(SCHEME))
            .map(|(_, rest)| rest)
            .ok_or_else(|| bad("expected kms://<key id>?…".into()))?;
        if rest.contains('#') {
            return Err(bad("must not have a fragment (#)".into()));
        }
        let (key, query) = rest.split_once('?').unwrap_or((rest, ""));
        let key =
            decode(key).ok_or_else(|| bad("the key id is not percent-encoded UTF-8".into()))?;
        // Not the URL: a value given to the wrong parameter may be a secret.
        let bad = |why: String| Error::invalid_config(format!("kms URL: {why}"));
        let q = Query::parse(query).map_err(bad)?;
        let mut cfg = KmsConfig::new(key);
        cfg.region = q.str("region");
        cfg.endpoint = q.str("endpoint");
        cfg.access_key_id = q.str("access_key_id");
        cfg.secret_access_key = q.str("secret_access_key").map(Secret::new);
        cfg.session_token = q.str("session_token").map(Secret::new);
        cfg.connect_timeout_ms = q.millis("connect_timeout_ms").map_err(bad)?;
        cfg.attempt_timeout_ms = q.millis("attempt_timeout_ms").map_err(bad)?;
        cfg.operation_timeout_ms = q.millis("operation_timeout_ms").map_err(bad)?;
        cfg.max_attempts = q.number("max_attempts").map_err(bad)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check the configuration without contacting the service. Errors: `InvalidConfig` for
    /// an empty key id, only one of the two static credentials, a zero timeout, `max_attempts`
    /// outside 1 to 10, or an endpoint that is not an http(s) URL.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Error::invalid_config(format!("KMS key source: {why}"));
        if self.key_id.trim().is_empty() {
            return Err(bad("no KMS key id (kms://<key id, ARN or alias>)".into()));
        }
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err(bad(
                "set both access_key_id and secret_access_key, or neither (to use the AWS \
                 credentials chain)"
                    .into(),
            ));
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Err(bad(
                "session_token goes with access_key_id and secret_access_key".into(),
            ));
        }
        for (name, ms) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("attempt_timeout_ms", self.attempt_timeout_ms),
            ("operation_timeout_ms", self.operation_timeout_ms),
        ] {
            if ms == Some(0) {
                return Err(bad(format!("{name} must be at least 1 (milliseconds)")));
            }
        }
        if self.max_attempts.is_some_and(|n| !(1..=10).contains(&n)) {
            return Err(bad("max_attempts must be between 1 and 10".into()));
        }
        if let Some(ep) = &self.endpoint {
            let (scheme, host) = ep.split_once("://").unwrap_or(("", ""));
            if !matches!(scheme, "http" | "https") || host.is_empty() {
                return Err(bad(format!(
                    "endpoint {:?} is not an http(s) URL",
                    redact_urls(ep)
                )));
            }
        }
        Ok(())
    }

    /// The request bounds: connect, one attempt, one operation; the attempts.
    pub(crate) fn bounds(&self) -> (Duration, Duration, Duration, u32) {
        let ms = |v: Option<u64>, default: u64| Duration::from_millis(v.unwrap_or(default));
        (
            ms(self.connect_timeout_ms, DEFAULT_CONNECT_TIMEOUT_MS),
            ms(self.attempt_timeout_ms, DEFAULT_ATTEMPT_TIMEOUT_MS),
            ms(self.operation_timeout_ms, DEFAULT_OPERATION_TIMEOUT_MS),
            self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
        )
    }
}

impl FromStr for KmsConfig {
    type Err = Error;

    /// Same as [`KmsConfig::from_url`].
    fn from_str(s: &str) -> Result<Self> {
        KmsConfig::from_url(s)
    }
}

/// Strict percent-decoding (`+` stays `+`: key ids and ARNs have none).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The query of a `kms://` URL with the grammar of the store URLs (afk-core's
/// [`afk_core::config::Query`], whose messages name a store backend): each parameter known and
/// at most once; errors name the parameter, never its value.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: &str) -> std::result::Result<Query, String> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode(name).ok_or("a parameter name is not percent-encoded UTF-8")?;
            let value = decode(value)
                .ok_or_else(|| format!("parameter `{name}` is not percent-encoded UTF-8"))?;
            if !PARAMETERS.contains(&name.as_str()) {
                return Err(format!(
                    "unknown parameter `{name}`; known: {}",
                    PARAMETERS.join(", ")
                ));
            }
            if pairs.iter().any(|(k, _)| *k == name) {
                return Err(format!("parameter `{name}` is given twice"));
            }
            pairs.push((name, value));
        }
        Ok(Query(pairs))
    }

    fn str(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn millis(&self, name: &str) -> std::result::Result<Option<u64>, String> {
        let Some(v) = self.str(name) else {
            return Ok(None);
        };
        parse_duration(&v, Some(TimeUnit::Millis))
            .map(|d| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
            .ok_or_else(|| {
                format!("parameter `{name}` must be {DURATION_GRAMMAR}, or a bare number of milliseconds")
            })
    }

    fn number(&self, name: &str) -> std::result::Result<Option<u32>, String> {
        let Some(v) = self.str(name) else {
            return Ok(None);
        };
        let digits = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
        digits
            .then(|| v.parse().ok())
            .flatten()
            .map(Some)
            .ok_or_else(|| format!("parameter `{name}` must be {NUMBER_GRAMMAR}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use afk_core::ErrorKind;

    #[test]
    fn parses_keys_arns_and_aliases_with_every_parameter() {
        let arn = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";
        let cfg = KmsConfig::from_url(&format!(
            "kms://{arn}?region=us-east-1&endpoint=http://127.0.0.1:4566&access_key_id=AKID\
             &secret_access_key=s3cr3t&session_token=t0k&connect_timeout_ms=100\
             &attempt_timeout_ms=2s&operation_timeout_ms=9000&max_attempts=1"
        ))
        .expect("parse");
        assert_eq!(cfg.key_id, arn);
        assert_eq!(cfg.endpoint.as_deref(), Some("http://127.0.0.1:4566"));
        assert_eq!(
            (
                cfg.connect_timeout_ms,
                cfg.attempt_timeout_ms,
                cfg.operation_timeout_ms,
                cfg.max_attempts
            ),
            (Some(100), Some(2000), Some(9000), Some(1))
        );
        assert_eq!(
            cfg.secret_access_key.as_ref().map(Secret::expose),
            Some("s3cr3t")
        );
        let alias = KmsConfig::from_url("KMS://alias%2Fafk-seal").expect("alias");
        assert_eq!(alias.key_id, "alias/afk-seal");
        assert_eq!(
            alias,
            KmsConfig::from_url("kms://alias/afk-seal").expect("plain")
        );
    }

    #[test]
    fn bad_urls_are_invalid_config_and_never_show_a_secret() {
        for url in [
            "kms://?secret_access_key=s3cr3t&access_key_id=a",
            "s3://k?secret_access_key=s3cr3t",
            "kms://k?secret_access_key=s3cr3t",
            "kms://k?secret_access_key=s3cr3t&access_key_id=a&bogus=1",
            "kms://k?secret_access_key=s3cr3t&access_key_id=a&max_attempts=s3cr3t",
            "kms://k?secret_access_key=s3cr3t&access_key_id=a&max_attempts=11",
            "kms://k?secret_access_key=s3cr3t&access_key_id=a&attempt_timeout_ms=0",
            "kms://k?secret_access_key=s3cr3t&access_key_id=a&endpoint=ftp://x",
            "kms://k%zz?secret_access_key=s3cr3t&access_key_id=a",
            "kms://k?region=a&region=b&access_key_id=a&secret_access_key=s3cr3t",
        ] {
            let e = KmsConfig::from_url(url).expect_err(url);
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(!e.to_string().contains("s3cr3t"), "{e}");
        }
        // Each case above fails for its own reason: the same URL without it parses.
        KmsConfig::from_url("kms://k?region=a&access_key_id=a&secret_access_key=s3cr3t")
            .expect("valid");
        let cfg = KmsConfig::from_url("kms://k?access_key_id=AKIDXYZ&secret_access_key=s3cr3t")
            .expect("parse");
        let shown = format!("{cfg:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("AKIDXYZ"),
            "{shown}"
        );
    }
}
