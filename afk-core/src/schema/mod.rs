//! Typed checkpoint records: the envelope, one payload type per phase, the runtime snapshot,
//! LLM responses, messages, the transcript log, `AgentResult` and effect rows.
//!
//! The JSON keys are AFK Python's (the records its runner writes, `src/afk/core/runner/` in
//! <https://github.com/socioy/afk> at commit `bcc10b6`); v2 additions are optional
//! fields that are left out when unset, so an AFK record read and written back keeps its shape.
//! Every struct keeps the fields it does not know in an `extra` map (`#[serde(flatten)]`), so a
//! read-modify-write never drops a field written by a newer version or by AFK.
//!
//! Reading stored bytes goes through [`crate::normalize`], which accepts older shapes and turns
//! anything unusable into a `Corrupt` error. The `Deserialize` impls here are the strict v2 shape.

mod de;
mod effect;
mod envelope;
mod llm;
mod mark;
mod message;
pub mod migrate;
mod payloads;
mod result;
mod rows;
mod shared;
mod snapshot;
mod status;
mod transcript;

pub(crate) use effect::EffectRowRef;
pub use effect::{EffectRow, EffectStatus};
pub(crate) use envelope::encode_record;
pub use envelope::{CheckpointRecord, Phase};
pub use llm::{LlmResponse, ToolCall, Usage};
pub use mark::{MarkState, RunMark};
pub use message::{Message, MessageContent, Role};
pub use payloads::{
    PauseKind, PauseRequest, PausedPayload, PhasePayload, PostLlmPayload, PostSubagentBatchPayload,
    PostToolBatchPayload, PreLlmPayload, PreSubagentBatchPayload, PreToolBatchPayload,
    ResumedPayload, RunStartedPayload, RunTerminalPayload, StepStartedPayload,
};
pub use result::{AgentResult, StateSnapshot};
pub use rows::{BackgroundTicket, CommandExecution, SkillRead, SubagentExecution, ToolExecution};
pub(crate) use shared::ResponseEncodings;
pub use snapshot::{
    AGENT_HISTORY_KEY, AGENT_KEY, AgentChange, AgentIdentity, RuntimeSnapshot, SUSPENSION_KEY,
    Suspension,
};
pub use status::RunStatus;
pub(crate) use transcript::encode_entry;
pub use transcript::{
    Reassembled, StepRecords, TranscriptEntry, TranscriptRef, chain_digest, entry_digest,
    reassemble, records_digest,
};

/// Unknown fields kept by every record struct.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// The schema version this crate writes.
pub const SCHEMA_VERSION: &str = "v2";

/// The version AFK Python writes (and the one assumed when a record names none).
pub const SCHEMA_VERSION_V1: &str = "v1";
