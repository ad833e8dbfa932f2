//! The provider clients against a local HTTP server answering with recorded wire exchanges.
//! One test binary for the crate (each binary links the whole dependency graph).

#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai")]
mod runner;
mod server;

use std::sync::Arc;

use afk_core::runner::{LlmRequest, ToolSpec};
use afk_core::schema::{Message, Role};
use serde_json::json;

/// A recorded answer body from `fixtures/`.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/it/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A first request: system and user messages, one tool.
pub fn request(model: &str) -> LlmRequest {
    LlmRequest {
        model: model.to_owned(),
        messages: Arc::new(vec![
            Message::text(Role::System, "Answer briefly."),
            Message::text(Role::User, "What is the weather in Boston?"),
        ]),
        tools: Arc::from(vec![ToolSpec {
            name: "get_current_weather".into(),
            description: "Today's weather in a city".into(),
            parameters: json!({"type": "object", "properties": {"location": {"type": "string"}},
                "required": ["location"]}),
        }]),
        session_token: None,
        checkpoint_token: None,
        idempotency_key: "run-1:step:1".into(),
        step: 1,
    }
}
