//! The run status stored in records (`state` of snapshots, results and terminal records).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The state of a run, as records store it (the string `"running"`, `"completed"`, …).
///
/// Serialized as that string, so records stay byte-identical to the ones AFK Python writes.
/// A label this version does not know (a newer AFK, or a hand-edited record) is kept in
/// [`RunStatus::Other`] and written back unchanged, rather than rejected: a status is
/// descriptive (the runner decides from the record's phase and payload, not from this
/// string), so refusing a record over it would turn a readable run into a `Corrupt` one and
/// lose its stored result. `Other` is never produced by the runner itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum RunStatus {
    /// In progress (every non-terminal record; also what a record without a state reads as).
    #[default]
    Running,
    /// Ended with a final answer.
    Completed,
    /// Ended early by a failure policy (`Degrade`), with the failure as final text.
    Degraded,
    /// Ended by an error (policy failure, budget, corruption).
    Failed,
    /// Cancelled for good by [`RunHandle::cancel`](crate::runner::RunHandle::cancel).
    Cancelled,
    /// Waiting out a model provider's outage: not terminal, resumable, not before the time
    /// its snapshot's [`Suspension`](super::Suspension) names (a v2 state; AFK has none).
    Suspended,
    /// A label this version does not know, kept verbatim (the empty string included).
    Other(String),
}

impl RunStatus {
    /// The label stored in records.
    pub fn as_str(&self) -> &str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Degraded => "degraded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Suspended => "suspended",
            RunStatus::Other(s) => s,
        }
    }

    /// Whether the status ends a run (`completed`, `degraded`, `failed`, `cancelled`).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Degraded | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl From<&str> for RunStatus {
    fn from(s: &str) -> Self {
        match s {
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "degraded" => RunStatus::Degraded,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "suspended" => RunStatus::Suspended,
            other => RunStatus::Other(other.to_owned()),
        }
    }
}

impl From<String> for RunStatus {
    fn from(s: String) -> Self {
        match RunStatus::from(s.as_str()) {
            RunStatus::Other(_) => RunStatus::Other(s),
            known => known,
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for RunStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for RunStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(RunStatus::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_byte_for_byte_and_unknown_ones_are_kept() {
        for label in ["running", "completed", "degraded", "failed", "cancelled"] {
            let s: RunStatus = serde_json::from_str(&format!("\"{label}\"")).unwrap_or_default();
            assert!(!matches!(s, RunStatus::Other(_)), "{label} is known");
            assert_eq!(
                serde_json::to_string(&s).ok().as_deref(),
                Some(format!("\"{label}\"").as_str())
            );
        }
        for label in ["interrupted", "", "Completed"] {
            let s: RunStatus = serde_json::from_str(&format!("\"{label}\"")).unwrap_or_default();
            assert_eq!(s, RunStatus::Other(label.to_owned()));
            assert_eq!(
                serde_json::to_string(&s).ok().as_deref(),
                Some(format!("\"{label}\"").as_str())
            );
            assert!(!s.is_terminal());
        }
        assert!(
            serde_json::from_str::<RunStatus>("3").is_err(),
            "a number is not a state"
        );
        assert!(RunStatus::Cancelled.is_terminal() && !RunStatus::Running.is_terminal());
    }
}
