//! [`S3Config`]: where the store lives and how to reach it, from a URL or serde.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use afk_core::config::Secret;
use afk_core::config::{Backend, StoreConfig, StoreUrl};
use afk_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::S3Store;

/// The URL scheme of this store: `s3://bucket/prefix?…` (from [`Backend::schemes`], the one
/// scheme table).
pub const SCHEME: &str = Backend::S3.schemes()[0];

/// The query parameters of a `s3://` URL, in the order the unknown-parameter message lists them.
pub const PARAMETERS: &[&str] = &[
    "endpoint",
    "region",
    "force_path_style",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "single_writer",
    "create_bucket",
    "connect_timeout_ms",
    "attempt_timeout_ms",
    "operation_timeout_ms",
    "max_attempts",
];

/// Configuration of an [`S3Store`](crate::S3Store).
///
/// Parsed from `s3://bucket/prefix?endpoint=…&region=…&force_path_style=true&access_key_id=…&secret_access_key=…&session_token=…&single_writer=true&create_bucket=true`
/// plus the request bounds `connect_timeout_ms`, `attempt_timeout_ms`, `operation_timeout_ms`
/// (durations; a bare number is milliseconds) and `max_attempts` (every query parameter
/// optional; the grammar of [`afk_core::config::Query`]) or deserialized with serde. Without
/// `access_key_id` and `secret_access_key` the standard AWS credentials chain is used
/// (environment, profile files, web identity, container and instance metadata,
/// `credential_process`). The secret key and session token are [`Secret`]s: `Debug`,
/// `Serialize` and error messages show `***` (a serialized configuration cannot be read back
/// with them; see [`Secret`]); `Debug` hides the access key id too.
///
/// Built with [`S3Config::new`] (or parsed), then adjusted with the `with_*` setters (or field
/// by field); the struct is `#[non_exhaustive]`, so a new option is not a breaking change:
///
/// ```
/// use afk_store_s3::S3Config;
///
/// let built = S3Config::new("agents")
///     .with_prefix("prod")
///     .with_endpoint("http://127.0.0.1:9100")
///     .with_region("us-east-1")
///     .with_force_path_style(true)
///     .with_credentials("test", "hidden")
///     .with_max_attempts(5);
/// let parsed: S3Config = "s3://agents/prod?endpoint=http://127.0.0.1:9100&region=us-east-1\
///                         &force_path_style=true&access_key_id=test&secret_access_key=hidden\
///                         &max_attempts=5"
///     .parse()?;
/// assert_eq!(built, parsed);
/// // Opening contacts the service: `let store = afk_store_s3::S3Store::open(built).await?;`
/// # Ok::<(), afk_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct S3Config {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix inside the bucket (no leading or trailing `/`); empty for the bucket root.
    #[serde(default)]
    pub prefix: String,
    /// Endpoint URL for S3-compatible services (`http://127.0.0.1:9000`); `None` for AWS.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Region; `None` takes it from the AWS environment or profile.
    #[serde(default)]
    pub region: Option<String>,
    /// Address buckets as `endpoint/bucket` instead of `bucket.endpoint` (most self-hosted
    /// services need this).
    #[serde(default)]
    pub force_path_style: bool,
    /// Static access key id; set together with `secret_access_key`.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Static secret access key; set together with `access_key_id`.
    #[serde(default)]
    pub secret_access_key: Option<Secret>,
    /// Session token of temporary credentials (AWS STS), with `access_key_id` and
    /// `secret_access_key`.
    #[serde(default)]
    pub session_token: Option<Secret>,
    /// Allow opening a service that does not honor conditional writes. Only safe when exactly
    /// one process ever writes to this prefix: fencing and head swaps are then not atomic, so
    /// writers in different processes are not fenced against each other (see the crate docs).
    #[serde(default)]
    pub single_writer: bool,
    /// Create the bucket at open time if it does not exist (for development servers).
    #[serde(default)]
    pub create_bucket: bool,
    /// Connect timeout of one request, in milliseconds; `None` for the default
    /// ([`DEFAULT_CONNECT_TIMEOUT_MS`]).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Timeout of one attempt of a request (connect, send, whole response), in milliseconds;
    /// `None` for the default ([`DEFAULT_ATTEMPT_TIMEOUT_MS`]). A value must upload within one
    /// attempt. An attempt that times out after its request was sent is ambiguous: the store
    /// resolves it by reading the run's head back.
    #[serde(default)]
    pub attempt_timeout_ms: Option<u64>,
    /// Timeout of one request with all its attempts, in milliseconds; `None` for the default
    /// ([`DEFAULT_OPERATION_TIMEOUT_MS`]).
    #[serde(default)]
    pub operation_timeout_ms: Option<u64>,
    /// Attempts per request by the SDK's standard retry strategy (throttling, 5xx, I/O errors,
    /// timeouts), 1 to 10; `None` for the default ([`DEFAULT_MAX_ATTEMPTS`]).
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

