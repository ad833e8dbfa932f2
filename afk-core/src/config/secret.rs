//! [`Secret`]: a credential that is never shown.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What [`Secret`] shows (`Debug`, `Display`) and serializes instead of its value.
pub const REDACTED: &str = "***";

/// A credential (a password, a secret access key, a session token): `Debug` and `Display`
/// show `***`, `Serialize` writes `"***"`, and only [`Secret::expose`] gives the value.
///
/// Serializing a configuration therefore gives a text that is safe to log or show, and that
/// says which credentials are set. It cannot be read back as a working configuration:
/// deserializing `"***"` fails with an error that asks for the credential itself, so a
/// configuration written out and read back never connects with the placeholder as its
/// password. A configuration file written by hand holds the value and reads as usual.
///
/// ```
/// use afk_core::config::Secret;
///
/// let s = Secret::new("hunter2");
/// assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
/// assert_eq!(serde_json::to_string(&s).unwrap(), r#""***""#);
/// assert_eq!(s.expose(), "hunter2");
/// assert!(serde_json::from_str::<Secret>(r#""***""#).is_err());
/// assert_eq!(serde_json::from_str::<Secret>(r#""hunter2""#).unwrap(), s);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a credential.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The credential itself, for handing it to the client library that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        if value == REDACTED {
            return Err(serde::de::Error::custom(
                "this credential was redacted (\"***\") when the configuration was written out; \
                 give the credential itself",
            ));
        }
        Ok(Secret(value))
    }
}
