//! Delegation's vocabulary: how a subagent looks to the model, the child run id a delegation
//! derives, and the fields that name a child run in a parent's records. Pure; running a child
//! is in `subagent.rs`.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::agent::Agent;
use super::tool::ToolSpec;
use crate::ids::RunId;

/// Where a `paused` record's request comes from a child run (a subagent paused for
/// approval): the payload names the child's paused call.
pub(crate) const CHILD_CALL_KEY: &str = "child_tool_call_id";
/// The child run id in such a request's payload.
pub(crate) const CHILD_RUN_KEY: &str = "child_run_id";

/// The spec the model sees for a subagent.
pub(crate) fn spec_of(agent: &Agent) -> ToolSpec {
    ToolSpec {
        name: agent.name.clone(),
        description: format!("Delegate a task to the subagent '{}'", agent.name),
        parameters: json!({"type": "object", "properties": {"input": {"type": "string"}}}),
    }
}

/// The deterministic child run id for a delegation.
pub fn child_run_id(parent: &RunId, step: u64, call_id: &str) -> RunId {
    let mut h = Sha256::new();
    h.update(format!("{parent}\u{0}{step}\u{0}{call_id}").as_bytes());
    let hex = hex::encode(h.finalize());
    // 4 + 32 characters of [a-z0-9_]: always a valid run id.
    RunId::new(format!("sub_{}", &hex[..32])).unwrap_or_else(|_| parent.clone())
}

/// Whether `run` has the form [`child_run_id`] gives (`sub_` and 32 lowercase hex digits).
pub fn is_child_run_id(run: &RunId) -> bool {
    run.as_str().strip_prefix("sub_").is_some_and(|h| {
        h.len() == 32
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}