/// Default of [`S3Config::connect_timeout_ms`]: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default of [`S3Config::attempt_timeout_ms`]: 60 s.
pub const DEFAULT_ATTEMPT_TIMEOUT_MS: u64 = 60_000;
/// Default of [`S3Config::operation_timeout_ms`]: 120 s.
pub const DEFAULT_OPERATION_TIMEOUT_MS: u64 = 120_000;
/// Default of [`S3Config::max_attempts`]: 3.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("force_path_style", &self.force_path_style)
            .field("access_key_id", &self.access_key_id.as_ref().map(|_| "***"))
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .field("single_writer", &self.single_writer)
            .field("create_bucket", &self.create_bucket)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("attempt_timeout_ms", &self.attempt_timeout_ms)
            .field("operation_timeout_ms", &self.operation_timeout_ms)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl S3Config {
    /// A configuration for `bucket` with every option at its default.
    pub fn new(bucket: impl Into<String>) -> Self {
        S3Config {
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            force_path_style: false,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            single_writer: false,
            create_bucket: false,
            connect_timeout_ms: None,
            attempt_timeout_ms: None,
            operation_timeout_ms: None,
            max_attempts: None,
        }
    }

    /// Parse an `s3://bucket/prefix?…` URL (see the type docs for the parameters).
    ///
    /// Errors: `InvalidConfig` naming the offending part. Error messages show the URL only
    /// with its secrets hidden.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = StoreUrl::parse(url, Backend::S3, PARAMETERS)?;
        if url.has_credentials() {
            return Err(url.invalid(
                "put credentials in access_key_id / secret_access_key query parameters, not in the URL authority",
            ));
        }
        if url.authority().is_empty() {
            return Err(url.missing("bucket"));
        }
        let mut cfg = S3Config::new(url.authority());
        cfg.prefix = url.path().trim_matches('/').to_owned();
        let q = url.query();
        cfg.endpoint = q.str("endpoint").map(str::to_owned);
        cfg.region = q.str("region").map(str::to_owned);
        cfg.access_key_id = q.str("access_key_id").map(str::to_owned);
        cfg.secret_access_key = q.secret("secret_access_key");
        cfg.session_token = q.secret("session_token");
        cfg.force_path_style = q.bool("force_path_style")?.unwrap_or(false);
        cfg.single_writer = q.bool("single_writer")?.unwrap_or(false);
        cfg.create_bucket = q.bool("create_bucket")?.unwrap_or(false);
        cfg.connect_timeout_ms = q.duration("connect_timeout_ms")?.map(millis);
        cfg.attempt_timeout_ms = q.duration("attempt_timeout_ms")?.map(millis);
        cfg.operation_timeout_ms = q.duration("operation_timeout_ms")?.map(millis);
        cfg.max_attempts = q.number("max_attempts")?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check the configuration without contacting the service.
    ///
    /// Errors: `InvalidConfig` for an empty or malformed bucket name, a prefix with empty
    /// segments, only one of the two static credentials, a zero timeout, or `max_attempts`
    /// outside 1 to 10.
    pub fn validate(&self) -> Result<()> {
        let b = &self.bucket;
        let bucket_ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
            && !b.starts_with(['-', '.'])
            && !b.ends_with(['-', '.']);
        if !bucket_ok {
            return Err(Error::invalid_config(format!(
                "bucket name {b:?} is not a valid S3 bucket name (3 to 63 lowercase letters, digits, '-' or '.')"
            )));
        }
        if self.prefix.starts_with('/') || self.prefix.ends_with('/') || self.prefix.contains("//")
        {
            return Err(Error::invalid_config(format!(
                "prefix {:?} must not start or end with '/' or contain empty segments",
                self.prefix
            )));
        }
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err(Error::invalid_config(
                "set both access_key_id and secret_access_key, or neither (to use the AWS credentials chain)",
            ));
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Err(Error::invalid_config(
                "session_token goes with access_key_id and secret_access_key",
            ));
        }
        for (name, ms) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("attempt_timeout_ms", self.attempt_timeout_ms),
            ("operation_timeout_ms", self.operation_timeout_ms),
        ] {
            if ms == Some(0) {
                return Err(Error::invalid_config(format!(
                    "{name} must be at least 1 (milliseconds)"
                )));
            }
        }
        if self.max_attempts.is_some_and(|n| !(1..=10).contains(&n)) {
            return Err(Error::invalid_config(
                "max_attempts must be between 1 and 10",
            ));
        }
        if let Some(ep) = &self.endpoint {
            let ok = url::Url::parse(ep).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !ok {
                return Err(Error::invalid_config(format!(
                    "endpoint {ep:?} is not an http(s) URL"
                )));
            }
        }
        Ok(())
    }
}

