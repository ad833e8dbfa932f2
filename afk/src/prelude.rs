//! Everything an application needs to run agents durably, in one import:
//!
//! ```
//! use std::sync::Arc;
//!
//! use afk::prelude::*;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct City {
//!     /// The city's name, in English.
//!     city: String,
//! }
//!
//! async fn weather(_ctx: ToolContext, args: City) -> Result<String, ToolError> {
//!     Ok(format!("{}: 12 °C, cloudy", args.city))
//! }
//!
//! async fn ask(model: Arc<dyn LlmClient>) -> Result<()> {
//!     let store = open("memory://").await?;
//!     let agent = Agent::new("assistant", "Answer briefly.", "gpt-4o-mini", model)
//!         .with_tool(FnTool::idempotent("weather", "Today's weather in a city", weather));
//!     let runner = Runner::new(store, RunnerConfig::default());
//!     let thread = ThreadId::new("user-42")?;
//!     match runner.run(&agent, &thread, "Weather in Oslo?").result().await? {
//!         Outcome::Completed(result) => println!("{}", result.final_text),
//!         other => println!("not finished: {other:?}"),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! * running: [`Runner`], [`RunnerConfig`], [`RunHandle`], [`Outcome`], [`Decision`],
//!   [`Settlement`], and the [`Worker`] that finishes runs nobody works on;
//! * the agent: [`Agent`], [`Limits`], [`FailurePolicies`], [`FailurePolicy`], [`ToolGate`],
//!   [`GateDecision`];
//! * tools: [`FnTool`] (a tool from an async function), the [`Tool`] trait for hand-written
//!   ones, [`ToolContext`], [`ToolError`], [`ToolSpec`], [`EffectPolicy`], [`ToolRef`];
//! * the model: the [`LlmClient`] trait, [`LlmRequest`], its answer [`LlmResponse`] with
//!   [`ToolCall`] and [`Usage`], the transcript's [`Message`] and [`Role`], and the
//!   application's [`PriceTable`] of [`ModelPrice`]s; with the features `openai` or
//!   `anthropic`, the provider clients `OpenAi` and `Anthropic`;
//! * the store: [`open`] by URL, [`Store`], [`MemoryStore`], and the ids [`ThreadId`],
//!   [`RunId`];
//! * errors: [`Error`], [`ErrorKind`], [`Result`].
//!
//! Store authors and operators have their own doors: [`store`](crate::store) (the trait, its
//! wrappers and the conformance suite's vocabulary), [`schema`](crate::schema) and
//! [`verify`](crate::verify) (the records), [`backend`](crate::backend) (each store crate).

pub use crate::{Error, ErrorKind, MemoryStore, Result, RunId, ThreadId};
pub use crate::{open, open_existing};
pub use afk_core::runner::{
    Agent, Decision, EffectPolicy, FailurePolicies, FailurePolicy, FnTool, GateDecision, Limits,
    LlmClient, LlmRequest, ModelPrice, Outcome, PriceTable, RunHandle, Runner, RunnerConfig,
    Settlement, Tool, ToolContext, ToolError, ToolGate, ToolRef, ToolSpec, Worker, WorkerConfig,
    WorkerHandle,
};
pub use afk_core::schema::{LlmResponse, Message, Role, ToolCall, Usage};
pub use afk_core::store::Store;

#[cfg(feature = "anthropic")]
pub use afk_providers::Anthropic;
#[cfg(feature = "openai")]
pub use afk_providers::OpenAi;
