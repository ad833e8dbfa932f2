//! The agent the campaign runs, generated from a seed: its script, its tools and its
//! subagent. Every process given the same seed builds the same agent, so any process can
//! resume a run another one started.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use afk::runner::scripted::ScriptedLlm;
use afk::runner::{Agent, EffectPolicy, Limits, Tool, ToolContext, ToolError, ToolSpec};
use afk::schema::LlmResponse;
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// The at-most-once tool of the parent: a charge (one ledger line per real execution).
pub const CHARGE: &str = "charge";
/// The idempotent tool of the parent: a lookup (re-run after a crash, same key).
pub const LOOKUP: &str = "lookup";
/// The subagent the parent delegates to.
pub const REFUNDER: &str = "refunder";
/// The subagent's at-most-once tool.
pub const REFUND: &str = "refund";

/// One tool call of the parent's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The model-assigned call id (`call_<step index>`).
    pub id: String,
    /// `charge`, `lookup` or `refunder`.
    pub tool: &'static str,
    /// The amount, the call's only argument.
    pub amount: u64,
}

/// What a seed gives: one call per step, then a final answer.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The calls, one per tool step, in order.
    pub calls: Vec<Call>,
}

impl Plan {
    /// 6–15 tool steps; every third step delegates, the others charge or look up (at least
    /// one of each).
    pub fn from_seed(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let steps = 6 + rng.random_range(0..10usize);
        let mut calls: Vec<Call> = (0..steps)
            .map(|i| {
                let tool = if i % 3 == 2 {
                    REFUNDER
                } else if rng.random_bool(0.5) {
                    CHARGE
                } else {
                    LOOKUP
                };
                Call {
                    id: format!("call_{i}"),
                    tool,
                    amount: rng.random_range(1..100u64),
                }
            })
            .collect();
        calls[0].tool = CHARGE;
        calls[1].tool = LOOKUP;
        Plan { calls }
    }

    /// The calls of one tool.
    pub fn of(&self, tool: &str) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(move |c| c.tool == tool)
    }

    /// The parent agent: the script, the two ledger tools and the subagent. `max_steps` is
    /// exactly what the uncrashed run needs (the tool steps and the final answer): a crash
    /// must not change how many logical steps a run takes. The budgets that count real
    /// spend (model and tool calls) are left far away, as redone calls may count there.
    pub fn agent(&self, ledger: &Path) -> Agent {
        let mut script: Vec<LlmResponse> = self
            .calls
            .iter()
            .map(|c| {
                let args = if c.tool == REFUNDER {
                    json!({"input": format!("refund {}", c.amount)})
                } else {
                    json!({"amount": c.amount})
                };
                answer(json!({"text": format!("Step {}.", c.id), "tool_calls": [
                    {"id": c.id, "tool_name": c.tool, "arguments": args}]}))
            })
            .collect();
        script.push(answer(json!({"text": "All done.", "tool_calls": []})));
        let refunder = Agent::new(
            REFUNDER,
            "Refund with the refund tool.",
            "scripted",
            ScriptedLlm::new(vec![
                answer(json!({"text": "Refunding.", "tool_calls": [
                    {"id": "refund_0", "tool_name": REFUND, "arguments": {"amount": 5}}]})),
                answer(json!({"text": "Refunded.", "tool_calls": []})),
            ]),
        )
        .with_tool(LedgerTool::new(REFUND, EffectPolicy::AtMostOnce, ledger));
        let mut agent = Agent::new(
            "chaos",
            "Charge, look up and delegate refunds.",
            "scripted",
            ScriptedLlm::new(script),
        )
        .with_tool(LedgerTool::new(CHARGE, EffectPolicy::AtMostOnce, ledger))
        .with_tool(LedgerTool::new(LOOKUP, EffectPolicy::Idempotent, ledger))
        .with_subagent(refunder);
        agent.limits = Limits::default()
            .with_max_steps(self.calls.len() as u64 + 1)
            .with_max_llm_calls(100_000)
            .with_max_tool_calls(100_000)
            .with_max_wall_time_ms(Some(600_000));
        agent
    }
}

fn answer(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("the scripted answers are valid responses")
}

/// A tool whose effect is a line in a ledger file: `{"key", "run", "step", "call", "tool",
/// "output"}`, appended with one `write` and made durable with `fsync` before the tool returns.
/// Its output depends only on its arguments, so the crashed and the uncrashed runs agree.
#[derive(Debug)]
pub struct LedgerTool {
    name: &'static str,
    policy: EffectPolicy,
    ledger: PathBuf,
}

impl LedgerTool {
    pub fn new(name: &'static str, policy: EffectPolicy, ledger: &Path) -> Arc<Self> {
        Arc::new(LedgerTool {
            name,
            policy,
            ledger: ledger.to_path_buf(),
        })
    }
}

/// What a ledger tool returns for `args` (and what a settlement `Ran` records).
pub fn output_of(tool: &str, args: &Value) -> Value {
    let amount = args.get("amount").and_then(Value::as_u64).unwrap_or(0);
    json!({"tool": tool, "amount": amount, "receipt": format!("{tool}-{amount}")})
}

#[async_trait]
impl Tool for LedgerTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_owned(),
            description: format!("{} (writes a ledger line)", self.name),
            parameters: json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
        }
    }

    fn effect_policy(&self) -> EffectPolicy {
        self.policy
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        // Announced on stdout (line-buffered) so the campaign can also aim kills at the
        // moments around an effect: `effect-start` (the intent is durable) and `effect-done`.
        let at_most_once = self.policy == EffectPolicy::AtMostOnce;
        if at_most_once {
            println!("effect-start {}", ctx.idempotency_key);
        }
        let output = output_of(self.name, &args);
        let mut line = serde_json::to_vec(&json!({
            "key": ctx.idempotency_key,
            "run": ctx.run_id,
            "step": ctx.step,
            "call": ctx.tool_call_id,
            "tool": self.name,
            "output": output,
        }))
        .map_err(|e| ToolError::new(e.to_string()))?;
        line.push(b'\n');
        let path = self.ledger.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
            f.write_all(&line)?;
            f.sync_data()
        })
        .await
        .map_err(|e| ToolError::new(e.to_string()))?
        .map_err(|e| ToolError::new(format!("ledger write failed: {e}")))?;
        if at_most_once {
            println!("effect-done {}", ctx.idempotency_key);
        }
        // A pause between the effect and its result row (a real payment call takes far
        // longer) widens the window a kill can land in: the one that makes a call uncertain.
        let pause = match self.policy {
            EffectPolicy::AtMostOnce => 40,
            EffectPolicy::Idempotent => 5,
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        Ok(output)
    }
}
