//! The one public error type of the workspace.
//!
//! Every failure is an [`Error`] with a coarse [`ErrorKind`] that tells the caller what to do
//! (retry, give up, fix the configuration), a human-readable context message, and the
//! underlying source error when there is one. Detailed, backend-specific errors stay private to
//! each crate and are mapped into this type in one place (`error.rs` of each store crate).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Boxed source error carried by [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias used throughout the workspace.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely, so that callers can decide what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The key, run or checkpoint does not exist.
    NotFound,
    /// A conditional write lost a race (the precondition no longer holds). Re-read and decide.
    Conflict,
    /// A newer claim on the run exists: this process must stop working on it.
    Fenced,
    /// The backend is unreachable, overloaded or timed out. Retryable.
    Unavailable,
    /// Stored data cannot be decoded or violates an invariant. Not retryable.
    Corrupt,
    /// The backend cannot do what was asked (capability missing).
    Unsupported,
    /// The configuration (URL, credentials, bucket, options) is wrong.
    InvalidConfig,
    /// An argument (an id, a key, a value) is not acceptable.
    InvalidInput,
    /// A tool with an at-most-once policy may or may not have run; a human must decide.
    EffectUncertain,
    /// A run budget (steps, calls, wall time, cost) was exhausted.
    BudgetExceeded,
    /// The run was cancelled or interrupted by the caller.
    Cancelled,
    /// An operation did not finish within its time bound.
    Timeout,
    /// The model client failed.
    Llm,
    /// A tool failed in a way the failure policy turned into a run failure.
    Tool,
    /// The run was started by another agent (another fingerprint) that the agent at hand
    /// does not declare compatible; nothing was run or written.
    AgentMismatch,
    /// Anything else; a bug or an unexpected backend answer.
    Unexpected,
}

impl ErrorKind {
    /// Whether an operation that failed with this kind may succeed when retried unchanged.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Timeout)
    }

    /// A short stable name (`"not_found"`, `"fenced"`, …) for logs and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::EffectUncertain => "effect_uncertain",
            ErrorKind::BudgetExceeded => "budget_exceeded",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Llm => "llm",
            ErrorKind::Tool => "tool",
            ErrorKind::AgentMismatch => "agent_mismatch",
            ErrorKind::Unexpected => "unexpected",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one public error type.
///
/// Construct with [`Error::new`] and the kind helpers ([`Error::not_found`], …); add a source
/// with [`Error::with_source`]. A checkpoint-corruption error additionally names the key it was
/// read from ([`Error::corrupt_record`]).
///
/// `Display` says each thing once: `kind: message (key …): source`, where a source that is an
/// [`Error`] itself is shown without its kind when that is the same, and without its message
/// when the text before already says it (a wrapper that restates what it wraps).
///
/// Cloning shares the source (one failure is reported to every caller waiting on the same
/// write).
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    key: Option<String>,
    retryable: Option<bool>,
    retry_after: Option<Duration>,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a context message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            key: None,
            retryable: None,
            retry_after: None,
            source: None,
        }
    }

    /// Attach the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// Override the retry decision derived from the kind (for example a `Conflict` that a
    /// backend knows is transient).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// How long the other side asked to wait before trying again (an HTTP `Retry-After`): a
    /// run suspended by this error is not resumed sooner.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// How long the other side asked to wait before a retry, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Attach the logical key the error is about.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// `CheckpointCorrupt { key, reason }`: a stored record at `key` cannot be used.
    pub fn corrupt_record(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, reason).with_key(key)
    }

    /// Shorthand constructors, one per kind.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotFound, message)
    }
    /// See [`ErrorKind::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Conflict, message)
    }
    /// See [`ErrorKind::Fenced`].
    pub fn fenced(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Fenced, message)
    }
    /// See [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }
    /// See [`ErrorKind::Corrupt`].
    pub fn corrupt(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, message)
    }
    /// See [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }
    /// See [`ErrorKind::InvalidConfig`].
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidConfig, message)
    }
    /// See [`ErrorKind::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }
    /// See [`ErrorKind::Unexpected`].
    pub fn unexpected(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unexpected, message)
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The context message (without the source chain).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The logical key this error is about, if any (always set for corrupt records).
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Whether retrying the same operation unchanged may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable.unwrap_or_else(|| self.kind.is_retryable())
    }

    /// True for checkpoint corruption (`CheckpointCorrupt`).
    pub fn is_corrupt(&self) -> bool {
        self.kind == ErrorKind::Corrupt
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(key) = &self.key {
            d.field("key", key);
        }
        if let Some(r) = self.retryable {
            d.field("retryable", &r);
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = format!("{}: {}", self.kind, self.head());
        let mut kind = self.kind;
        let mut link = self.source.as_deref();
        while let Some(source) = link {
            let Some(inner) = as_error(source) else {
                // A foreign error: its own Display says what its sources add.
                let s = source.to_string();
                if !s.is_empty() && !text.contains(&s) {
                    text.push_str(": ");
                    text.push_str(&s);
                }
                break;
            };
            let head = inner.head();
            if !head.is_empty() && !text.contains(&head) {
                text.push_str(": ");
                if inner.kind != kind {
                    text.push_str(inner.kind.as_str());
                    text.push_str(": ");
                }
                text.push_str(&head);
            }
            kind = inner.kind;
            link = inner.source.as_deref();
        }
        f.write_str(&text)
    }
}

