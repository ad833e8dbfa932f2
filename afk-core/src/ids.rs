//! Validated identifiers: thread ids, run ids, and the logical keys a store is handed.
//!
//! Accepted alphabet for thread and run ids: ASCII letters, digits, `_`, `-` and `.`; 1 to 128
//! characters; not starting with `.` and never containing `..`. That covers AFK's ids
//! (`run_<32 hex>`, `thread_<32 hex>`) and UUIDs, and it means no id can contain a key separator
//! (`:`), a path separator (`/`), a Redis hash-tag brace (`{`, `}`), a glob (`*`), a NUL or a
//! path escape (`..`), so no id can produce another run's or thread's key.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Maximum length of a thread or run id, in bytes.
pub(crate) const MAX_ID_LEN: usize = 128;

/// Maximum length of a logical key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

fn check_id(what: &str, s: &str) -> Result<()> {
    let allowed =
        "ASCII letters, digits, '_', '-' and '.' (not leading, never '..'), 1 to 128 characters";
    if s.is_empty() {
        return Err(Error::invalid_input(format!(
            "{what} is empty; allowed: {allowed}"
        )));
    }
    if s.len() > MAX_ID_LEN {
        return Err(Error::invalid_input(format!(
            "{what} is {} bytes long; allowed: {allowed}",
            s.len()
        )));
    }
    if let Some(bad) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(Error::invalid_input(format!(
            "{what} {s:?} contains {bad:?}; allowed: {allowed}"
        )));
    }
    if s.starts_with('.') || s.contains("..") {
        return Err(Error::invalid_input(format!(
            "{what} {s:?} starts with '.' or contains '..'; allowed: {allowed}"
        )));
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        ///
        /// Cheap to clone (a shared string): the runner copies ids into every commit.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validate and wrap an id. Fails with `InvalidInput` naming the allowed alphabet.
            pub fn new(s: impl Into<String>) -> Result<Self> {
                let s = s.into();
                check_id($what, &s)?;
                Ok($name(Arc::from(s)))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                $name::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// A thread id: the namespace every key of a conversation lives in.
    ThreadId,
    "thread id"
);
id_type!(
    /// A run id: one agent run inside a thread.
    RunId,
    "run id"
);

/// Check that `key` is a logical key a store may be handed: 1 to [`MAX_KEY_LEN`] bytes of
/// printable ASCII (`!` to `~`), so stores may embed it in paths and Redis keys after their own
/// prefixing. Keys are built by [`crate::keys`]; stores call this to reject anything else with
/// `InvalidInput`.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::invalid_input(format!(
            "logical key must be 1 to {MAX_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    if let Some(b) = key.bytes().find(|b| !(b'!'..=b'~').contains(b)) {
        return Err(Error::invalid_input(format!(
            "logical key {key:?} contains byte 0x{b:02x}; only printable ASCII is allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn accepts_afk_ids() {
        assert!(RunId::new("run_0123456789abcdef0123456789abcdef").is_ok());
        assert!(ThreadId::new("thread_scenario_a").is_ok());
        assert!(RunId::new("550e8400-e29b-41d4-a716-446655440000").is_ok());
        assert!(RunId::new("a.b").is_ok());
    }

    #[test]
    fn rejects_ids_that_could_escape_their_namespace() {
        for bad in [
            "", "a:b", "a/b", "{a}", "a*", "..", "a..b", ".hidden", "a\0b", "é", "a b",
        ] {
            let err = RunId::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert!(err.message().contains("allowed"), "{}", err.message());
        }
        assert!(RunId::new("x".repeat(MAX_ID_LEN)).is_ok());
        assert!(RunId::new("x".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn serde_validates() {
        let ok: RunId = serde_json::from_str("\"run_1\"").unwrap();
        assert_eq!(ok.as_str(), "run_1");
        assert!(serde_json::from_str::<RunId>("\"a:b\"").is_err());
    }

    #[test]
    fn key_validation() {
        assert!(validate_key("checkpoint:run_1:latest").is_ok());
        assert!(validate_key("").is_err());
        assert!(validate_key("a b").is_err());
        assert!(validate_key("a\0").is_err());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
