//! OpenAI Chat Completions: what is sent, what is recorded, and how each failure maps.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use afk_core::ErrorKind;
use afk_core::runner::{LlmClient, ModelPrice, PriceTable};
use afk_core::schema::{Message, Role, ToolCall};
use afk_providers::OpenAi;
use serde_json::json;

use crate::server::{Answer, Server};
use crate::{fixture, request};

fn client(server: &Server) -> OpenAi {
    OpenAi::new("sk-test").with_base_url(server.base_url())
}

async fn failing(answer: Answer) -> afk_core::Error {
    let server = Server::start(vec![answer]).await;
    client(&server)
        .with_timeout(Duration::from_secs(5))
        .complete(request("gpt-4o-mini"))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn a_tool_call_answer_is_recorded_with_usage_cost_model_and_finish_reason() {
    let server = Server::start(vec![Answer::json(200, &fixture("openai_tool_calls.json"))]).await;
    let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million(0.15, 0.60));
    let r = client(&server)
        .with_prices(prices)
        .complete(request("gpt-4o-mini"))
        .await
        .unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    let call = &r.tool_calls[0];
    assert_eq!(call.id.as_deref(), Some("call_abc123"));
    assert_eq!(call.tool_name, "get_current_weather");
    assert_eq!(call.arguments["location"], "Boston, MA");
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.total_tokens
        ),
        (82, 17, 99)
    );
    assert_eq!(r.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(r.provider_request_id.as_deref(), Some("chatcmpl-abc123"));
    let cost = r.cost_usd.unwrap();
    assert!(
        (cost - (82.0 * 0.15 + 17.0 * 0.60) / 1e6).abs() < 1e-15,
        "{cost}"
    );
    assert_eq!(
        r.session_token, None,
        "Chat Completions has no continuity token"
    );
}

#[tokio::test]
async fn the_request_carries_the_key_the_idempotency_key_the_transcript_and_the_tools() {
    let server = Server::start(vec![Answer::json(200, &fixture("openai_text.json"))]).await;
    let mut req = request("gpt-4o");
    let call = ToolCall {
        id: Some("call_1".into()),
        tool_name: "get_current_weather".into(),
        arguments: json!({"location": "Boston"}).as_object().unwrap().clone(),
        ..ToolCall::default()
    };
    let mut asked = Message::text(Role::Assistant, "");
    asked.tool_calls = Some(vec![call]);
    let mut result = Message::text(Role::Tool, r#"{"celsius": 12}"#);
    result.tool_call_id = Some("call_1".into());
    result.name = Some("get_current_weather".into());
    let mut messages = (*req.messages).clone();
    messages.extend([asked, result]);
    req.messages = Arc::new(messages);
    let r = client(&server).complete(req).await.unwrap();
    assert_eq!(r.text, "Boston: 12 °C, cloudy.");
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        r.model.as_deref(),
        Some("gpt-4o-2024-08-06"),
        "the model that answered"
    );
    assert_eq!(r.usage.extra["cached_input_tokens"], 1024);
    assert_eq!(r.usage.extra["reasoning_tokens"], 12);
    assert_eq!(r.cost_usd, None, "no price table, no cost");

    let sent = &server.requests()[0];
    assert_eq!(sent.line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.header("idempotency-key"), Some("run-1:step:1"));
    let body = &sent.body;
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["tools"][0]["function"]["name"], "get_current_weather");
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["required"],
        json!(["location"])
    );
    let msgs = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(msgs[3]["tool_call_id"], "call_1");
}

#[tokio::test]
async fn a_rate_limit_is_retryable_not_before_the_providers_wait() {
    let e = failing(
        Answer::json(429, &fixture("openai_error_429.json")).with_header("retry-after", "20"),
    )
    .await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert_eq!(e.retry_after(), Some(Duration::from_secs(20)));
    assert!(e.message().contains("HTTP 429: Rate limit reached"), "{e}");
}

#[tokio::test]
async fn a_server_error_is_retryable() {
    let e = failing(Answer::json(500, &fixture("openai_error_500.json"))).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert_eq!(e.retry_after(), None);
    assert!(e.message().contains("The server had an error"), "{e}");
}

#[tokio::test]
async fn a_bad_request_is_permanent_and_carries_the_providers_message() {
    let e = failing(Answer::json(400, &fixture("openai_error_400.json"))).await;
    assert_eq!(e.kind(), ErrorKind::Llm, "{e}");
    assert!(!e.is_retryable());
    assert_eq!(
        e.message(),
        "openai answered HTTP 400: Invalid value for 'model': 'gpt-nonexistent'."
    );
}

#[tokio::test]
async fn a_refused_key_is_a_configuration_error() {
    let e = failing(Answer::json(401, &fixture("openai_error_401.json"))).await;
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(!e.is_retryable());
    assert!(e.message().contains("Incorrect API key provided"), "{e}");
}

#[tokio::test]
async fn a_malformed_answer_is_a_permanent_model_error() {
    let e = failing(Answer::json(
        200,
        r#"{"id": "chatcmpl-1", "choices": [{"mess"#,
    ))
    .await;
    assert_eq!(e.kind(), ErrorKind::Llm, "{e}");
    assert!(!e.is_retryable());
    assert!(e.message().contains("not the API's JSON"), "{e}");
}

#[tokio::test]
async fn a_connection_cut_mid_answer_is_retryable() {
    let mut answer = Answer::json(200, &fixture("openai_tool_calls.json"));
    answer.cut_after = Some(100);
    let e = failing(answer).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert!(
        e.message().contains("before the whole answer arrived"),
        "{e}"
    );
}

#[tokio::test]
async fn an_answer_later_than_the_timeout_is_a_retryable_timeout() {
    let mut answer = Answer::json(200, &fixture("openai_text.json"));
    answer.delay = Some(Duration::from_secs(10));
    let server = Server::start(vec![answer]).await;
    let e = client(&server)
        .with_timeout(Duration::from_millis(300))
        .complete(request("gpt-4o"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.is_retryable());
}

#[tokio::test]
async fn no_server_is_retryable() {
    // A port that was just free: nothing listens on it.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e = OpenAi::new("sk-test")
        .with_base_url(format!("http://{addr}/v1"))
        .complete(request("gpt-4o"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert!(e.message().contains("could not connect"), "{e}");
}
