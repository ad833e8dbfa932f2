//! The service's agent: a rule-based model (call the tool once, then answer) and one tool, so
//! that the example runs without a provider key. Replace [`Model`] with your provider's client.

use std::sync::Arc;
use std::time::Duration;

use afk::runner::{Agent, LlmClient, LlmRequest, Tool, ToolContext, ToolError, ToolSpec};
use afk::schema::{LlmResponse, MessageContent, Role};
use async_trait::async_trait;
use serde_json::{Value, json};

/// The agent the service starts its runs with and its worker resumes them with: the same
/// name and version in every process of the fleet.
pub fn agent(tool_delay: Duration) -> Agent {
    Agent::new("helpdesk", "Answer briefly.", "rules", Arc::new(Model))
        .with_version("1")
        .with_tool(Arc::new(WordCount { delay: tool_delay }))
}

/// A deterministic model: first asks for `word_count` of the user's text, then answers with
/// the count.
#[derive(Debug)]
pub struct Model;

fn text(content: &MessageContent) -> String {
    match content {
        MessageContent::Text(t) => t.clone(),
        MessageContent::Parts(p) => Value::Array(p.clone()).to_string(),
    }
}

#[async_trait]
impl LlmClient for Model {
    fn provider(&self) -> String {
        "rules".to_owned()
    }
    async fn complete(&self, request: LlmRequest) -> afk::Result<LlmResponse> {
        let last = |role: Role| request.messages.iter().rev().find(|m| m.role == role);
        let response = match last(Role::Tool) {
            Some(m) => {
                // A tool message ends with `{"success": …, "output": …, "error": …}`.
                let text = text(&m.content);
                let last = text.lines().last().unwrap_or_default();
                let result: Value = serde_json::from_str(last).unwrap_or(Value::Null);
                let words = result["output"]["words"].as_u64().unwrap_or(0);
                json!({"text": format!("Your request has {words} words."), "finish_reason": "stop"})
            }
            None => {
                let user = last(Role::User)
                    .map(|m| text(&m.content))
                    .unwrap_or_default();
                let call =
                    json!({"id": "c1", "tool_name": "word_count", "arguments": {"text": user}});
                json!({"tool_calls": [call], "finish_reason": "tool_calls"})
            }
        };
        serde_json::from_value(response)
            .map_err(|e| afk::Error::unexpected("a malformed response").with_source(e))
    }
}

/// Counts the words of a text, taking `delay` to do it (a slow external call). Idempotent:
/// after a crash between its intent and its result, the resume runs it again.
#[derive(Debug)]
pub struct WordCount {
    /// How long a call takes.
    pub delay: Duration,
}

#[async_trait]
impl Tool for WordCount {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "word_count".into(),
            description: "Count the words of a text".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        tokio::time::sleep(self.delay).await;
        let text = args["text"]
            .as_str()
            .ok_or_else(|| ToolError::new("text must be a string"))?;
        Ok(json!({"words": text.split_whitespace().count()}))
    }
}
