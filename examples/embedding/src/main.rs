use std::sync::Arc;

use afk::runner::{Agent, LlmClient, LlmRequest, Outcome, Runner, RunnerConfig};
use afk::runner::{Tool, ToolContext, ToolError, ToolSpec};
use afk::schema::{LlmResponse, Role};
use async_trait::async_trait;
use serde_json::{Value, json};

/// Your model client: call your provider here. This one asks for the tool once, then answers.
#[derive(Debug)]
struct Model;

#[async_trait]
impl LlmClient for Model {
    fn provider(&self) -> String {
        "example".to_owned()
    }
    async fn complete(&self, request: LlmRequest) -> afk::Result<LlmResponse> {
        let response = if request.messages.iter().any(|m| m.role == Role::Tool) {
            json!({"text": "Oslo: 12 °C, cloudy.", "finish_reason": "stop"})
        } else {
            let call = json!({"id": "c1", "tool_name": "weather", "arguments": {"city": "Oslo"}});
            json!({"tool_calls": [call], "finish_reason": "tool_calls"})
        };
        Ok(serde_json::from_value(response).expect("a well-formed response"))
    }
}

/// Your tool. Idempotent by default: after a crash between its intent and its result, resume
/// runs it again with the same `ctx.idempotency_key`; `EffectPolicy::AtMostOnce` stops instead.
#[derive(Debug)]
struct Weather;

#[async_trait]
impl Tool for Weather {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "weather".into(),
            description: "Today's weather in a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        Ok(json!({"city": args["city"], "celsius": 12, "sky": "cloudy"}))
    }
}

#[tokio::main]
async fn main() -> afk::Result<()> {
    let store = afk::open("rocksdb://./.afk-runs").await?; // or redis://…, s3://…
    let agent = Agent::new("assistant", "Answer briefly.", "my-model", Arc::new(Model))
        .with_tool(Arc::new(Weather));
    let runner = Runner::new(store, RunnerConfig::default());
    let thread = afk::ThreadId::new("user-42")?;
    let handle = runner.run(&agent, &thread, "What is the weather in Oslo?");
    // Every step is checkpointed: after a crash, any process continues the run with
    // `runner.resume(&agent, &thread, &run)`; a tool call with a stored result does not run again.
    let run = handle.run_id().clone();
    match handle.result().await? {
        Outcome::Completed(result) => println!("{run}: {}", result.final_text),
        Outcome::Paused { request } => println!("{run} waits for a human: {request:?}"),
        other => println!("{run} is not finished: {other:?}"), // e.g. suspended by a model outage
    }
    Ok(())
}
