//! [`KmsKeys`]: key-encryption keys held by AWS KMS (or a KMS-compatible service). The data
//! keys are wrapped by KMS `Encrypt` and unwrapped by `Decrypt`; the key-encryption key never
//! leaves the service.
//!
//! A wrapped data key:
//!
//! ```text
//! "afk-kms\x01"  KMS key ARN length (2 bytes, big-endian)  KMS key ARN  KMS ciphertext blob
//! ```
//!
//! The ARN names the KMS key that wrapped it (`Decrypt` is asked to use exactly that key), so
//! a new active key leaves data keys wrapped by older ones readable for as long as KMS lets
//! these credentials decrypt with them. The encryption context (KMS's associated data) names
//! the thread and the data key's id: a wrapped key copied to another thread or relabelled does
//! not unwrap (`Corrupt`).

mod config;
mod error;

use std::collections::HashMap;

use afk_core::{Error, ErrorKind, Result, ThreadId};
use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::Credentials;
use aws_sdk_kms::Client;
use aws_sdk_kms::config::Region;
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::{KeySpec, KeyState, KeyUsageType};

pub use config::{
    DEFAULT_ATTEMPT_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT_MS, KmsConfig, PARAMETERS, SCHEME,
};

use crate::format::Key;
use crate::keys::KeySource;

/// The first bytes of a data key wrapped by KMS.
const MAGIC: &[u8; 8] = b"afk-kms\x01";

/// Key-encryption keys in AWS KMS: one active KMS key wraps new data keys; data keys wrapped
/// by other KMS keys unwrap with the key each names (see the module docs of the format). Every
/// request is bounded by the configured timeouts and attempts: a service that cannot be
/// reached, throttles or fails answers `Unavailable`, and nothing is sealed or opened without
/// it. A KMS key that is missing, disabled, pending deletion or not accessible to these
/// credentials is `InvalidConfig` naming it.
#[derive(Clone)]
pub struct KmsKeys {
    client: Client,
    /// The ARN of the active key.
    active: String,
}

impl std::fmt::Debug for KmsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsKeys")
            .field("active", &self.active)
            .finish_non_exhaustive()
    }
}

impl KmsKeys {
    /// Connect as `cfg` says and check the active key with `DescribeKey`: it must exist, be
    /// enabled, and be a symmetric encryption key (`InvalidConfig` naming it otherwise;
    /// `Unavailable` when KMS cannot be reached). Needs `kms:DescribeKey`, `kms:Encrypt` and
    /// `kms:Decrypt` on the active key, and `kms:Decrypt` on the keys it replaced.
    pub async fn connect(cfg: KmsConfig) -> Result<KmsKeys> {
        cfg.validate()?;
        let client = client(&cfg).await?;
        let described = client
            .describe_key()
            .key_id(&cfg.key_id)
            .send()
            .await
            .map_err(|e| error::classify(e, "DescribeKey", &cfg.key_id))?;
        let meta = described.key_metadata().ok_or_else(|| {
            Error::unexpected(format!(
                "KMS DescribeKey of {} gave no metadata",
                cfg.key_id
            ))
        })?;
        let bad = |why: String| {
            Error::invalid_config(format!(
                "KMS key {} ({}) {why}: it cannot wrap data keys",
                cfg.key_id,
                meta.arn().unwrap_or("no ARN")
            ))
        };
        match meta.key_state() {
            Some(KeyState::Enabled) => {}
            state => {
                return Err(bad(format!(
                    "is {}",
                    state.map_or("in no state", |s| s.as_str())
                )));
            }
        }
        // Absent fields are KMS's defaults (ENCRYPT_DECRYPT, SYMMETRIC_DEFAULT).
        if meta
            .key_usage()
            .is_some_and(|u| *u != KeyUsageType::EncryptDecrypt)
            || meta
                .key_spec()
                .is_some_and(|s| *s != KeySpec::SymmetricDefault)
        {
            return Err(bad("is not a symmetric ENCRYPT_DECRYPT key".into()));
        }
        let active = meta.arn().unwrap_or(meta.key_id()).to_owned();
        tracing::info!(key = %active, "KMS key source connected");
        Ok(KmsKeys { client, active })
    }

    /// [`KmsKeys::connect`] with the configuration of a `kms://` URL ([`KmsConfig`]).
    pub async fn from_url(url: &str) -> Result<KmsKeys> {
        KmsKeys::connect(KmsConfig::from_url(url)?).await
    }
}

/// The SDK client for `cfg`, with its request bounds. `InvalidConfig` when no region is
/// configured anywhere (every request would fail, as an outage rather than as the
/// configuration problem it is).
async fn client(cfg: &KmsConfig) -> Result<Client> {
    let (connect, attempt, operation, attempts) = cfg.bounds();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(connect)
                .operation_attempt_timeout(attempt)
                .operation_timeout(operation)
                .build(),
        )
        .retry_config(RetryConfig::standard().with_max_attempts(attempts));
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
            "afk-kms-config",
        ));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(Error::invalid_config(format!(
            "no AWS region for KMS key {}: add region=<name> to the kms:// URL, or set AWS_REGION",
            cfg.key_id
        )));
    }
    Ok(Client::new(&sdk))
}

/// The encryption context of data key `dek_id` of `thread`.
fn context(thread: &ThreadId, dek_id: &str) -> HashMap<String, String> {
    HashMap::from([
        ("afk-seal".to_owned(), "data-key/1".to_owned()),
        ("thread".to_owned(), thread.to_string()),
        ("data-key".to_owned(), dek_id.to_owned()),
    ])
}

