//! Anthropic Messages: what is sent, what is recorded, and how each failure maps.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use afk_core::ErrorKind;
use afk_core::runner::{LlmClient, ModelPrice, PriceTable};
use afk_providers::Anthropic;

use crate::server::{Answer, Server};
use crate::{fixture, request};

const MODEL: &str = "claude-3-5-sonnet-latest";

fn client(server: &Server) -> Anthropic {
    Anthropic::new("sk-ant-test")
        .with_base_url(server.base_url())
        .with_max_tokens(1024)
        .with_timeout(Duration::from_secs(5))
}

async fn failing(answer: Answer) -> afk_core::Error {
    let server = Server::start(vec![answer]).await;
    client(&server).complete(request(MODEL)).await.unwrap_err()
}

#[tokio::test]
async fn a_tool_use_answer_is_recorded_with_usage_cost_model_and_stop_reason() {
    let server = Server::start(vec![Answer::json(200, &fixture("anthropic_tool_use.json"))]).await;
    // Priced by the model that answered: the table has no price for the alias asked for.
    let prices = PriceTable::new().with(
        "claude-3-5-sonnet-20241022",
        ModelPrice::per_million(3.0, 15.0),
    );
    let r = client(&server)
        .with_prices(prices)
        .complete(request(MODEL))
        .await
        .unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    let call = &r.tool_calls[0];
    assert_eq!(call.id.as_deref(), Some("toolu_01A09q90qw90lq917835lq9"));
    assert_eq!(call.tool_name, "get_weather");
    assert_eq!(call.arguments["location"], "San Francisco, CA");
    assert!(r.text.contains("I need to use get_weather"), "{}", r.text);
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (472, 91));
    assert_eq!(
        r.usage.total_tokens, 563,
        "the sum, as Anthropic reports no total"
    );
    assert_eq!(r.model.as_deref(), Some("claude-3-5-sonnet-20241022"));
    let cost = r.cost_usd.unwrap();
    assert!(
        (cost - (472.0 * 3.0 + 91.0 * 15.0) / 1e6).abs() < 1e-15,
        "{cost}"
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.line, "POST /v1/messages HTTP/1.1");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(sent.header("idempotency-key"), Some("run-1:step:1"));
    assert_eq!(sent.body["model"], MODEL);
    assert_eq!(sent.body["max_tokens"], 1024);
    assert_eq!(sent.body["system"], "Answer briefly.");
    assert_eq!(sent.body["tools"][0]["name"], "get_current_weather");
}

#[tokio::test]
async fn a_rate_limit_is_retryable_not_before_the_providers_wait() {
    let e = failing(
        Answer::json(429, &fixture("anthropic_error_429.json")).with_header("retry-after", "13"),
    )
    .await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert_eq!(e.retry_after(), Some(Duration::from_secs(13)));
    assert!(e.message().contains("Number of request tokens"), "{e}");
}

#[tokio::test]
async fn overloaded_is_retryable() {
    let e = failing(Answer::json(529, &fixture("anthropic_error_529.json"))).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
    assert_eq!(e.message(), "anthropic answered HTTP 529: Overloaded");
}

#[tokio::test]
async fn a_bad_request_is_permanent_and_carries_the_providers_message() {
    let e = failing(Answer::json(400, &fixture("anthropic_error_400.json"))).await;
    assert_eq!(e.kind(), ErrorKind::Llm, "{e}");
    assert!(!e.is_retryable());
    assert!(e.message().contains("roles must alternate"), "{e}");
}

#[tokio::test]
async fn a_malformed_answer_is_a_permanent_model_error() {
    let e = failing(Answer::json(
        200,
        r#"{"id": "msg_1", "content": [{"type": "te"#,
    ))
    .await;
    assert_eq!(e.kind(), ErrorKind::Llm, "{e}");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn a_connection_cut_mid_answer_is_retryable() {
    let mut answer = Answer::json(200, &fixture("anthropic_tool_use.json"));
    answer.cut_after = Some(60);
    let e = failing(answer).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_retryable());
}
