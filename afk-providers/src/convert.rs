//! Our request to the provider layer's, and its answer to ours.

use afk_core::runner::{LlmRequest, PriceTable};
use afk_core::schema::{LlmResponse, Message, MessageContent, Role, ToolCall, Usage};
use genai::chat::{self, ChatMessage, ChatRequest, ChatResponse, ToolResponse};
use serde_json::{Map, Value};

/// The chat request for `req`: the transcript and the tools offered.
///
/// Transcripts written by AFK Python (v1) do not link tool results to their calls; such a
/// result is sent as a user message naming the tool, since both APIs refuse a tool result
/// without the call it answers.
pub(crate) fn request(req: &LlmRequest) -> ChatRequest {
    let messages = req.messages.iter().map(message).collect::<Vec<_>>();
    let tools = req
        .tools
        .iter()
        .map(|t| {
            chat::Tool::new(t.name.clone())
                .with_description(t.description.clone())
                .with_schema(t.parameters.clone())
        })
        .collect::<Vec<_>>();
    let mut chat = ChatRequest::new(messages);
    if !tools.is_empty() {
        chat = chat.with_tools(tools);
    }
    chat
}

fn message(m: &Message) -> ChatMessage {
    let text = text_of(&m.content);
    match &m.role {
        Role::System => ChatMessage::system(text),
        Role::Assistant => match m.tool_calls.as_deref() {
            Some(calls) if !calls.is_empty() => {
                let mut content = chat::MessageContent::default();
                if !text.is_empty() {
                    content.push(text);
                }
                for (i, c) in calls.iter().enumerate() {
                    content.push(chat::ToolCall {
                        call_id: call_id(c, i),
                        fn_name: c.tool_name.clone(),
                        fn_arguments: Value::Object(c.arguments.clone()),
                        thought_signatures: None,
                    });
                }
                ChatMessage::assistant(content)
            }
            _ => ChatMessage::assistant(text),
        },
        Role::Tool => match &m.tool_call_id {
            Some(id) => ChatMessage::from(ToolResponse::new(id.clone(), text)),
            None => {
                let name = m.name.as_deref().unwrap_or("a tool");
                ChatMessage::user(format!("Result of {name}: {text}"))
            }
        },
        Role::User | Role::Other(_) => ChatMessage::user(text),
    }
}

/// The id a call is sent with: its own, or, for a call the model gave none, one made from its
/// position (what the runner records for it is no better; the API needs some id).
fn call_id(c: &ToolCall, i: usize) -> String {
    c.id.clone().unwrap_or_else(|| format!("call_{i}"))
}

