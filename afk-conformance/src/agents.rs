//! Scripted agents for the runner levels (resume, corruption, concurrency): a [`Script`] of
//! model turns and tool calls, the tools it calls (counting every real execution), and the
//! helpers that drive a run to its end and read what a run left in a store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use afk_core::normalize::normalize_record;
use afk_core::runner::scripted::ScriptedLlm;
use afk_core::runner::{
    Agent, Decision, EffectPolicy, GateDecision, Outcome, RunEvent, RunHandle, Runner, Settlement,
    Tool, ToolContext, ToolError, ToolGate, ToolSpec,
};
use afk_core::schema::{AgentResult, LlmResponse, Phase, ToolCall, TranscriptEntry};
use afk_core::store::{MAX_LIST_LIMIT, RetryPolicy, Store};
use afk_core::testkit::deterministic_runner;
use afk_core::{CheckpointConfig, RunId, ThreadId};
use async_trait::async_trait;
use serde_json::{Value, json};

/// The tools a script may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolKind {
    /// Idempotent, returns `{"result": a + b}`.
    Add,
    /// Idempotent, returns `{"echo": text}`.
    Echo,
    /// Idempotent, always fails.
    Fail,
    /// At most once, returns `{"charged": amount}`.
    Charge,
    /// Idempotent, needs a human's approval first (the gate pauses the run).
    Wire,
}

impl ToolKind {
    pub(crate) const ALL: [ToolKind; 5] = [
        ToolKind::Add,
        ToolKind::Echo,
        ToolKind::Fail,
        ToolKind::Charge,
        ToolKind::Wire,
    ];

    fn name(self) -> &'static str {
        match self {
            ToolKind::Add => "add",
            ToolKind::Echo => "echo",
            ToolKind::Fail => "fail",
            ToolKind::Charge => "charge",
            ToolKind::Wire => "wire",
        }
    }

    fn args(self, n: i64) -> Value {
        match self {
            ToolKind::Add => json!({"a": n, "b": 2}),
            ToolKind::Echo => json!({"text": format!("hello {n}")}),
            ToolKind::Fail | ToolKind::Charge | ToolKind::Wire => json!({"amount": n}),
        }
    }
}

/// A scripted run: each batch is one model turn asking for those tool calls (two or more run
/// in parallel), then a final answer. `batches.len() + 1` model turns in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Script {
    pub batches: Vec<Vec<(ToolKind, i64)>>,
}

impl Script {
    /// The call id of call `j` of batch `i`: unique within the run.
    pub(crate) fn call_id(i: usize, j: usize) -> String {
        format!("c{i}_{j}")
    }

