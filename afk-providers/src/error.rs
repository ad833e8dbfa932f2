//! The one mapping from the provider layer's errors to [`afk_core::Error`]: what the runner
//! retries later (the run suspends and resumes) and what fails the model call for good.
//!
//! | what happened | kind | retryable |
//! | --- | --- | --- |
//! | HTTP 429, 408, any 5xx (Anthropic's 529 "overloaded" included) | `Unavailable` (408: `Timeout`) | yes, not before `Retry-After` |
//! | HTTP 401, 403 | `InvalidConfig` (the key or the account) | no |
//! | any other 4xx | `Llm`, with the provider's `error.message` | no |
//! | no answer in time | `Timeout` | yes |
//! | no connection, or the connection lost before the whole answer arrived | `Unavailable` | yes |
//! | a 2xx whose body is not JSON, or not the API's answer shape | `Llm` | no |
//! | no API key | `InvalidConfig` | no |

use std::time::Duration;

use afk_core::{Error, ErrorKind};
use genai::webc;

/// Map an error of the provider layer for a call to `provider`.
pub(crate) fn map(provider: &str, err: genai::Error) -> Error {
    let source = || Box::new(Source(err.to_string()));
    match &err {
        genai::Error::WebModelCall { webc_error, .. }
        | genai::Error::WebAdapterCall { webc_error, .. } => web(provider, webc_error, &err),
        genai::Error::RequiresApiKey { .. }
        | genai::Error::NoAuthResolver { .. }
        | genai::Error::NoAuthData { .. } => {
            Error::invalid_config(format!("{provider}: no API key configured"))
                .with_source(source())
        }
        // The answer arrived but is not the API's shape (no choices, a tool call that is
        // not one, …): asking again gets the same answer.
        _ => Error::new(
            ErrorKind::Llm,
            format!("{provider}: the answer could not be read"),
        )
        .with_source(source()),
    }
}

/// A failed web call: by HTTP status, or by what the transport says.
fn web(provider: &str, webc_error: &webc::Error, err: &genai::Error) -> Error {
    let source = Box::new(Source(err.to_string()));
    match webc_error {
        webc::Error::ResponseFailedStatus {
            status,
            body,
            headers,
        } => {
            let code = status.as_u16();
            let said = provider_message(body);
            let message = format!("{provider} answered HTTP {code}: {said}");
            let after = retry_after(|name| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
            let error = match code {
                429 | 500..=599 => Error::new(ErrorKind::Unavailable, message),
                408 => Error::new(ErrorKind::Timeout, message),
                401 | 403 => Error::new(ErrorKind::InvalidConfig, message),
                _ => Error::new(ErrorKind::Llm, message),
            };
            let error = match after {
                Some(after) if error.is_retryable() => error.with_retry_after(after),
                _ => error,
            };
            error.with_source(source)
        }
        webc::Error::ResponseFailedInvalidJson { .. }
        | webc::Error::ResponseFailedNotJson { .. } => Error::new(
            ErrorKind::Llm,
            format!("{provider} answered with a body that is not the API's JSON"),
        )
        .with_source(source),
        webc::Error::Reqwest(e) => {
            let (kind, what) = if e.is_timeout() {
                (ErrorKind::Timeout, "no answer in time")
            } else if e.is_builder() {
                (ErrorKind::InvalidConfig, "the request could not be built")
            } else if e.is_connect() {
                (ErrorKind::Unavailable, "could not connect")
            } else {
                (
                    ErrorKind::Unavailable,
                    "the connection failed before the whole answer arrived",
                )
            };
            Error::new(kind, format!("{provider}: {what}")).with_source(source)
        }
        _ => Error::new(
            ErrorKind::Llm,
            format!("{provider}: the answer could not be read"),
        )
        .with_source(source),
    }
}

/// The provider's own words in an error body: `error.message` (OpenAI's and Anthropic's
/// error shape), else the body itself, cut to a readable length.
fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message"))
        .and_then(|m| m.as_str());
    match message {
        Some(m) => m.to_owned(),
        None => body.chars().take(500).collect(),
    }
}

/// How long the provider asked to wait: `retry-after-ms` (OpenAI), else `retry-after` in
/// seconds. The HTTP-date form of `retry-after` is not read (neither API sends it); the
/// runner's own backoff applies then.
pub(crate) fn retry_after(header: impl Fn(&str) -> Option<String>) -> Option<Duration> {
    let secs = |v: String, scale: f64| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s / scale).ok())
    };
    header("retry-after-ms")
        .and_then(|v| secs(v, 1000.0))
        .or_else(|| header("retry-after").and_then(|v| secs(v, 1.0)))
}

/// The provider layer's error as text: its error type holds a `reqwest` error that is not
/// `Clone`, and ours shares its source between the callers waiting on it.
#[derive(Debug)]
struct Source(String);

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Source {}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(pairs: &[(&str, &str)]) -> Option<Duration> {
        retry_after(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn retry_after_reads_milliseconds_then_seconds_and_ignores_junk() {
        assert_eq!(after(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(
            after(&[("retry-after-ms", "1500"), ("retry-after", "7")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            after(&[("retry-after", "0.5")]),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            after(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            None
        );
        assert_eq!(after(&[("retry-after", "-3")]), None);
        assert_eq!(after(&[("retry-after", "1e400")]), None);
        assert_eq!(after(&[]), None);
    }

    #[test]
    fn the_provider_message_is_taken_from_the_error_body() {
        let openai = r#"{"error": {"message": "bad model", "type": "invalid_request_error"}}"#;
        assert_eq!(provider_message(openai), "bad model");
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
        assert_eq!(provider_message(anthropic), "max_tokens: required");
        assert_eq!(provider_message("<html>oops</html>"), "<html>oops</html>");
    }
}