/// The text of a message: its string, or its parts' `text` fields (other parts as JSON).
fn text_of(content: &MessageContent) -> String {
    match content {
        MessageContent::Text(s) => s.clone(),
        MessageContent::Parts(parts) => parts
            .iter()
            .map(|p| match p.get("text").and_then(Value::as_str) {
                Some(t) => t.to_owned(),
                None => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Our answer from the provider layer's, priced with `prices` for the `requested` model.
pub(crate) fn response(res: ChatResponse, requested: &str, prices: &PriceTable) -> LlmResponse {
    let answered = res.provider_model_iden.model_name.to_string();
    let usage = usage(&res.usage);
    let cost_usd = prices.cost(requested, Some(&answered), &usage);
    let provider_request_id = res.response_id.clone().or_else(|| {
        res.captured_raw_body
            .as_ref()
            .and_then(|b| b.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let tool_calls = res
        .content
        .tool_calls()
        .into_iter()
        .map(|c| {
            let mut call = ToolCall {
                id: Some(c.call_id.clone()),
                tool_name: c.fn_name.clone(),
                ..ToolCall::default()
            };
            match &c.fn_arguments {
                Value::Object(args) => call.arguments = args.clone(),
                // Arguments that are not an object: the tool gets none and fails the call
                // naming what it misses; what the model sent is kept next to them.
                other => {
                    call.extra
                        .insert("invalid_arguments".to_owned(), other.clone());
                }
            }
            call
        })
        .collect();
    LlmResponse {
        text: res.content.joined_texts().unwrap_or_default(),
        provider_request_id,
        tool_calls,
        finish_reason: res.stop_reason.as_ref().map(|r| r.raw().to_owned()),
        usage,
        model: Some(answered),
        cost_usd,
        raw: Map::new(),
        ..LlmResponse::default()
    }
}

/// Token counts, as the provider reported them (a count it left out is 0; the total is the
/// sum when it gave none). Cached prompt tokens and reasoning tokens, when reported, are kept
/// as `cached_input_tokens` and `reasoning_tokens`.
fn usage(u: &chat::Usage) -> Usage {
    let count = |n: Option<i32>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
    let input_tokens = count(u.prompt_tokens);
    let output_tokens = count(u.completion_tokens);
    let total_tokens = match u.total_tokens {
        Some(t) => count(Some(t)),
        None => input_tokens.saturating_add(output_tokens),
    };
    let mut usage = Usage {
        input_tokens,
        output_tokens,
        total_tokens,
        ..Usage::default()
    };
    let cached = u
        .prompt_tokens_details
        .as_ref()
        .and_then(|d| d.cached_tokens);
    if let Some(n) = cached {
        usage.extra.insert(
            "cached_input_tokens".to_owned(),
            Value::from(count(Some(n))),
        );
    }
    let reasoning = u
        .completion_tokens_details
        .as_ref()
        .and_then(|d| d.reasoning_tokens);
    if let Some(n) = reasoning {
        usage
            .extra
            .insert("reasoning_tokens".to_owned(), Value::from(count(Some(n))));
    }
    usage
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use afk_core::runner::ToolSpec;
    use genai::chat::ChatRole;
    use serde_json::json;

    use super::*;

    fn req(messages: Vec<Message>) -> LlmRequest {
        LlmRequest {
            model: "m".into(),
            messages: Arc::new(messages),
            tools: Arc::from(Vec::<ToolSpec>::new()),
            session_token: None,
            checkpoint_token: None,
            idempotency_key: "r:step:1".into(),
            step: 1,
        }
    }

    #[test]
    fn calls_and_results_are_linked_and_a_v1_result_becomes_a_user_message() {
        let mut asked = Message::text(Role::Assistant, "checking");
        asked.tool_calls = Some(vec![ToolCall {
            id: None,
            tool_name: "add".into(),
            arguments: json!({"a": 1}).as_object().cloned().unwrap_or_default(),
            ..ToolCall::default()
        }]);
        let mut linked = Message::text(Role::Tool, "2");
        linked.tool_call_id = Some("call_0".into());
        let mut v1 = Message::text(Role::Tool, "3");
        v1.name = Some("add".into());
        let parts = Message {
            content: MessageContent::Parts(vec![json!({"type": "text", "text": "a"}), json!(7)]),
            ..Message::text(Role::User, "")
        };
        let chat = request(&req(vec![asked, linked, v1, parts]));
        let m = &chat.messages;
        assert_eq!(m[0].role, ChatRole::Assistant);
        assert_eq!(m[0].content.first_text(), Some("checking"));
        let calls = m[0].content.tool_calls();
        assert_eq!(
            calls[0].call_id, "call_0",
            "a call without an id gets one by position"
        );
        assert_eq!(calls[0].fn_arguments, json!({"a": 1}));
        assert_eq!(m[1].content.tool_responses()[0].call_id, "call_0");
        assert_eq!(m[2].role, ChatRole::User);
        assert_eq!(m[2].content.first_text(), Some("Result of add: 3"));
        assert_eq!(m[3].content.first_text(), Some("a\n7"));
        assert!(chat.tools.is_none(), "no tools, no tool list");
    }

    #[test]
    fn usage_counts_are_kept_and_a_missing_total_is_the_sum() {
        let u = chat::Usage {
            prompt_tokens: Some(10),
            completion_tokens: Some(-3),
            ..chat::Usage::default()
        };
        let ours = usage(&u);
        assert_eq!(
            (ours.input_tokens, ours.output_tokens, ours.total_tokens),
            (10, 0, 10)
        );
        assert!(ours.extra.is_empty());
    }
}
