//! The one mapping from aws-sdk-kms errors to [`afk_core::Error`].
//!
//! | KMS answer | meaning here |
//! |---|---|
//! | timeouts, dispatch and response failures, 429, 5xx, `ThrottlingException`, `KeyUnavailableException`, `DependencyTimeoutException`, `KMSInternalException`, `LimitExceededException` | `Unavailable` (retryable) |
//! | `NotFoundException`, `DisabledException`, `KMSInvalidStateException` (pending deletion), `AccessDeniedException` and 403, `InvalidKeyUsageException`, rejected credentials | `InvalidConfig` naming the KMS key |
//! | `InvalidCiphertextException`, `IncorrectKeyException` | `Corrupt`: the wrapped key was altered, or moved to another thread or data key |
//! | anything else | `Unexpected` |

use std::error::Error as StdError;

use afk_core::{Error, ErrorKind};
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_kms::config::http::HttpResponse;
use aws_sdk_kms::error::{ProvideErrorMetadata, SdkError};

/// Map one SDK error of operation `op` on the KMS key `key`. The source is kept (it carries
/// the KMS code and request id, never a key or a credential).
pub(crate) fn classify<E>(err: SdkError<E, HttpResponse>, op: &str, key: &str) -> Error
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let unavailable = |what: &str| {
        Error::unavailable(format!(
            "KMS {op} with key {key}: {what}; nothing was sealed or opened"
        ))
    };
    match &err {
        SdkError::ConstructionFailure(_) => Error::invalid_config(format!(
            "KMS {op} with key {key}: could not build the request"
        ))
        .with_source(err),
        SdkError::TimeoutError(_) => unavailable("timed out").with_source(err),
        SdkError::DispatchFailure(_) => match credentials(&err) {
            Some(
                CredentialsError::CredentialsNotLoaded(_)
                | CredentialsError::InvalidConfiguration(_),
            ) => Error::invalid_config(format!(
                "KMS {op} with key {key}: no usable AWS credentials (set access_key_id and \
                     secret_access_key in the kms:// URL, or configure the AWS environment)"
            ))
            .with_source(err),
            Some(_) => unavailable("could not load AWS credentials").with_source(err),
            None => unavailable("could not reach the service").with_source(err),
        },
        SdkError::ResponseError(_) => unavailable("unreadable response").with_source(err),
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            let code = s.err().code().unwrap_or("").to_owned();
            let msg = s.err().message().unwrap_or("").to_owned();
            let (kind, text) = service(status, &code, op, key);
            Error::new(kind, format!("{text} ({status} {code}: {msg})")).with_source(err)
        }
        _ => unavailable("request failed").with_source(err),
    }
}

/// The credentials error in `err`'s chain, if loading credentials is what failed.
fn credentials<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a CredentialsError> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(c) = e.downcast_ref::<CredentialsError>() {
            return Some(c);
        }
        next = e.source();
    }
    None
}

/// The kind and message of a KMS service error (`status`, `code`).
pub(crate) fn service(status: u16, code: &str, op: &str, key: &str) -> (ErrorKind, String) {
    use ErrorKind::{Corrupt, InvalidConfig, Unavailable, Unexpected};
    let config = |why: &str| (InvalidConfig, format!("KMS {op}: KMS key {key} {why}"));
    match code {
        "NotFoundException" => config(
            "does not exist (deleted, or in another region or account); a data key it wrapped \
             cannot be opened",
        ),
        "DisabledException" => config("is disabled; enable it to seal or open with it"),
        "KMSInvalidStateException" | "KmsInvalidStateException" => {
            config("is not usable in its state (pending deletion or import)")
        }
        "InvalidKeyUsageException" => {
            config("cannot encrypt and decrypt (use a symmetric ENCRYPT_DECRYPT key)")
        }
        "AccessDeniedException" => {
            config("is not accessible to these credentials (check the key policy and grants)")
        }
        "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "ExpiredTokenException" => config("cannot be used: KMS refused the credentials"),
        "InvalidCiphertextException" | "IncorrectKeyException" => (
            Corrupt,
            format!(
                "KMS {op}: a data key wrapped by KMS key {key} does not decrypt (altered, or \
                 moved from another thread or data key)"
            ),
        ),
        "ThrottlingException"
        | "KeyUnavailableException"
        | "DependencyTimeoutException"
        | "KMSInternalException"
        | "KmsInternalException"
        | "LimitExceededException" => (
            Unavailable,
            format!("KMS {op} with key {key}: the service is unavailable or throttling"),
        ),
        _ if status == 403 => config("is not accessible to these credentials"),
        _ if status == 429 || status >= 500 => (
            Unavailable,
            format!("KMS {op} with key {key}: the service is unavailable or throttling"),
        ),
        _ => (
            Unexpected,
            format!("KMS {op} with key {key}: unexpected answer"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kms::error::ConnectorError;
    use aws_sdk_kms::operation::decrypt::DecryptError;

    #[test]
    fn every_kms_answer_has_its_kind_and_names_the_key() {
        let key = "arn:aws:kms:r:1:key/k";
        for (status, code, want) in [
            (400, "NotFoundException", ErrorKind::InvalidConfig),
            (400, "DisabledException", ErrorKind::InvalidConfig),
            (400, "KMSInvalidStateException", ErrorKind::InvalidConfig),
            (400, "InvalidKeyUsageException", ErrorKind::InvalidConfig),
            (400, "AccessDeniedException", ErrorKind::InvalidConfig),
            (400, "UnrecognizedClientException", ErrorKind::InvalidConfig),
            (403, "", ErrorKind::InvalidConfig),
            (400, "InvalidCiphertextException", ErrorKind::Corrupt),
            (400, "IncorrectKeyException", ErrorKind::Corrupt),
            (400, "ThrottlingException", ErrorKind::Unavailable),
            (500, "KMSInternalException", ErrorKind::Unavailable),
            (500, "KeyUnavailableException", ErrorKind::Unavailable),
            (500, "DependencyTimeoutException", ErrorKind::Unavailable),
            (429, "", ErrorKind::Unavailable),
            (503, "", ErrorKind::Unavailable),
            (400, "ValidationException", ErrorKind::Unexpected),
        ] {
            let (kind, text) = service(status, code, "Decrypt", key);
            assert_eq!(kind, want, "{status} {code}");
            assert!(text.contains(key), "{text}");
        }
    }

    #[test]
    fn an_unreachable_service_is_unavailable() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
        let errors: [SdkError<DecryptError, HttpResponse>; 2] = [
            SdkError::dispatch_failure(ConnectorError::io(Box::new(refused))),
            SdkError::timeout_error(timeout),
        ];
        for err in errors {
            let e = classify(err, "Decrypt", "alias/k");
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert!(e.is_retryable() && e.to_string().contains("alias/k"), "{e}");
        }
    }

    #[test]
    fn missing_credentials_are_configuration_and_a_failing_provider_an_outage() {
        for (creds, want) in [
            (
                CredentialsError::not_loaded("none"),
                ErrorKind::InvalidConfig,
            ),
            (
                CredentialsError::provider_timed_out(std::time::Duration::from_secs(5)),
                ErrorKind::Unavailable,
            ),
            (
                CredentialsError::provider_error("IMDS answered 503"),
                ErrorKind::Unavailable,
            ),
        ] {
            let err: SdkError<DecryptError, HttpResponse> =
                SdkError::dispatch_failure(ConnectorError::other(Box::new(creds), None));
            let e = classify(err, "Decrypt", "alias/k");
            assert_eq!(e.kind(), want, "{e}");
            assert!(e.message().contains("credentials"), "{e}");
        }
    }
}
