//! Execution records kept in snapshots and results, read leniently like AFK Python:
//! a non-list is empty and rows without their identifying string field are skipped. Rows that
//! are kept must be well typed; a wrong type is an error naming the row and field.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Extra;
use super::de::record_de;

/// One tool call's execution record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolExecution {
    /// Tool name (rows without a string name are skipped on read).
    pub tool_name: String,
    /// The call id the model gave.
    pub tool_call_id: Option<String>,
    /// Whether the tool succeeded.
    pub success: bool,
    /// Tool output (JSON-converted).
    pub output: Value,
    /// Error text of a failed call.
    pub error: Option<String>,
    /// Wall time of the call in ms (not part of any expectation).
    pub latency_ms: Option<f64>,
    /// Agent that ran the call.
    pub agent_name: Option<String>,
    /// Subagent nesting depth.
    pub agent_depth: Option<u64>,
    /// Agent path (`parent/child`).
    pub agent_path: Option<String>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(ToolExecution {
    tool_name: req,
    tool_call_id: def,
    success: def,
    output: def,
    error: def,
    latency_ms: def,
    agent_name: def,
    agent_depth: def,
    agent_path: def,
});

/// One subagent's execution record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SubagentExecution {
    /// Subagent name (rows without a string name are skipped on read).
    pub subagent_name: String,
    /// Whether it succeeded.
    pub success: bool,
    /// Its final text.
    pub output_text: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// Wall time in ms.
    pub latency_ms: Option<f64>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(SubagentExecution {
    subagent_name: req,
    success: def,
    output_text: def,
    error: def,
    latency_ms: def,
});

/// One skill file read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SkillRead {
    /// Skill name (required with `path`, else the row is skipped).
    pub skill_name: String,
    /// File path read.
    pub path: String,
    /// Content checksum.
    pub checksum: Option<String>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(SkillRead {
    skill_name: req,
    path: req,
    checksum: def
});

/// One skill command execution.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CommandExecution {
    /// argv (rows whose `command` is not a list are skipped).
    pub command: Vec<String>,
    /// Exit code (AFK defaults it to 1).
    pub exit_code: Option<i64>,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
    /// Whether policy denied the command.
    pub denied: bool,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(CommandExecution {
    command: req,
    exit_code: def,
    stdout: def,
    stderr: def,
    denied: def
});

/// A background tool ticket still pending at snapshot time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BackgroundTicket {
    /// Run that started it.
    pub run_id: Option<String>,
    /// Thread of that run.
    pub thread_id: String,
    /// Ticket id (`bgtool:<run>:<ticket>:state`).
    pub ticket_id: String,
    /// Tool name.
    pub tool_name: String,
    /// The originating call id.
    pub tool_call_id: Option<String>,
    /// Creation time, epoch seconds.
    pub created_at_s: Option<f64>,
    /// Poll interval hint, seconds.
    pub poll_after_s: Option<f64>,
    /// Human summary.
    pub summary: Option<String>,
    /// Resume hint.
    pub resume_hint: Option<String>,
    /// Agent that started it.
    pub agent_name: Option<String>,
    /// Nesting depth.
    pub agent_depth: Option<u64>,
    /// Agent path.
    pub agent_path: Option<String>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(BackgroundTicket {
    run_id: def,
    thread_id: req,
    ticket_id: req,
    tool_name: req,
    tool_call_id: def,
    created_at_s: def,
    poll_after_s: def,
    summary: def,
    resume_hint: def,
    agent_name: def,
    agent_depth: def,
    agent_path: def,
});

/// Read a list of rows leniently: non-list → empty; rows that are not objects or lack one of
/// `required` as a string (or, for `list_key`, as a list) are skipped; others must decode.
fn rows<T: DeserializeOwned>(
    value: Value,
    required: &[&str],
    list_key: Option<&str>,
) -> Result<Vec<T>, String> {
    let Value::Array(items) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, row) in items.into_iter().enumerate() {
        let Value::Object(map) = &row else { continue };
        if !required
            .iter()
            .all(|k| matches!(map.get(*k), Some(Value::String(_))))
        {
            continue;
        }
        if let Some(k) = list_key
            && !matches!(map.get(k), Some(Value::Array(_)))
        {
            continue;
        }
        let parsed: T = serde_path_to_error::deserialize(row)
            .map_err(|e| format!("[{i}].{}: {}", e.path(), e.inner()))?;
        out.push(parsed);
    }
    Ok(out)
}

pub(crate) fn tool_rows(v: Value) -> Result<Vec<ToolExecution>, String> {
    rows(v, &["tool_name"], None)
}
pub(crate) fn subagent_rows(v: Value) -> Result<Vec<SubagentExecution>, String> {
    rows(v, &["subagent_name"], None)
}
pub(crate) fn skill_read_rows(v: Value) -> Result<Vec<SkillRead>, String> {
    rows(v, &["skill_name", "path"], None)
}
pub(crate) fn command_rows(v: Value) -> Result<Vec<CommandExecution>, String> {
    rows(v, &[], Some("command"))
}
pub(crate) fn background_rows(v: Value) -> Result<Vec<BackgroundTicket>, String> {
    rows(v, &["ticket_id", "tool_name", "thread_id"], None)
}
