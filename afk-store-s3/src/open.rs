//! Opening a store: the SDK client, the bucket check and the conditional-write probe.

use std::time::Duration;

use afk_core::{Error, Result};
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::Credentials;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::Region;

use crate::config::{
    DEFAULT_ATTEMPT_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT_MS, S3Config,
};
use crate::error::{Failure, classify};
use crate::head::{Layout, new_nonce};
use crate::ops::{Cond, Ops};

/// Build the SDK client for `cfg`, with its request bounds (see [`S3Config`]).
///
/// Errors: `InvalidConfig` when no region is configured (neither in `cfg` nor in the AWS
/// environment): every request would fail, and as an outage (`Unavailable`, retryable) rather
/// than as the configuration problem it is.
pub(crate) async fn client(cfg: &S3Config) -> Result<Client> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts(cfg, Duration::MAX, Duration::MAX))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(cfg.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS)),
        );
    if let Some(region) = &cfg.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &cfg.endpoint {
        loader = loader.endpoint_url(endpoint.clone());
    }
    if let (Some(id), Some(secret)) = (&cfg.access_key_id, &cfg.secret_access_key) {
        loader = loader.credentials_provider(Credentials::new(
            id.clone(),
            secret.expose().to_owned(),
            cfg.session_token.as_ref().map(|t| t.expose().to_owned()),
            None,
            "afk-s3-config",
        ));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(Error::invalid_config(format!(
            "no AWS region for bucket {:?}: add region=<name> to the s3:// URL (or \
             S3Config::with_region), or set AWS_REGION; S3-compatible servers such as MinIO \
             accept us-east-1",
            cfg.bucket
        )));
    }
    let conf = aws_sdk_s3::config::Builder::from(&sdk)
        .force_path_style(cfg.force_path_style)
        .build();
    Ok(Client::from_conf(conf))
}

/// The request bounds of `cfg` (its values or the defaults), each attempt and each operation
/// at most `attempt_cap` and `operation_cap`.
fn timeouts(cfg: &S3Config, attempt_cap: Duration, operation_cap: Duration) -> TimeoutConfig {
    let ms = |v: Option<u64>, default: u64| Duration::from_millis(v.unwrap_or(default));
    TimeoutConfig::builder()
        .connect_timeout(ms(cfg.connect_timeout_ms, DEFAULT_CONNECT_TIMEOUT_MS))
        .operation_attempt_timeout(
            ms(cfg.attempt_timeout_ms, DEFAULT_ATTEMPT_TIMEOUT_MS).min(attempt_cap),
        )
        .operation_timeout(
            ms(cfg.operation_timeout_ms, DEFAULT_OPERATION_TIMEOUT_MS).min(operation_cap),
        )
        .build()
}

/// Longest one attempt of a probe PUT may take (at most the configured attempt timeout).
const PROBE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a probe PUT may take with its retries (at most the configured operation timeout).
const PROBE_OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the service honors conditional writes, found by writing a probe object: a second
/// `If-None-Match: *` PUT and an `If-Match` PUT with a wrong ETag must both answer 412.
/// Creates the bucket first when it is missing and `create_bucket` is set.
///
/// Each probe PUT is bounded by [`PROBE_ATTEMPT_TIMEOUT`] and [`PROBE_OPERATION_TIMEOUT`]
/// (or the configured timeouts when shorter): an endpoint that accepts connections and never
/// answers fails the open in seconds, not after the minutes a large upload may be given. An
/// answer no S3-compatible service gives to these requests (an HTTP server's 501, say) is
/// `InvalidConfig` naming the endpoint.
pub(crate) async fn probe(ops: &Ops, layout: &Layout, cfg: &S3Config) -> Result<bool> {
    let key = layout.probe(&new_nonce());
    let timeouts = timeouts(cfg, PROBE_ATTEMPT_TIMEOUT, PROBE_OPERATION_TIMEOUT);
    let put = |body: &'static [u8], cond: Cond| {
        ops.put_with(&key, body.to_vec(), cond, Some(timeouts.clone()))
    };
    let not_s3 = |e: Error| not_s3(e, cfg);
    let first = put(b"afk probe", Cond::Create).await;
    match first {
        Ok(_) => {}
        Err(Failure::Other { error, .. })
            if cfg.create_bucket && error.message().contains("does not exist") =>
        {
            create_bucket(ops).await?;
            put(b"afk probe", Cond::Create)
                .await
                .map_err(|f| not_s3(f.into_error(&ops.bucket, "PutObject (probe)")))?;
        }
        Err(f) => return Err(not_s3(f.into_error(&ops.bucket, "PutObject (probe)"))),
    }
    let create_again = put(b"afk probe 2", Cond::Create).await;
    let wrong_match = put(b"afk probe 3", Cond::Match("\"afk-no-such-etag\"".into())).await;
    let honored = matches!(create_again, Err(Failure::Precondition))
        && matches!(wrong_match, Err(Failure::Precondition));
    for answer in [create_again, wrong_match] {
        if let Err(Failure::Other { error, .. }) = answer {
            return Err(not_s3(error));
        }
    }
    ops.delete_one(&key).await?;
    Ok(honored)
}

async fn create_bucket(ops: &Ops) -> Result<()> {
    match ops.client.create_bucket().bucket(&ops.bucket).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let code = aws_sdk_s3::error::ProvideErrorMetadata::code(&e).map(str::to_owned);
            if matches!(
                code.as_deref(),
                Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
            ) {
                return Ok(());
            }
            Err(classify(e, &ops.bucket, "CreateBucket").into_error(&ops.bucket, "CreateBucket"))
        }
    }
}

/// A probe answer of kind `Unexpected` (one no S3-compatible service gives to these requests)
/// as `InvalidConfig`: the endpoint is not such a service, or not one that takes conditional
/// writes. Other kinds (`Unavailable`, `InvalidConfig`, …) stand as they are.
fn not_s3(e: Error, cfg: &S3Config) -> Error {
    if e.kind() != afk_core::ErrorKind::Unexpected {
        return e;
    }
    let endpoint = cfg
        .endpoint
        .as_deref()
        .map_or_else(|| "AWS S3".to_owned(), afk_core::redact::redact_urls);
    Error::invalid_config(format!(
        "{}: the endpoint ({endpoint}) did not answer the open probe as an S3-compatible service \
         that takes conditional writes (If-None-Match, If-Match) does; check the endpoint URL",
        e.message()
    ))
    .with_source(e)
}

/// The error for a service that ignores conditional writes, when `single_writer` is off.
pub(crate) fn not_honored(bucket: &str) -> Error {
    Error::invalid_config(format!(
        "the service behind bucket {bucket:?} ignores conditional writes (If-None-Match / If-Match), \
         so runs cannot be fenced; use a service that honors them, or set single_writer=true if exactly \
         one process ever writes to this prefix"
    ))
}