impl FromStr for S3Config {
    type Err = Error;

    /// Same as [`S3Config::from_url`].
    fn from_str(s: &str) -> Result<Self> {
        S3Config::from_url(s)
    }
}

#[async_trait::async_trait]
impl StoreConfig for S3Config {
    type Store = S3Store;
    const BACKEND: Backend = Backend::S3;

    fn validate(&self) -> Result<()> {
        S3Config::validate(self)
    }

    /// [`S3Store::open`].
    async fn open(self) -> Result<S3Store> {
        S3Store::open(self).await
    }
}

/// A duration of the URL grammar as whole milliseconds (it has no finer unit).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use afk_core::ErrorKind;

    #[test]
    fn parses_a_full_url() {
        let cfg = S3Config::from_url(
            "s3://my-bucket/a/b?endpoint=http://127.0.0.1:9100&region=us-east-1&force_path_style=true\
             &access_key_id=AKID&secret_access_key=s3cr3t&single_writer=true",
        )
        .unwrap();
        assert_eq!(cfg.bucket, "my-bucket");
        assert_eq!(cfg.prefix, "a/b");
        assert_eq!(cfg.endpoint.as_deref(), Some("http://127.0.0.1:9100"));
        assert_eq!(cfg.region.as_deref(), Some("us-east-1"));
        assert!(cfg.force_path_style && cfg.single_writer && !cfg.create_bucket);
        assert_eq!(
            cfg.secret_access_key.as_ref().map(Secret::expose),
            Some("s3cr3t")
        );
    }

    #[test]
    fn parses_request_bounds() {
        let cfg = S3Config::from_url(
            "s3://bkt?connect_timeout_ms=100&attempt_timeout_ms=2000&operation_timeout_ms=9000&max_attempts=1",
        )
        .unwrap();
        assert_eq!(cfg.connect_timeout_ms, Some(100));
        assert_eq!(cfg.attempt_timeout_ms, Some(2000));
        assert_eq!(cfg.operation_timeout_ms, Some(9000));
        assert_eq!(cfg.max_attempts, Some(1));
        for bad in [
            "s3://bkt?attempt_timeout_ms=0",
            "s3://bkt?attempt_timeout_ms=-1",
            "s3://bkt?max_attempts=0",
            "s3://bkt?max_attempts=11",
        ] {
            let err = S3Config::from_url(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}");
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let cfg =
            S3Config::from_url("s3://bkt?access_key_id=AKIDXYZ&secret_access_key=s3cr3t").unwrap();
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("s3cr3t") && !dbg.contains("AKIDXYZ"), "{dbg}");
    }

    #[test]
    fn errors_never_echo_the_secret() {
        for url in [
            "s3://bkt?secret_access_key=s3cr3t",
            "s3://bkt?secret_access_key=s3cr3t&bogus=1",
            "s3://BAD_bucket?secret_access_key=s3cr3t&access_key_id=a",
            "s3://bkt?secret_access_key=s3cr3t&single_writer=s3cr3t",
            "http://bkt?secret_access_key=s3cr3t",
        ] {
            let err = S3Config::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}");
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
        }
    }

    #[test]
    fn serde_round_trips_without_credentials_and_never_writes_them() {
        let cfg = S3Config::from_url("s3://bkt/p?region=r&max_attempts=2").unwrap();
        let json = serde_json::to_string(&cfg).unwrap();
        let back: S3Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
        let cfg = S3Config::from_url(
            "s3://bkt/p?access_key_id=AKIDXYZ&secret_access_key=s3cr3t&session_token=t0k3n",
        )
        .unwrap();
        assert_eq!(
            cfg.session_token.as_ref().map(Secret::expose),
            Some("t0k3n")
        );
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(
            !json.contains("s3cr3t") && !json.contains("t0k3n"),
            "{json}"
        );
        assert!(serde_json::from_str::<S3Config>(&json).is_err());
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("s3cr3t") && !dbg.contains("t0k3n"), "{dbg}");
        let e = S3Config::from_url("s3://bkt?session_token=t0k3n").unwrap_err();
        assert!(e.message().contains("session_token"), "{e}");
    }
}
