use std::sync::Arc;

use afk::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A city to look up.
#[derive(Deserialize, JsonSchema)]
struct City {
    /// The city's name, in English.
    city: String,
}

/// The tool. A crash between its start and its recorded result runs it again with the same
/// `ctx.idempotency_key` (`FnTool::at_most_once` stops for a human instead).
async fn weather(ctx: ToolContext, args: City) -> Result<Value, ToolError> {
    eprintln!("weather({}) runs, key {}", args.city, ctx.idempotency_key);
    Ok(json!({"city": args.city, "celsius": 12, "sky": "cloudy"}))
}

#[tokio::main]
async fn main() -> Result<()> {
    // OPENAI_API_KEY for OpenAI, or OPENAI_BASE_URL for any OpenAI-compatible server.
    let model = Arc::new(OpenAi::from_env()?);
    let name = std::env::var("AFK_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
    let tool = FnTool::idempotent("weather", "Today's weather in a city", weather);
    let agent = Agent::new("assistant", "Answer briefly.", name, model).with_tool(tool);
    let store = open("rocksdb://./.afk-runs").await?;
    let runner = Runner::new(store, RunnerConfig::default());
    let (thread, run) = (ThreadId::new("newcomer")?, RunId::new("weather-oslo")?);
    // Continue the run where an earlier process left it; start it if there is none.
    let outcome = match runner.resume(&agent, &thread, &run).result().await {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let question = "What is the weather in Oslo?";
            let start = runner.run_with_id(&agent, &thread, run, question);
            start.result().await?
        }
        other => other?,
    };
    match outcome {
        Outcome::Completed(result) => println!("{}", result.final_text),
        other => println!("not finished: {other:?}"), // e.g. suspended by a rate limit
    }
    Ok(())
}
