//! Transcript messages (`{role, content, name?}`, as AFK Python stores them) with the v2
//! tool-call fields.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Extra;
use super::de::record_de;
use super::llm::ToolCall;

/// Who wrote a message. AFK's roles are `system`, `user`, `assistant`, `tool`; any other string
/// is kept as [`Role::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
    /// Any other role string, kept verbatim.
    Other(String),
}

impl Role {
    /// The stored string.
    pub fn as_str(&self) -> &str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Other(s) => s,
        }
    }
}

impl From<&str> for Role {
    fn from(s: &str) -> Self {
        match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => Role::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Role::from(s.as_str()))
    }
}

/// Message content: a string, or a list of parts (each kept as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts (maps or other JSON values), kept as read.
    Parts(Vec<Value>),
}

impl Default for MessageContent {
    fn default() -> Self {
        MessageContent::Text(String::new())
    }
}

/// One transcript message: `{role, content, name?}` as AFK writes it, plus the v2 fields
/// `tool_calls` (assistant) and `tool_call_id` (tool), left out when unset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text or parts.
    pub content: MessageContent,
    /// Tool name on tool messages (AFK); omitted when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// v2: the tool calls an assistant message made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// v2: the call a tool message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(Message {
    role: req,
    content: req,
    name: def,
    tool_calls: def,
    tool_call_id: def
});

impl Message {
    /// A message with text content and nothing else.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: MessageContent::Text(content.into()),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            extra: Extra::new(),
        }
    }

    /// Read one stored transcript row the way AFK Python does: `None` (row dropped)
    /// when it is not an object, has no string `role`, or its `content` is neither a string
    /// nor a list; a `name` that is not a string is dropped. The v2 fields must be well typed.
    pub(crate) fn from_row(row: Value) -> Result<Option<Message>, String> {
        let Value::Object(mut map) = row else {
            return Ok(None);
        };
        let role = match map.get("role") {
            Some(Value::String(s)) => Role::from(s.as_str()),
            _ => return Ok(None),
        };
        let content = match map.remove("content") {
            Some(Value::String(s)) => MessageContent::Text(s),
            Some(Value::Array(parts)) => MessageContent::Parts(parts),
            _ => return Ok(None),
        };
        map.remove("role");
        let name = match map.remove("name") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let tool_calls = match map.remove("tool_calls") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value::<Vec<ToolCall>>(v)
                    .map_err(|e| format!("tool_calls: {e}"))?,
            ),
        };
        let tool_call_id = match map.remove("tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err("tool_call_id: expected a string".to_owned()),
        };
        Ok(Some(Message {
            role,
            content,
            name,
            tool_calls,
            tool_call_id,
            extra: map,
        }))
    }
}

/// Read a stored transcript leniently (AFK: a non-list is an empty transcript, bad rows are
/// dropped; see [`Message::from_row`]).
pub(crate) fn lenient_messages(value: Value) -> Result<Vec<Message>, String> {
    let Value::Array(rows) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.into_iter().enumerate() {
        if let Some(m) = Message::from_row(row).map_err(|e| format!("[{i}].{e}"))? {
            out.push(m);
        }
    }
    Ok(out)
}

/// Like [`lenient_messages`] but `null` stays "absent" (v2 snapshots carry no inline transcript).
pub(crate) fn lenient_opt_messages(value: Value) -> Result<Option<Vec<Message>>, String> {
    match value {
        Value::Null => Ok(None),
        v => lenient_messages(v).map(Some),
    }
}
