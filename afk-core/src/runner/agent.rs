//! The agent definition: instructions, model, tools, limits and policies.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::llm::LlmClient;
use super::tool::{EffectPolicy, ToolRef, ToolSpec};
use crate::hash::json_hash;
use crate::schema::{AgentIdentity, ToolCall};

/// What the runner does when a model call, a tool call or an approval fails (AFK's failure
/// policy names map onto these three outcomes, as each variant says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailurePolicy {
    /// Record the failure and go on (AFK `continue`, `continue_with_error`, `skip_action`).
    #[default]
    Continue,
    /// Stop the run with state `degraded` and the failure as final text (AFK
    /// `retry_then_degrade`).
    Degrade,
    /// Fail the run with the error (AFK `retry_then_fail`, `fail_fast`, `fail_run`).
    Fail,
}

impl FailurePolicy {
    /// Map an AFK policy name onto an outcome (unknown names continue, like AFK).
    pub fn from_afk_name(name: &str) -> Self {
        match name {
            "retry_then_degrade" => FailurePolicy::Degrade,
            "retry_then_fail" | "fail_fast" | "fail_run" => FailurePolicy::Fail,
            _ => FailurePolicy::Continue,
        }
    }
}

/// The three failure policies of an agent: `FailurePolicies::default()` and the `with_*`
/// setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailurePolicies {
    /// Every model candidate failed for a step. Default: fail (AFK `retry_then_fail`);
    /// `Continue` behaves like `Degrade` here, as in AFK.
    pub llm: FailurePolicy,
    /// A tool call returned an error or panicked. Default: continue (AFK default).
    pub tool: FailurePolicy,
    /// A tool call was denied by the gate or by a human. Default: continue.
    pub approval: FailurePolicy,
}

impl Default for FailurePolicies {
    fn default() -> Self {
        FailurePolicies {
            llm: FailurePolicy::Fail,
            tool: FailurePolicy::Continue,
            approval: FailurePolicy::Continue,
        }
    }
}

impl FailurePolicies {
    /// Set the policy for failed model calls ([`FailurePolicies::llm`]).
    #[must_use]
    pub fn with_llm(mut self, llm: FailurePolicy) -> Self {
        self.llm = llm;
        self
    }

    /// Set the policy for failed tool calls ([`FailurePolicies::tool`]).
    #[must_use]
    pub fn with_tool(mut self, tool: FailurePolicy) -> Self {
        self.tool = tool;
        self
    }

    /// Set the policy for denied tool calls ([`FailurePolicies::approval`]).
    #[must_use]
    pub fn with_approval(mut self, approval: FailurePolicy) -> Self {
        self.approval = approval;
        self
    }
}

/// Run budgets. Every limit is checked at each step start; cost also after each model call.
///
/// # What counts across crashes
///
/// A crash must not change a run's result, so the budgets that shape the result count
/// logical work, while the spend guard counts real calls:
///
/// * `max_steps` counts **logical steps**: a step redone after a crash inside its model turn
///   keeps its step number and is not counted again, however often it is redone.
/// * `max_llm_calls` counts **model calls made**, including calls whose answer a crash lost
///   (the provider was paid for them). Each call's ordinal is recorded in its `pre_llm`
///   record before the call; a resume counts a lost call from it. With write-behind
///   (`async_writes`), a call whose `pre_llm` record was still queued when the process died
///   is not counted. The result's `llm_calls` counts the answers the run used, as an
///   uncrashed run would.
/// * `max_cost_usd` counts the cost of the **answers the run recorded** (the sum of their
///   [`LlmResponse::cost_usd`](crate::schema::LlmResponse::cost_usd)): a lost answer's cost
///   was never seen, so it cannot be counted.
/// * `max_tool_calls` counts recorded tool calls (each call once, replayed or not);
///   `max_wall_time_ms` counts active time saved in snapshots.
///
/// Build it from `Limits::default()` with the `with_*` setters (new limits may be added
/// without a breaking change).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Most loop steps (model turns), counted as logical steps (a redone step counts once).
    pub max_steps: u64,
    /// Most model calls over the whole run (resumes included), counting calls whose answer a
    /// crash lost.
    pub max_llm_calls: u64,
    /// Most tool calls over the whole run.
    pub max_tool_calls: u64,
    /// Most *active* milliseconds: time spent paused or crashed does not count
    /// (AFK counts wall time from the run's first start, pauses and outages included).
    pub max_wall_time_ms: Option<u64>,
    /// Most accumulated model cost in USD: the sum of the recorded answers'
    /// [`LlmResponse::cost_usd`](crate::schema::LlmResponse::cost_usd).
    pub max_cost_usd: Option<f64>,
    /// Most tool calls of one batch that run at the same time.
    pub tool_parallelism: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 20,
            max_llm_calls: 50,
            max_tool_calls: 200,
            max_wall_time_ms: Some(300_000),
            max_cost_usd: None,
            tool_parallelism: 16,
        }
    }
}