    /// The model's answers, in `assistant_count` order.
    pub(crate) fn responses(&self) -> Result<Vec<LlmResponse>, String> {
        let mut out = Vec::with_capacity(self.batches.len() + 1);
        for (i, batch) in self.batches.iter().enumerate() {
            let calls: Vec<Value> = batch
                .iter()
                .enumerate()
                .map(|(j, (kind, n))| {
                    json!({"id": Script::call_id(i, j), "tool_name": kind.name(),
                        "arguments": kind.args(*n)})
                })
                .collect();
            out.push(
                json!({"text": format!("turn {i}"), "finish_reason": "tool_calls",
                "session_token": format!("s{i}"), "tool_calls": calls,
                "usage": {"input_tokens": 10 + i, "output_tokens": 3, "total_tokens": 13 + i}}),
            );
        }
        out.push(
            json!({"text": format!("done after {} turns", self.batches.len()),
            "finish_reason": "stop", "tool_calls": [],
            "usage": {"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}}),
        );
        out.into_iter()
            .map(|v| serde_json::from_value(v).map_err(|e| format!("scripted response: {e}")))
            .collect()
    }

    /// Whether the call `id` is an at-most-once call.
    pub(crate) fn is_charge(&self, id: &str) -> bool {
        self.batches.iter().enumerate().any(|(b, batch)| {
            batch
                .iter()
                .enumerate()
                .any(|(j, (kind, _))| *kind == ToolKind::Charge && Script::call_id(b, j) == id)
        })
    }

    /// What the at-most-once call `id` returns when it runs (an operator settling the call as
    /// `Ran` records this), or `None` if `id` is no such call.
    pub(crate) fn charge_output(&self, id: &str) -> Option<Value> {
        self.batches.iter().enumerate().find_map(|(b, batch)| {
            batch.iter().enumerate().find_map(|(j, (kind, n))| {
                (*kind == ToolKind::Charge && Script::call_id(b, j) == id)
                    .then(|| json!({"charged": n}))
            })
        })
    }

    /// Whether some call is at-most-once (a crash may then end in `EffectUncertain`).
    pub(crate) fn has_charge(&self) -> bool {
        self.batches
            .iter()
            .flatten()
            .any(|(k, _)| *k == ToolKind::Charge)
    }
}

/// Real executions per call id, shared by every tool of every process of one scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<BTreeMap<String, u64>>>);

impl Calls {
    fn bump(&self, id: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_insert(0) += 1;
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Executions since `before`, per call id (only ids that ran).
    pub(crate) fn since(&self, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        self.snapshot()
            .into_iter()
            .map(|(id, n)| {
                let d = n - before.get(&id).copied().unwrap_or(0);
                (id, d)
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[derive(Debug)]
struct ConfTool {
    kind: ToolKind,
    calls: Calls,
    delay: Duration,
}

#[async_trait]
impl Tool for ConfTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.kind.name().to_owned(),
            description: format!("conformance tool {}", self.kind.name()),
            parameters: json!({"type": "object"}),
        }
    }

    fn effect_policy(&self) -> EffectPolicy {
        match self.kind {
            ToolKind::Charge => EffectPolicy::AtMostOnce,
            _ => EffectPolicy::Idempotent,
        }
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.calls.bump(&ctx.tool_call_id);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let num = |k: &str| args.get(k).and_then(Value::as_i64);
        match self.kind {
            ToolKind::Add => match (num("a"), num("b")) {
                (Some(a), Some(b)) => Ok(json!({"result": a + b})),
                _ => Err(ToolError::new("a and b must be integers")),
            },
            ToolKind::Echo => Ok(json!({"echo": args.get("text").cloned()})),
            ToolKind::Fail => Err(ToolError::new("scripted failure")),
            ToolKind::Charge => Ok(json!({"charged": num("amount")})),
            ToolKind::Wire => Ok(json!({"wired": num("amount")})),
        }
    }
}

/// Pauses every `wire` call for a human's approval.
#[derive(Debug)]
struct WireGate;

impl ToolGate for WireGate {
    fn decide(&self, _step: u64, call: &ToolCall) -> GateDecision {
        if call.tool_name == ToolKind::Wire.name() {
            GateDecision::RequestApproval("wire needs approval".into())
        } else {
            GateDecision::Allow
        }
    }
}

/// One process's agent: a fresh scripted model (its own request log) and tools counting
/// into the scenario's shared [`Calls`].
#[derive(Debug)]
pub(crate) struct Rig {
    pub llm: Arc<ScriptedLlm>,
    pub agent: Agent,
}

impl Rig {
    pub(crate) fn new(script: &Script, calls: &Calls, delay: Duration) -> Result<Rig, String> {
        let llm = ScriptedLlm::new(script.responses()?);
        let mut agent = Agent::new("conformance", "Follow the script.", "m1", llm.clone())
            .with_gate(Arc::new(WireGate));
        for kind in ToolKind::ALL {
            agent = agent.with_tool(Arc::new(ConfTool {
                kind,
                calls: calls.clone(),
                delay,
            }));
        }
        Ok(Rig { llm, agent })
    }
}

/// A runner with synchronous checkpoint writes (every commit is made before the run goes on,
/// so a crash point is a commit count), no write retries and a fixed clock.
pub(crate) fn runner(store: Arc<dyn Store>) -> Runner {
    let checkpoint = CheckpointConfig::default()
        .with_async_writes(false)
        .with_retry(RetryPolicy::none());
    deterministic_runner(store, checkpoint)
}

/// What one process did: its result and every event it emitted.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub result: afk_core::Result<Outcome>,
    pub events: Vec<RunEvent>,
}

impl Attempt {
    /// Whether this process finished the run itself (not a stored result handed back).
    pub(crate) fn finished(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, RunEvent::Finished { .. }))
    }

    /// Whether some tool output came from the effect journal.
    pub(crate) fn replayed(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolCompleted { replayed: true, .. }))
    }