/// A wrapped data key taken apart: the ARN of the KMS key and the ciphertext blob.
/// `Corrupt` for one cut short; `InvalidConfig` for a data key wrapped by another source.
fn parse<'a>(thread: &ThreadId, dek_id: &str, wrapped: &'a [u8]) -> Result<(&'a str, &'a [u8])> {
    let bad = |why: &str| {
        Error::corrupt_record(
            format!("dek:{dek_id}"),
            format!("data key {dek_id} of thread {thread}: {why}"),
        )
    };
    let Some(rest) = wrapped.strip_prefix(MAGIC) else {
        if let Ok(p) = crate::format::parse(wrapped, &format!("dek:{dek_id}")) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "data key {dek_id} of thread {thread} is wrapped by key {} from the \
                     configuration (AFK_SEAL_KEYS), not by KMS: open it with that key source",
                    p.key_id
                ),
            ));
        }
        return Err(bad("the wrapped key is not from KMS"));
    };
    let (len, rest) = rest
        .split_first_chunk::<2>()
        .ok_or_else(|| bad("the wrapped key is cut short"))?;
    let len = usize::from(u16::from_be_bytes(*len));
    if rest.len() <= len {
        return Err(bad("the wrapped key is cut short"));
    }
    let (arn, blob) = rest.split_at(len);
    let arn = std::str::from_utf8(arn).map_err(|_| bad("the KMS key id is not UTF-8"))?;
    Ok((arn, blob))
}

#[async_trait]
impl KeySource for KmsKeys {
    /// The ARN of the active KMS key.
    fn active(&self) -> &str {
        &self.active
    }

    async fn wrap(&self, thread: &ThreadId, dek_id: &str, dek: &Key) -> Result<Vec<u8>> {
        let out = self
            .client
            .encrypt()
            .key_id(&self.active)
            .plaintext(Blob::new(dek.0.to_vec()))
            .set_encryption_context(Some(context(thread, dek_id)))
            .send()
            .await
            .map_err(|e| error::classify(e, "Encrypt", &self.active))?;
        let blob = out.ciphertext_blob().map(Blob::as_ref).unwrap_or_default();
        let arn = out.key_id().unwrap_or(&self.active);
        let len = u16::try_from(arn.len()).ok().filter(|_| !blob.is_empty());
        let Some(len) = len else {
            return Err(Error::unexpected(format!(
                "KMS Encrypt with key {arn} gave no ciphertext, or a key id over 65535 bytes"
            )));
        };
        let mut wrapped = Vec::with_capacity(MAGIC.len() + 2 + arn.len() + blob.len());
        wrapped.extend_from_slice(MAGIC);
        wrapped.extend_from_slice(&len.to_be_bytes());
        wrapped.extend_from_slice(arn.as_bytes());
        wrapped.extend_from_slice(blob);
        Ok(wrapped)
    }

    /// The ARN of the KMS key a wrapped key names (`None` for one not wrapped by KMS).
    fn wrapped_with(&self, wrapped: &[u8]) -> Option<String> {
        let anywhere = ThreadId::new("t").ok()?; // only named in errors, which are dropped
        let (arn, _) = parse(&anywhere, "d", wrapped).ok()?;
        Some(arn.to_owned())
    }

    async fn unwrap(&self, thread: &ThreadId, dek_id: &str, wrapped: &[u8]) -> Result<Key> {
        let (arn, blob) = parse(thread, dek_id, wrapped)?;
        let out = self
            .client
            .decrypt()
            .key_id(arn)
            .ciphertext_blob(Blob::new(blob))
            .set_encryption_context(Some(context(thread, dek_id)))
            .send()
            .await
            .map_err(|e| error::classify(e, "Decrypt", arn))?;
        let plain = out.plaintext().map(Blob::as_ref).unwrap_or_default();
        let bytes = <[u8; 32]>::try_from(plain).map_err(|_| {
            Error::corrupt_record(
                format!("dek:{dek_id}"),
                format!("data key {dek_id} of thread {thread} unwrapped by KMS is not 32 bytes"),
            )
        })?;
        Ok(Key::from_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> ThreadId {
        ThreadId::new(s).expect("thread id")
    }

    #[test]
    fn a_wrapped_key_names_its_kms_key_and_refuses_cuts() {
        let mut w = MAGIC.to_vec();
        w.extend_from_slice(&3u16.to_be_bytes());
        w.extend_from_slice(b"arnBLOB");
        assert_eq!(
            parse(&t("t"), "d1", &w).expect("parse"),
            ("arn", &b"BLOB"[..])
        );
        for n in 0..MAGIC.len() + 2 + 3 + 1 {
            let e = parse(&t("t"), "d1", &w[..n]).expect_err("cut");
            assert_eq!(e.kind(), ErrorKind::Corrupt, "cut at {n}: {e}");
        }
    }

    #[test]
    fn a_key_wrapped_by_configured_keys_is_named_not_sent_to_kms() {
        let k = Key::generate();
        let w = crate::format::seal(&t("t"), "dek:d1", "k1", &k, &[0; 32]).expect("seal");
        let e = parse(&t("t"), "d1", &w).expect_err("static");
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        assert!(e.to_string().contains("k1"), "{e}");
    }
}
