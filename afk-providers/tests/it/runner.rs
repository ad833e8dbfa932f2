//! The OpenAI client driven by the runner against the local server: a run with a function
//! tool completes; the cost budget stops a run from the price table; a rate limit suspends the
//! run (resumable, not before the provider's wait) instead of ending it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use afk_core::runner::{
    Agent, FnTool, Limits, ModelPrice, Outcome, PriceTable, Runner, ToolContext,
};
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use afk_providers::OpenAi;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::fixture;
use crate::server::{Answer, Server};

#[derive(Deserialize, JsonSchema)]
struct Place {
    /// City and region, e.g. "Boston, MA".
    location: String,
}

fn agent(server: &Server, prices: PriceTable, limits: Limits) -> Agent {
    let model = OpenAi::new("sk-test")
        .with_base_url(server.base_url())
        .with_prices(prices);
    let weather = FnTool::idempotent(
        "get_current_weather",
        "Today's weather in a city",
        |_: ToolContext, p: Place| async move {
            Ok::<_, std::io::Error>(json!({"where": p.location, "celsius": 12}))
        },
    );
    let mut agent =
        Agent::new("weather", "Answer briefly.", "gpt-4o-mini", Arc::new(model)).with_tool(weather);
    agent.limits = limits;
    agent
}

fn answers() -> Vec<Answer> {
    vec![
        Answer::json(200, &fixture("openai_tool_calls.json")),
        Answer::json(200, &fixture("openai_text.json")),
    ]
}

#[tokio::test]
async fn a_run_calls_the_function_tool_and_records_the_priced_answers() {
    let server = Server::start(answers()).await;
    let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million(1.0, 1.0));
    let runner = Runner::new(Arc::new(MemoryStore::new()), deterministic_config());
    let t = ThreadId::new("t").unwrap();
    let out = runner
        .run(
            &agent(&server, prices, Limits::default()),
            &t,
            "Weather in Boston?",
        )
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.final_text, "Boston: 12 °C, cloudy.");
    assert_eq!(
        r.tool_executions[0].output,
        json!({"where": "Boston, MA", "celsius": 12})
    );
    assert_eq!(r.usage_aggregate.input_tokens, 82 + 1117);
    // Both answers are priced by the model asked for (gpt-4o-mini), whatever answered.
    let cost = r.total_cost_usd.unwrap();
    assert!((cost - (99.0 + 1163.0) / 1e6).abs() < 1e-15, "{cost}");
    // The model's call and the tool's result went back to it, linked by the call's id.
    let second = &server.requests()[1].body["messages"];
    assert_eq!(
        second[2]["tool_calls"][0]["id"], "call_abc123",
        "{second:#}"
    );
    assert_eq!(second[3]["tool_call_id"], "call_abc123", "{second:#}");
}

#[tokio::test]
async fn the_cost_budget_stops_the_run_from_the_price_table() {
    let server = Server::start(answers()).await;
    // 82 input and 17 output tokens at 1000 USD per million each: 0.099 USD.
    let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million(1000.0, 1000.0));
    let limits = Limits::default().with_max_cost_usd(Some(0.05));
    let runner = Runner::new(Arc::new(MemoryStore::new()), deterministic_config());
    let t = ThreadId::new("t").unwrap();
    let e = runner
        .run(&agent(&server, prices, limits), &t, "Weather in Boston?")
        .result()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BudgetExceeded, "{e}");
    assert_eq!(
        server.requests().len(),
        1,
        "no model call after the budget is spent"
    );
}

#[tokio::test]
async fn a_rate_limit_suspends_the_run_and_a_resume_finishes_it() {
    let mut script = vec![
        Answer::json(429, &fixture("openai_error_429.json")).with_header("retry-after", "600"),
    ];
    script.extend(answers());
    let server = Server::start(script).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&server, PriceTable::new(), Limits::default());
    let t = ThreadId::new("t").unwrap();
    let run = RunId::new("r1").unwrap();
    let runner = Runner::new(store.clone(), deterministic_config());
    let out = runner
        .run_with_id(&agent, &t, run.clone(), "Weather in Boston?")
        .result()
        .await
        .unwrap();
    let Outcome::Suspended {
        reason,
        not_before_ms,
    } = out
    else {
        panic!("{out:?}")
    };
    assert!(reason.contains("HTTP 429"), "{reason}");
    assert!(
        not_before_ms >= START_MS + 600_000,
        "the provider's wait is honoured"
    );
    let out = Runner::new(store, deterministic_config())
        .resume(&agent, &t, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.final_text, "Boston: 12 °C, cloudy.");
}