    /// Whether the model answered (or a saved answer was used) for `step`.
    pub(crate) fn answered(&self, step: u64) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, RunEvent::LlmCompleted { step: s, .. } if *s == step))
    }
}

/// How a process starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    Fresh,
    Resume,
    Approve,
    /// An operator settles the uncertain call `call`: it ran and returned `output`, or (no
    /// output) it did not run.
    Settle {
        call: String,
        output: Option<Value>,
    },
}

/// Run one process to its end (or pause) and collect its events.
pub(crate) async fn attempt(
    runner: &Runner,
    agent: &Agent,
    thread: &ThreadId,
    run: &RunId,
    start: &Start,
) -> Attempt {
    let mut handle: RunHandle = match start {
        Start::Fresh => runner.run_with_id(agent, thread, run.clone(), "go"),
        Start::Resume => runner.resume(agent, thread, run),
        Start::Approve => runner.resume_with_decision(agent, thread, run, Decision::Approve),
        Start::Settle { call, output } => {
            let s = match output {
                Some(output) => Settlement::Ran {
                    output: output.clone(),
                },
                None => Settlement::DidNotRun,
            };
            runner.resume_settling(agent, thread, run, call.clone(), s)
        }
    };
    let mut rx = handle.events();
    let result = handle.result().await;
    let mut events = Vec::new();
    if let Some(rx) = rx.as_mut() {
        while let Ok(ev) = rx.try_recv() {
            events.push(ev);
        }
    }
    Attempt { result, events }
}

/// Drive a run without crashes: start it, approve every pause, until it completes.
pub(crate) async fn drive(
    store: Arc<dyn Store>,
    script: &Script,
    thread: &ThreadId,
    run: &RunId,
) -> Result<AgentResult, String> {
    let calls = Calls::default();
    let rig = Rig::new(script, &calls, Duration::ZERO)?;
    let runner = runner(store);
    let mut start = Start::Fresh;
    for _ in 0..32 {
        let a = attempt(&runner, &rig.agent, thread, run, &start).await;
        match a.result {
            Ok(Outcome::Completed(r)) => return Ok(*r),
            Ok(Outcome::Paused { .. }) => start = Start::Approve,
            Ok(other) => return Err(format!("uncrashed run of {script:?} ended {other:?}")),
            Err(e) => return Err(format!("uncrashed run of {script:?} failed: {e}")),
        }
    }
    Err(format!("uncrashed run of {script:?} paused 32 times"))
}

/// The parts of a result a crash must not change.
pub(crate) use afk_core::runner::fixture_check::result_essence as essence;

/// Every key and value of `thread` (fence keys included), read through the store.
pub(crate) async fn dump(
    store: &dyn Store,
    thread: &ThreadId,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let keys = crate::support::list_all(store, thread, "", MAX_LIST_LIMIT).await?;
    let values = store
        .get_many(thread, &keys)
        .await
        .map_err(|e| format!("get_many of {} keys: {e}", keys.len()))?;
    Ok(keys
        .into_iter()
        .zip(values)
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect())
}

/// What a run's stored state says, as far as the resume properties care.
#[derive(Debug, Default, Clone)]
pub(crate) struct Durable {
    /// Call ids whose successful result is in the effect journal.
    pub results: Vec<String>,
    /// Call ids whose intent is in the journal without a result.
    pub intents: Vec<String>,
    /// Script indexes (`assistant_count`) of the model answers the state holds.
    pub answers: Vec<usize>,
    /// The step of the newest snapshot, if it holds a pending model answer.
    pub pending_step: Option<u64>,
}

