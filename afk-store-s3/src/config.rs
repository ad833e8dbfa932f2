//! [`S3Config`]: where the store lives and how to reach it, from a URL or serde.

use std::fmt;
use std::str::FromStr;

use afk_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The URL scheme of this store: `s3://bucket/prefix?…`.
pub const SCHEME: &str = "s3";

/// A secret string: serialized as is (so a config file round-trips), never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Only for handing it to the credentials provider.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Configuration of an [`S3Store`](crate::S3Store).
///
/// Parsed from `s3://bucket/prefix?endpoint=…&region=…&force_path_style=true&access_key_id=…&secret_access_key=…&single_writer=true&create_bucket=true`
/// plus the request bounds `connect_timeout_ms`, `attempt_timeout_ms`, `operation_timeout_ms`
/// and `max_attempts` (every query parameter optional) or deserialized with serde. Without `access_key_id` and
/// `secret_access_key` the standard AWS credentials chain is used (environment, profile files,
/// web identity, container and instance metadata, `credential_process`). `Debug` never shows
/// the secret key.
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
    /// Errors: `InvalidConfig` naming the offending part. Error messages never repeat the URL,
    /// which may carry a secret.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Error::invalid_config(format!("not a valid s3:// URL: {e}")))?;
        if parsed.scheme() != SCHEME {
            return Err(Error::invalid_config(format!(
                "URL scheme is {:?}, expected \"{SCHEME}\"",
                parsed.scheme()
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Error::invalid_config(
                "put credentials in access_key_id / secret_access_key query parameters, not in the URL authority",
            ));
        }
        let bucket = parsed.host_str().unwrap_or_default();
        let mut cfg = S3Config::new(bucket);
        cfg.prefix = parsed.path().trim_matches('/').to_owned();
        for (name, value) in parsed.query_pairs() {
            let value = value.into_owned();
            match name.as_ref() {
                "endpoint" => cfg.endpoint = Some(value),
                "region" => cfg.region = Some(value),
                "force_path_style" => cfg.force_path_style = parse_bool(&name, &value)?,
                "access_key_id" => cfg.access_key_id = Some(value),
                "secret_access_key" => cfg.secret_access_key = Some(Secret(value)),
                "single_writer" => cfg.single_writer = parse_bool(&name, &value)?,
                "create_bucket" => cfg.create_bucket = parse_bool(&name, &value)?,
                "connect_timeout_ms" => cfg.connect_timeout_ms = Some(parse_num(&name, &value)?),
                "attempt_timeout_ms" => cfg.attempt_timeout_ms = Some(parse_num(&name, &value)?),
                "operation_timeout_ms" => {
                    cfg.operation_timeout_ms = Some(parse_num(&name, &value)?)
                }
                "max_attempts" => cfg.max_attempts = Some(parse_num(&name, &value)?),
                other => {
                    return Err(Error::invalid_config(format!(
                        "unknown s3:// URL parameter {other:?}; known: endpoint, region, \
                         force_path_style, access_key_id, secret_access_key, single_writer, create_bucket, \
                         connect_timeout_ms, attempt_timeout_ms, operation_timeout_ms, max_attempts"
                    )));
                }
            }
        }
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
    fn from_str(s: &str) -> Result<Self> {
        S3Config::from_url(s)
    }
}

fn parse_num<T: FromStr>(name: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| {
        Error::invalid_config(format!("parameter {name} must be a non-negative integer"))
    })
}

fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(Error::invalid_config(format!(
            "parameter {name} must be true or false"
        ))),
    }
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
    fn serde_round_trips() {
        let cfg =
            S3Config::from_url("s3://bkt/p?access_key_id=a&secret_access_key=b&region=r").unwrap();
        let json = serde_json::to_string(&cfg).unwrap();
        let back: S3Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
    }
}
