//! `afk demo --approval`: the demo's order again, as run `demo-order-43`, by an application
//! whose approval gate asks a human before any card is charged. The run pauses before any of
//! its tools runs and stays paused for `afk decide`, `afk serve` or `Runner::resume_with_decision`;
//! `afk demo --approval --resume` is that application's next plain resume. The order 42 of
//! `afk demo` (for example left uncertain by `--crash-after`) is left as it is.

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{GateDecision, LlmClient, LlmRequest, Outcome, ToolGate};
use afk_core::schema::{LlmResponse, Role, ToolCall};
use afk_core::store::{Store, StoreExt};
use afk_core::{Result, RunId, ThreadId};
use async_trait::async_trait;
use serde_json::json;

use super::super::output::Report;
use super::script::{THREAD, rig};
use super::{INPUT, counts};

/// The run `afk demo --approval` leaves paused.
pub const APPROVAL_RUN: &str = "demo-order-43";

/// Why the gate stops the charge.
pub const REASON: &str = "charging a card needs a human's approval";

/// The application's approval gate: every `charge_card` call waits for a human.
#[derive(Debug)]
pub struct ApproveCharges;

impl ToolGate for ApproveCharges {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == "charge_card" {
            GateDecision::RequestApproval(REASON.to_owned())
        } else {
            GateDecision::Allow
        }
    }
}

/// The approval order's model: the demo's script, except that once the charge was denied it
/// answers that the order is not placed (instead of sending a receipt).
#[derive(Debug)]
pub struct ApprovalLlm {
    /// The demo's scripted model (it counts every request).
    pub script: Arc<ScriptedLlm>,
}

/// Whether the transcript holds the denied result of the card charge.
fn charge_denied(request: &LlmRequest) -> bool {
    request.messages.iter().any(|m| {
        m.role == Role::Tool
            && m.tool_call_id.as_deref() == Some("call_charge")
            && serde_json::to_string(&m.content).is_ok_and(|c| c.contains("Tool call denied"))
    })
}

#[async_trait]
impl LlmClient for ApprovalLlm {
    fn provider(&self) -> String {
        self.script.provider()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        let denied = charge_denied(&request);
        let mut answer = self.script.complete(request).await?;
        if !denied {
            answer.text = answer.text.replace("Order 42", "Order 43");
            return Ok(answer);
        }
        let mut r: LlmResponse = serde_json::from_value(json!({
            "text": "The card charge was not approved: order 43 is not placed and nothing was charged.",
            "finish_reason": "stop",
            "usage": {"input_tokens": 230, "output_tokens": 20, "total_tokens": 250}}))
        .map_err(|e| afk_core::Error::unexpected(format!("demo script does not parse: {e}")))?;
        r.model = answer.model;
        Ok(r)
    }
}

/// `afk demo --approval`: wipe run 43, run the order until the gate pauses it, say how to
/// answer. Exit 1 (a problem in the document) when it does not pause.
pub async fn approval(store: Arc<dyn Store>, name: String) -> Result<Report> {
    let mut out = String::new();
    say!(
        out,
        "AFK demo: an order whose card charge waits for a human's approval."
    );
    say!(out, "store: {name}");
    let thread = ThreadId::new(THREAD)?;
    let run = RunId::new(APPROVAL_RUN)?;
    if store.list_runs(&thread).await?.contains(&run) {
        store.delete_run(&thread, &run).await?;
    }
    say!(
        out,
        "thread {thread}, run {run} (wiped first, so the demo can be rerun)"
    );
    let counter = InvocationCounter::new();
    let rig = rig(&counter, true)?;
    let outcome = super::script::runner(store)
        .run_with_id(&rig.agent, &thread, run.clone(), INPUT)
        .result()
        .await?;
    let mut doc = json!({
        "mode": "approval", "store": name, "thread": THREAD, "run": APPROVAL_RUN,
        "llm_calls": rig.llm.calls(), "tool_executions": counts(&counter),
    });
    let mut problems = Vec::new();
    match outcome {
        Outcome::Paused { request } => {
            let call = request.tool_call_id.clone().unwrap_or_default();
            let reason = request.reason.clone().unwrap_or_default();
            say!(
                out,
                "run {run}: paused before any tool ran, waiting for a decision on call {call} \
                 (charge_card): {reason}"
            );
            doc["outcome"] = json!("paused");
            doc["call"] = json!(call);
            doc["reason"] = json!(reason);
        }
        other => {
            say!(out, "run {run}: did not pause: {other:?}");
            problems.push(format!("the run did not pause: {other:?}"));
            doc["outcome"] = json!("other");
        }
    }
    say!(
        out,
        "model calls: {}; tool executions: none",
        rig.llm.calls()
    );
    if counter.total() > 0 {
        problems.push(format!(
            "tools ran before the approval: {:?}",
            counter.snapshot()
        ));
    }
    say!(out, "");
    say!(out, "Answer it on this store, from a terminal:");
    say!(
        out,
        "  afk decide --thread {THREAD} --run {APPROVAL_RUN} --approve   (or --deny REASON)"
    );
    say!(
        out,
        "or from a browser: afk serve (see \"Approving runs from a browser\")."
    );
    say!(
        out,
        "Then the application resumes it: afk demo --approval --resume"
    );
    let ok = problems.is_empty();
    doc["ok"] = json!(ok);
    doc["problems"] = json!(problems);
    Ok(Report {
        json: doc,
        human: out,
        failed: !ok,
    })
}