/// What the store under test holds, rebuilt from the commits it accepted (the
/// [`FaultStore`](afk_core::store::FaultStore) log of every process), so the properties can be
/// checked before each process without reading the whole thread back (on a remote store
/// that costs a request per key); compared with the store itself at the end of a case.
#[derive(Debug, Default, Clone)]
pub(crate) struct Mirror {
    pub keys: BTreeMap<String, Vec<u8>>,
}

impl Mirror {
    /// Apply the commits one process's store wrapper saw accepted.
    pub(crate) fn apply(&mut self, log: &[afk_core::store::FaultEvent]) {
        for e in log {
            if let afk_core::store::FaultEvent::Commit(c) = e {
                for (k, v) in &c.puts {
                    self.keys.insert(k.clone(), v.clone());
                }
                if let Some(l) = &c.latest {
                    self.keys
                        .insert(afk_core::store::latest_key(&c.run), l.clone());
                }
            }
        }
    }

    /// Whether `run` has a latest pointer (it committed something).
    pub(crate) fn exists(&self, run: &RunId) -> bool {
        self.keys.contains_key(&afk_core::store::latest_key(run))
    }

    /// Whether `run` holds a snapshot of `step`.
    pub(crate) fn has_snapshot(&self, run: &RunId, step: u64) -> bool {
        self.keys.contains_key(&format!(
            "checkpoint:{run}:{step}:{}",
            Phase::RuntimeState.as_str()
        ))
    }
}

/// What `run` left in a thread, from the thread's keys and values.
pub(crate) fn durable_in(
    all: &BTreeMap<String, Vec<u8>>,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Durable, String> {
    let mut out = Durable::default();
    let effect_prefix = format!("effect:{run}:");
    let ckpt_prefix = format!("checkpoint:{run}:");
    let mut newest: Option<(u64, &str, &[u8])> = None;
    for (key, value) in all {
        if let Some(rest) = key.strip_prefix(&effect_prefix) {
            let id = rest.rsplit(':').next().unwrap_or_default().to_owned();
            let row: Value = serde_json::from_slice(value)
                .map_err(|e| format!("effect row {key} is not JSON: {e}"))?;
            match row.get("status").and_then(Value::as_str) {
                Some("intent") => out.intents.push(id),
                None | Some("done") if row.get("success") == Some(&Value::Bool(true)) => {
                    out.results.push(id)
                }
                _ => {}
            }
        } else if let Some(rest) = key.strip_prefix(&ckpt_prefix)
            && let Some((step, phase)) = rest.split_once(':')
            && phase == Phase::RuntimeState.as_str()
            && let Ok(step) = step.parse::<u64>()
            && newest.is_none_or(|(s, _, _)| step > s)
        {
            newest = Some((step, key, value));
        }
    }
    if let Some((step, key, bytes)) = newest {
        let rec =
            normalize_record(bytes, thread, key).map_err(|e| format!("snapshot {key}: {e}"))?;
        let Some(snap) = rec.snapshot() else {
            return Err(format!("snapshot {key} has no runtime_state payload"));
        };
        // The model answers by `assistant_count`: the transcript holds answers 0..n, and a
        // pending answer is answer n.
        let assistant = |m: &afk_core::schema::Message| m.role == afk_core::schema::Role::Assistant;
        let n = match &snap.transcript {
            Some(tref) => {
                let mut n = 0;
                for i in 0..tref.len {
                    let k = afk_core::keys::messages_key(run, i);
                    let bytes = all
                        .get(&k)
                        .ok_or(format!("transcript entry {k} is missing"))?;
                    let e: TranscriptEntry = serde_json::from_slice(bytes)
                        .map_err(|e| format!("transcript entry {k}: {e}"))?;
                    n += e.messages.iter().filter(|m| assistant(m)).count();
                }
                n
            }
            None => snap
                .messages
                .iter()
                .flatten()
                .filter(|m| assistant(m))
                .count(),
        };
        let pending = snap.pending_llm_response.is_some();
        out.answers = (0..n + usize::from(pending)).collect();
        out.pending_step = pending.then_some(step);
    }
    Ok(out)
}