impl Limits {
    /// Set [`Limits::max_steps`].
    #[must_use]
    pub fn with_max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Set [`Limits::max_llm_calls`].
    #[must_use]
    pub fn with_max_llm_calls(mut self, max_llm_calls: u64) -> Self {
        self.max_llm_calls = max_llm_calls;
        self
    }

    /// Set [`Limits::max_tool_calls`].
    #[must_use]
    pub fn with_max_tool_calls(mut self, max_tool_calls: u64) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// Set [`Limits::max_wall_time_ms`] (`None`: no bound).
    #[must_use]
    pub fn with_max_wall_time_ms(mut self, max_wall_time_ms: Option<u64>) -> Self {
        self.max_wall_time_ms = max_wall_time_ms;
        self
    }

    /// Set [`Limits::max_cost_usd`] (`None`: no bound).
    #[must_use]
    pub fn with_max_cost_usd(mut self, max_cost_usd: Option<f64>) -> Self {
        self.max_cost_usd = max_cost_usd;
        self
    }

    /// Set [`Limits::tool_parallelism`].
    #[must_use]
    pub fn with_tool_parallelism(mut self, tool_parallelism: usize) -> Self {
        self.tool_parallelism = tool_parallelism;
        self
    }
}

/// What the gate says about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// Run it.
    Allow,
    /// Do not run it: a failed tool record with this reason; the approval policy decides.
    Deny(String),
    /// Pause the run until a human decides (see [`Runner::resume_with_decision`](super::Runner::resume_with_decision)).
    RequestApproval(String),
}

/// A policy hook consulted for every tool call before it runs (human in the loop).
pub trait ToolGate: Send + Sync + fmt::Debug {
    /// Decide about one call of `step`.
    fn decide(&self, step: u64, call: &ToolCall) -> GateDecision;
}

/// An agent: what the runner drives. Cheap to clone (everything shared is behind `Arc`).
#[derive(Clone)]
pub struct Agent {
    /// Name, stored in `run_started` and tool records.
    pub name: String,
    /// System instructions, the first message of a fresh run.
    pub instructions: String,
    /// Primary model name.
    pub model: String,
    /// Models tried in order when the primary fails for a step (AFK's
    /// `fallback_model_chain`); duplicates of earlier candidates are skipped.
    pub fallback_models: Vec<String>,
    /// The model client.
    pub llm: Arc<dyn LlmClient>,
    /// Tools the model may call.
    pub tools: Vec<ToolRef>,
    /// Agents the model may delegate to: a tool call named like a subagent runs a child run.
    pub subagents: Vec<Agent>,
    /// Budgets.
    pub limits: Limits,
    /// Failure policies.
    pub policies: FailurePolicies,
    /// Optional approval gate.
    pub gate: Option<Arc<dyn ToolGate>>,
    /// Default run context (overlaid by the restored and the caller's context).
    pub context: Map<String, Value>,
    /// The version the application gives this agent, recorded with every run it starts.
    pub version: String,
    /// Versions of this agent whose runs it may resume although its fingerprint differs
    /// (see [`Agent::fingerprint`]); a run started by any other, different agent is refused.
    pub compatible_versions: Vec<String>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("model", &self.model)
            .field(
                "tools",
                &self.tools.iter().map(|t| t.spec().name).collect::<Vec<_>>(),
            )
            .field(
                "subagents",
                &self.subagents.iter().map(|a| &a.name).collect::<Vec<_>>(),
            )
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent with default limits and policies, no tools.
    pub fn new(
        name: impl Into<String>,
        instructions: impl Into<String>,
        model: impl Into<String>,
        llm: Arc<dyn LlmClient>,
    ) -> Self {
        Agent {
            name: name.into(),
            instructions: instructions.into(),
            model: model.into(),
            fallback_models: Vec::new(),
            llm,
            tools: Vec::new(),
            subagents: Vec::new(),
            limits: Limits::default(),
            policies: FailurePolicies::default(),
            gate: None,
            context: Map::new(),
            version: String::new(),
            compatible_versions: Vec::new(),
        }
    }

