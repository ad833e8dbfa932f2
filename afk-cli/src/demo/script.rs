//! The demo's scripted agent: a model that asks for a parallel tool batch, then one more tool,
//! then answers; tools that count their real executions.

use std::sync::Arc;

use afk_core::keys::{ParsedKey, parse_key};
use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, LlmClient, Runner, RunnerConfig};
use afk_core::schema::LlmResponse;
use afk_core::store::RetryPolicy;
use afk_core::{
    CheckpointConfig, Result,
    store::{Commit, Store},
};
use serde_json::{Value, json};

use super::approval::{ApprovalLlm, ApproveCharges};

/// Thread and run of the demo.
pub const THREAD: &str = "afk-demo";
/// The demo's run id.
pub const RUN: &str = "demo-order-42";

/// The tool calls of the script: (call id, tool name, effect policy label).
pub const CALLS: [(&str, &str, &str); 3] = [
    ("call_reserve", "reserve_stock", "idempotent"),
    ("call_charge", "charge_card", "at-most-once"),
    ("call_receipt", "send_receipt", "idempotent"),
];

fn response(v: Value) -> Result<LlmResponse> {
    serde_json::from_value(v)
        .map_err(|e| afk_core::Error::unexpected(format!("demo script does not parse: {e}")))
}

/// The three model answers, by the `assistant_count` rule: answer k to the k-th request.
fn script() -> Result<Vec<LlmResponse>> {
    Ok(vec![
        response(json!({
            "text": "Reserving the item and charging the card in parallel.",
            "finish_reason": "tool_calls",
            "tool_calls": [
                {"id": "call_reserve", "tool_name": "reserve_stock",
                 "arguments": {"sku": "BOOK-42", "qty": 1}},
                {"id": "call_charge", "tool_name": "charge_card",
                 "arguments": {"amount_cents": 1999, "card": "tok_visa"}}],
            "usage": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}}))?,
        response(json!({
            "text": "Payment went through; sending the receipt.",
            "finish_reason": "tool_calls",
            "tool_calls": [{"id": "call_receipt", "tool_name": "send_receipt",
                            "arguments": {"to": "ada@example.com"}}],
            "usage": {"input_tokens": 200, "output_tokens": 20, "total_tokens": 220}}))?,
        response(json!({
            "text": "Order 42 is confirmed: 1 x BOOK-42 reserved, $19.99 charged, receipt sent.",
            "finish_reason": "stop",
            "usage": {"input_tokens": 260, "output_tokens": 25, "total_tokens": 285}}))?,
    ])
}

/// One "process": the agent with a fresh scripted model; tool executions counted in `counter`.
#[derive(Debug)]
pub struct Rig {
    /// The scripted model (its `calls()` are this process's model calls).
    pub llm: Arc<ScriptedLlm>,
    /// The agent.
    pub agent: Agent,
}

/// Build the agent for one process; with `approval`, the application of `afk demo
/// --approval` (its gate asks a human before any card is charged).
pub fn rig(counter: &InvocationCounter, approval: bool) -> Result<Rig> {
    let llm = ScriptedLlm::new(script()?);
    let reserve = ScriptedTool::new(
        "reserve_stock",
        EffectPolicy::Idempotent,
        counter.clone(),
        |a| Ok(json!({"reserved": a.get("qty").cloned().unwrap_or(Value::Null)})),
    );
    let charge = ScriptedTool::new(
        "charge_card",
        EffectPolicy::AtMostOnce,
        counter.clone(),
        |a| Ok(json!({"charged_cents": a.get("amount_cents").cloned().unwrap_or(Value::Null)})),
    );
    let receipt = ScriptedTool::new(
        "send_receipt",
        EffectPolicy::Idempotent,
        counter.clone(),
        |a| Ok(json!({"sent_to": a.get("to").cloned().unwrap_or(Value::Null)})),
    );
    let client: Arc<dyn LlmClient> = if approval {
        Arc::new(ApprovalLlm {
            script: llm.clone(),
        })
    } else {
        llm.clone()
    };
    let agent = Agent::new(
        "shop-assistant",
        "Fulfil the order.",
        "scripted-model",
        client,
    )
    .with_tool(reserve)
    .with_tool(charge)
    .with_tool(receipt);
    let agent = if approval {
        agent.with_gate(Arc::new(ApproveCharges))
    } else {
        agent
    };
    Ok(Rig { llm, agent })
}

/// A runner writing every commit inline (so the crash point is exact) without retries.
pub fn runner(store: Arc<dyn Store>) -> Runner {
    let checkpoint = CheckpointConfig::default()
        .with_async_writes(false)
        .with_retry(RetryPolicy::none());
    Runner::new(store, RunnerConfig::default().with_checkpoint(checkpoint))
}

/// The tool name of a call id of the script.
pub fn tool_of(call_id: &str) -> &'static str {
    CALLS
        .iter()
        .find(|(c, _, _)| *c == call_id)
        .map_or("?", |(_, t, _)| t)
}

/// One line saying what a commit wrote.
pub fn describe_commit(c: &Commit) -> String {
    let mut parts: Vec<String> = c
        .puts
        .iter()
        .map(|(key, value)| describe_put(key, value))
        .collect();
    if c.latest.is_some() {
        parts.push("latest pointer moved here".to_owned());
    }
    parts.join("; ")
}

fn describe_put(key: &str, value: &[u8]) -> String {
    match parse_key(key) {
        Ok(ParsedKey::Checkpoint { step, phase, .. }) => format!("record step {step} {phase}"),
        Ok(ParsedKey::Effect { call_id, .. }) => {
            let row: Value = serde_json::from_slice(value).unwrap_or(Value::Null);
            let what = match row.get("status").and_then(Value::as_str) {
                Some("intent") => "intent (about to run)",
                _ => "result",
            };
            format!("effect row {what} for {} ({call_id})", tool_of(&call_id))
        }
        Ok(ParsedKey::Messages { index, .. }) => format!("transcript entry {index}"),
        _ => key.to_owned(),
    }
}
