//! The entry a run keeps in the store's index of runs that need attention
//! ([`Attention::Open`](crate::store::Attention::Open)): where the run stands and who works on
//! it, so that a recovery worker decides from the index alone which runs to take over.
//!
//! An AFK Python store has no such index: it is this crate's addition, kept beside the
//! records, never in them.

use serde::{Deserialize, Serialize};

/// Where a run that needs attention stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MarkState {
    /// A runner works on it, under the lease the entry names; once the lease has expired the
    /// runner is presumed dead and any worker may take the run over.
    Running,
    /// Stopped without an ending, nobody on it (a store outage, an interrupt, a child run that
    /// stopped): a worker resumes it.
    Stopped,
    /// Paused for a human's approval: nobody resumes it until the decision is recorded.
    Paused,
    /// Stopped on a tool call whose effect is uncertain: nobody resumes it until a human
    /// settles the call.
    Uncertain,
    /// A human answered (a decision or a settlement is recorded): a worker continues it.
    Ready,
    /// Suspended after a model outage: a worker resumes it from `not_before_ms` on.
    Suspended,
    /// A resume was refused because its agent is not the one that started the run (a
    /// different fingerprint, not declared compatible): it waits for a human to deploy that
    /// agent, or one declaring its version compatible. The entry names the run's agent and the
    /// fingerprint refused ([`RunMark::refused`]); a worker tries again only with an agent of
    /// another fingerprint.
    Mismatch,
}

impl MarkState {
    /// The state as its entry spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkState::Running => "running",
            MarkState::Stopped => "stopped",
            MarkState::Paused => "paused",
            MarkState::Uncertain => "uncertain",
            MarkState::Ready => "ready",
            MarkState::Suspended => "suspended",
            MarkState::Mismatch => "mismatch",
        }
    }

    /// Whether the run waits for a human (and no worker may resume it before one answers).
    pub fn waits_for_human(self) -> bool {
        matches!(
            self,
            MarkState::Paused | MarkState::Uncertain | MarkState::Mismatch
        )
    }
}

impl std::fmt::Display for MarkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's entry in the index of runs that need attention, as JSON:
/// `{"state": "running", "owner": "w1", "lease_until_ms": …, "not_before_ms": …, "agent": …,
/// "version": …, "depth": …, "updated_ms": …}`.
///
/// Times are milliseconds since the Unix epoch by the clock of the process that wrote the
/// entry (see [`RunnerConfig::lease`](crate::runner::RunnerConfig::lease) for the skew a
/// reader allows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMark {
    /// Where the run stands.
    pub state: MarkState,
    /// The runner that holds the run ([`RunnerConfig::owner`](crate::runner::RunnerConfig::owner)),
    /// if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Until when the owner's lease holds; 0 when nobody holds the run.
    #[serde(default)]
    pub lease_until_ms: u64,
    /// A suspended run is not resumed before this time; 0 otherwise.
    #[serde(default)]
    pub not_before_ms: u64,
    /// The name of the agent that runs it.
    #[serde(default)]
    pub agent: String,
    /// That agent's declared version, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How deep the run is nested: 0 for a top-level run, 1 for a subagent's child run, and
    /// so on. A parent resumes its children, so a worker leaves runs of depth above 0 alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// The parent run of a child run: a human's answer to the child makes the parent ready
    /// too, since the parent is what a worker resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// When the entry was written.
    #[serde(default)]
    pub updated_ms: u64,
    /// The claim epoch the entry was written under: a worker takes the run over only if it
    /// is still the run's epoch when it claims.
    #[serde(default)]
    pub epoch: u64,
    /// In a `mismatch` entry: the fingerprint of the agent whose resume was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Fields of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RunMark {
    /// An entry in `state`, every other field empty.
    pub fn new(state: MarkState) -> RunMark {
        RunMark {
            state,
            owner: None,
            lease_until_ms: 0,
            not_before_ms: 0,
            agent: String::new(),
            version: None,
            depth: 0,
            parent: None,
            updated_ms: 0,
            epoch: 0,
            refused: None,
            extra: serde_json::Map::new(),
        }
    }

    /// The entry's bytes.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of plain fields and a JSON map: serializing it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// An entry from its bytes; `None` for bytes that are not one (written by something else).
    pub fn decode(bytes: &[u8]) -> Option<RunMark> {
        serde_json::from_slice(bytes).ok()
    }

    /// Whether the lease has expired at `now_ms`, allowing `skew_ms` for the writer's clock
    /// running behind the reader's: true only once `now_ms > lease_until_ms + skew_ms`.
    pub fn lease_expired(&self, now_ms: u64, skew_ms: u64) -> bool {
        now_ms > self.lease_until_ms.saturating_add(skew_ms)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