impl Error {
    /// The message with the key, as `Display` shows one link of the chain.
    fn head(&self) -> String {
        match &self.key {
            Some(key) => format!("{} (key {key})", self.message),
            None => self.message.clone(),
        }
    }
}

/// `e` as an [`Error`], also when it is shared (`Arc<Error>`, as the writer reports one
/// failure to several callers).
fn as_error<'a>(e: &'a (dyn std::error::Error + Send + Sync + 'static)) -> Option<&'a Error> {
    e.downcast_ref::<Error>()
        .or_else(|| e.downcast_ref::<Arc<Error>>().map(|a| &**a))
}

/// The first phrase of at least `min_chars` characters that occurs twice in `text` (the two
/// occurrences not overlapping), if any: what a test of an error's `Display` looks for to check
/// that the message says each thing once.
#[cfg(feature = "test-kit")]
pub fn repeated_phrase(text: &str, min_chars: usize) -> Option<&str> {
    let mut bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    bounds.push(text.len());
    for (n, &start) in bounds.iter().enumerate() {
        let Some(&end) = bounds.get(n + min_chars.max(1)) else {
            break;
        };
        let phrase = &text[start..end];
        if text[end..].contains(phrase) {
            return Some(phrase);
        }
    }
    None
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_follows_kind_unless_overridden() {
        assert!(Error::unavailable("down").is_retryable());
        assert!(!Error::fenced("newer claim").is_retryable());
        assert!(
            !Error::unavailable("down")
                .with_retryable(false)
                .is_retryable()
        );
        assert!(Error::conflict("race").with_retryable(true).is_retryable());
    }

    #[test]
    fn display_says_a_wrapped_error_once() {
        let io = std::io::Error::other("timed out");
        let inner = Error::unavailable("redis: commit of run R failed").with_source(io);
        // What the writer did before: a copy of the message with the original as its source.
        let restated = Error::new(inner.kind(), inner.message()).with_source(inner.clone());
        assert_eq!(
            restated.to_string(),
            "unavailable: redis: commit of run R failed: timed out"
        );
        let shared = Error::new(inner.kind(), inner.message()).with_source(Arc::new(inner));
        assert_eq!(
            shared.to_string(),
            "unavailable: redis: commit of run R failed: timed out"
        );
        // A wrapper with its own words keeps them; a different kind is named.
        let llm = Error::new(ErrorKind::Llm, "LLM call failed: model down")
            .with_source(Error::new(ErrorKind::Timeout, "model down"));
        assert_eq!(llm.to_string(), "llm: LLM call failed: model down");
        let nested = Error::unavailable("checkpoint writer gave up")
            .with_source(Error::new(ErrorKind::Timeout, "no answer in 5s"));
        assert_eq!(
            nested.to_string(),
            "unavailable: checkpoint writer gave up: timeout: no answer in 5s"
        );
        for e in [restated, shared, llm, nested] {
            let s = e.to_string();
            assert_eq!(repeated_phrase(&s, 12), None, "{s}");
        }
    }

    #[test]
    fn repeated_phrase_finds_a_phrase_said_twice() {
        let twice = "unavailable: FaultStore: crashed: unavailable: FaultStore: crashed";
        assert_eq!(repeated_phrase(twice, 12), Some("unavailable:"));
        assert_eq!(
            repeated_phrase("unavailable: FaultStore: crashed", 12),
            None
        );
        assert_eq!(repeated_phrase("abcabc", 3), Some("abc"));
        assert_eq!(repeated_phrase("aaaa", 3), None);
        assert_eq!(repeated_phrase("ééé-ééé", 3), Some("ééé"));
    }

    #[test]
    fn display_names_kind_key_and_source() {
        let io = std::io::Error::other("boom");
        let e = Error::corrupt_record("checkpoint:r:latest", "payload is not an object")
            .with_source(io);
        let s = e.to_string();
        assert!(s.starts_with("corrupt: payload is not an object"), "{s}");
        assert!(s.contains("checkpoint:r:latest"), "{s}");
        assert!(s.ends_with("boom"), "{s}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
