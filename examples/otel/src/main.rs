//! The runner's spans, exported with OpenTelemetry: `tracing-opentelemetry` turns them into
//! OpenTelemetry spans, here printed by the stdout exporter (use `opentelemetry-otlp` for a
//! collector). Each run is an `invoke_agent` span, each model call a `chat` span and each tool
//! call an `execute_tool` span, with the GenAI semantic conventions' attributes
//! (`gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//! `gen_ai.tool.name`, …). What a resumed run replays from the store (a recorded answer, a
//! recorded tool result) is a span with `afk.replayed = true` and no token usage, so a
//! dashboard counts each real call once.
//!
//! `cargo run -p otel`

use std::sync::Arc;

use afk::prelude::*;
use afk::runner::{LlmClient, LlmRequest};
use afk::schema::Role;
use async_trait::async_trait;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

/// A stand-in for a provider: asks for the tool once, then answers (use `afk::providers` for a
/// real one).
#[derive(Debug)]
struct Model;

#[async_trait]
impl LlmClient for Model {
    fn provider(&self) -> String {
        "example".to_owned()
    }
    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let answer = if request.messages.iter().any(|m| m.role == Role::Tool) {
            json!({"text": "Oslo: 12 °C, cloudy.", "finish_reason": "stop",
                   "usage": {"input_tokens": 40, "output_tokens": 8, "total_tokens": 48}})
        } else {
            let call = json!({"id": "c1", "tool_name": "weather", "arguments": {"city": "Oslo"}});
            json!({"tool_calls": [call], "finish_reason": "tool_calls",
                   "usage": {"input_tokens": 25, "output_tokens": 12, "total_tokens": 37}})
        };
        serde_json::from_value(answer).map_err(|e| Error::new(ErrorKind::Llm, e.to_string()))
    }
}

/// A city to look up.
#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

async fn weather(_ctx: ToolContext, args: City) -> std::result::Result<Value, ToolError> {
    Ok(json!({"city": args.city, "celsius": 12, "sky": "cloudy"}))
}

#[tokio::main]
async fn main() -> Result<()> {
    let exporter = opentelemetry_stdout::SpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("afk-example"));
    // The runner's spans are at INFO; its per-commit events at TRACE.
    let level = tracing_subscriber::filter::LevelFilter::INFO;
    let subscriber = tracing_subscriber::registry().with(otel).with(level);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| Error::new(ErrorKind::InvalidConfig, e.to_string()))?;

    let tool = FnTool::idempotent("weather", "Today's weather in a city", weather);
    let agent =
        Agent::new("assistant", "Answer briefly.", "my-model", Arc::new(Model)).with_tool(tool);
    let runner = Runner::new(open("memory://").await?, RunnerConfig::default());
    let thread = ThreadId::new("user-42")?;
    let outcome = runner
        .run(&agent, &thread, "What is the weather in Oslo?")
        .result()
        .await?;
    if let Outcome::Completed(result) = outcome {
        println!("{}", result.final_text);
    }
    provider
        .shutdown()
        .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
    Ok(())
}