    /// Set the agent's version (builder style).
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Declare that this agent may resume runs started by these versions of it, whatever
    /// changed between them (builder style; adds to the list).
    pub fn compatible_with<S: Into<String>>(
        mut self,
        versions: impl IntoIterator<Item = S>,
    ) -> Self {
        self.compatible_versions
            .extend(versions.into_iter().map(Into::into));
        self
    }

    /// A fingerprint of what shapes a run's transcript: the name, instructions, models, every
    /// tool's spec (name, description, parameters) with its effect policy, and each subagent's
    /// name and fingerprint. SHA-256 hex of their canonical JSON. The model client, limits,
    /// policies, gate and context are not part of it: they can change between processes
    /// without making a stored transcript mean something else.
    pub fn fingerprint(&self) -> String {
        let specs: Vec<ToolSpec> = self.tools.iter().map(|t| t.spec()).collect();
        self.fingerprint_with(&specs)
    }

    /// [`Agent::fingerprint`] from the specs of the agent's tools, already asked for (the
    /// runner asks each tool for its spec once per run).
    pub(crate) fn fingerprint_with(&self, tool_specs: &[ToolSpec]) -> String {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .zip(tool_specs)
            .map(|(t, spec)| {
                let policy = match t.effect_policy() {
                    EffectPolicy::Idempotent => "idempotent",
                    EffectPolicy::AtMostOnce => "at_most_once",
                };
                json!({"name": spec.name, "description": spec.description,
                    "parameters": spec.parameters, "effect_policy": policy})
            })
            .collect();
        let subagents: Vec<Value> = self
            .subagents
            .iter()
            .map(|a| json!({"name": a.name, "fingerprint": a.fingerprint()}))
            .collect();
        json_hash(
            &json!({"name": self.name, "instructions": self.instructions,
            "model": self.model, "fallback_models": self.fallback_models,
            "tools": tools, "subagents": subagents}),
        )
    }

    /// The identity a run of this agent records (name, version, [`Agent::fingerprint`]).
    pub fn identity(&self) -> AgentIdentity {
        self.identity_with(self.fingerprint())
    }

    /// The identity with a fingerprint already computed.
    pub(crate) fn identity_with(&self, fingerprint: String) -> AgentIdentity {
        AgentIdentity {
            name: self.name.clone(),
            version: self.version.clone(),
            fingerprint,
        }
    }

    /// Whether this agent may resume a run the agent `stored` started: the same fingerprint,
    /// or a version this agent declares compatible.
    pub fn accepts(&self, stored: &AgentIdentity, fingerprint: &str) -> bool {
        stored.fingerprint == fingerprint || self.compatible_versions.contains(&stored.version)
    }

    /// Add a tool (builder style).
    pub fn with_tool(mut self, tool: ToolRef) -> Self {
        self.tools.push(tool);
        self
    }

    /// Add a subagent (builder style).
    pub fn with_subagent(mut self, agent: Agent) -> Self {
        self.subagents.push(agent);
        self
    }

    /// Set the approval gate (builder style).
    pub fn with_gate(mut self, gate: Arc<dyn ToolGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The tool named `name`, if any.
    pub fn tool(&self, name: &str) -> Option<&ToolRef> {
        self.tools.iter().find(|t| t.spec().name == name)
    }

    /// The subagent named `name`, if any.
    pub fn subagent(&self, name: &str) -> Option<&Agent> {
        self.subagents.iter().find(|a| a.name == name)
    }

    /// Model candidates in order, deduplicated.
    pub fn model_candidates(&self) -> Vec<String> {
        self.candidates().cloned().collect()
    }

    /// [`Agent::model_candidates`], borrowed.
    pub(crate) fn candidates(&self) -> impl Iterator<Item = &String> {
        let all = || std::iter::once(&self.model).chain(&self.fallback_models);
        all()
            .enumerate()
            .filter(move |&(i, m)| !all().take(i).any(|earlier| earlier == m))
            .map(|(_, m)| m)
    }
}
