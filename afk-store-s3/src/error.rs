//! The one mapping from aws-sdk-s3 errors to [`afk_core::Error`].
//!
//! | S3 answer | meaning here |
//! |---|---|
//! | 412 Precondition Failed | [`Failure::Precondition`]: the store turns it into `Conflict`, or `Fenced` when the run's epoch moved |
//! | 404 `NoSuchKey` (or a bare 404 on an object) | [`Failure::Missing`] |
//! | `NoSuchBucket` | `InvalidConfig` naming the bucket |
//! | 403 | `InvalidConfig` naming the bucket (credentials or policy) |
//! | 409, 429, 500, 502, 503, 504, `SlowDown`, timeouts, dispatch and response failures | `Unavailable` (retryable) |
//! | anything else | `Unexpected` |
//!
//! A failure is *ambiguous* when the request may have been applied (timeouts, dispatch failures
//! other than a refused connection, including connection resets, unreadable responses, 5xx):
//! the store then reads the head back to learn the outcome.

use std::error::Error as StdError;

use afk_core::{Error, ErrorKind};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response as HttpResponse;

/// A failed S3 request, classified for the store's control flow.
#[derive(Debug)]
pub(crate) enum Failure {
    /// HTTP 412: an `If-None-Match` / `If-Match` condition did not hold.
    Precondition,
    /// HTTP 404 on an object (not on the bucket).
    Missing,
    /// Anything else, mapped to our error. `ambiguous`: the request may have been applied.
    Other { error: Error, ambiguous: bool },
}

impl Failure {
    /// The mapped error, for failures the caller does not handle specially.
    pub(crate) fn into_error(self, bucket: &str, op: &str) -> Error {
        match self {
            Failure::Precondition => Error::conflict(format!(
                "{op} in bucket {bucket:?}: precondition failed (412)"
            )),
            Failure::Missing => {
                Error::not_found(format!("{op} in bucket {bucket:?}: object not found"))
            }
            Failure::Other { error, .. } => error,
        }
    }
}

/// Classify and map one SDK error. `op` names the operation and `bucket` the bucket, for the
/// message. The source is kept; it carries the S3 code and request id, never credentials.
pub(crate) fn classify<E>(err: SdkError<E, HttpResponse>, bucket: &str, op: &str) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let unavailable =
        |what: &str, ambiguous: bool, err: SdkError<E, HttpResponse>| Failure::Other {
            error: Error::unavailable(format!("{op} in bucket {bucket:?}: {what}"))
                .with_source(err),
            ambiguous,
        };
    match &err {
        SdkError::ConstructionFailure(_) => Failure::Other {
            error: Error::unexpected(format!("{op}: could not build the request")).with_source(err),
            ambiguous: false,
        },
        SdkError::TimeoutError(_) => unavailable("timed out", true, err),
        SdkError::DispatchFailure(_) => {
            // A refused connection never reached the service; anything else may have, also an
            // I/O error: a connection reset after the request was sent is one too.
            let ambiguous = !refused(&err);
            unavailable("could not reach the service", ambiguous, err)
        }
        SdkError::ResponseError(_) => unavailable("unreadable response", true, err),
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            let code = s.err().code().unwrap_or("").to_owned();
            let msg = s.err().message().unwrap_or("").to_owned();
            classify_service(status, &code, &msg, bucket, op, err)
        }
        _ => unavailable("request failed", true, err),
    }
}

/// Whether the error chain holds a refused TCP connection: the request was never sent.
fn refused(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        next = e.source();
    }
    false
}

fn classify_service<E>(
    status: u16,
    code: &str,
    msg: &str,
    bucket: &str,
    op: &str,
    err: SdkError<E, HttpResponse>,
) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let mapped = |kind: ErrorKind, text: String, ambiguous: bool| Failure::Other {
        error: Error::new(kind, text).with_source(err),
        ambiguous,
    };
    match (status, code) {
        (412, _) | (_, "PreconditionFailed") => Failure::Precondition,
        (_, "NoSuchBucket") => mapped(
            ErrorKind::InvalidConfig,
            format!("bucket {bucket:?} does not exist (create it, or set create_bucket=true)"),
            false,
        ),
        (404, _) | (_, "NoSuchKey") => Failure::Missing,
        // Only a ranged GET of a value in a pack asks for a range: one past the object's end
        // means the slot naming it is wrong.
        (416, _) | (_, "InvalidRange") => mapped(
            ErrorKind::Corrupt,
            format!("{op} in bucket {bucket:?}: the byte range is past the object's end ({code})"),
            false,
        ),
        (403, _) => mapped(
            ErrorKind::InvalidConfig,
            format!(
                "{op}: access to bucket {bucket:?} denied ({code}); check the credentials and the bucket policy"
            ),
            false,
        ),
        (409 | 429 | 500 | 502 | 503 | 504, _)
        | (
            _,
            "SlowDown" | "Throttling" | "RequestTimeout" | "InternalError" | "ServiceUnavailable",
        ) => mapped(
            ErrorKind::Unavailable,
            format!("{op} in bucket {bucket:?}: service answered {status} {code} {msg}"),
            status >= 500 || status == 0,
        ),
        _ => mapped(
            ErrorKind::Unexpected,
            format!("{op} in bucket {bucket:?}: service answered {status} {code} {msg}"),
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::operation::put_object::PutObjectError;
    use aws_smithy_runtime_api::client::result::ConnectorError;

    fn dispatch(kind: std::io::ErrorKind) -> Failure {
        let io = std::io::Error::from(kind);
        let err: SdkError<PutObjectError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(io)));
        classify(err, "bkt", "PutObject")
    }

    #[test]
    fn only_a_refused_connection_is_unambiguous() {
        for (kind, want) in [
            (std::io::ErrorKind::ConnectionRefused, false),
            (std::io::ErrorKind::ConnectionReset, true),
            (std::io::ErrorKind::BrokenPipe, true),
            (std::io::ErrorKind::UnexpectedEof, true),
        ] {
            match dispatch(kind) {
                Failure::Other { error, ambiguous } => {
                    assert_eq!(ambiguous, want, "{kind:?}");
                    assert_eq!(error.kind(), ErrorKind::Unavailable);
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn mapped_errors_say_each_thing_once() {
        let timeout: SdkError<PutObjectError, HttpResponse> =
            SdkError::timeout_error(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let mut errors = vec![
            classify(timeout, "bkt", "PutObject").into_error("bkt", "PutObject"),
            dispatch(std::io::ErrorKind::ConnectionReset).into_error("bkt", "PutObject"),
            Failure::Precondition.into_error("bkt", "PutObject"),
            Failure::Missing.into_error("bkt", "GetObject"),
        ];
        // As the checkpoint writer hands a failed run's error to a second caller.
        errors.push(errors[0].clone());
        for e in errors {
            let s = e.to_string();
            assert_eq!(afk_core::repeated_phrase(&s, 12), None, "{s}");
        }
    }
}
