//! Replaying the AFK golden fixtures (`fixtures/afk-python/`) at the resume level: load a
//! fixture's stored state into a store, resume it with the fixture's scripted model and tools,
//! and compare with its `expect` block (and, for completed resumes, with the uninterrupted
//! result). Every expectation comes from the fixture itself (its `expect` block and script),
//! never from its name. The tools are the caller's: a team checks its own AFK corpus with its
//! own tool implementations ([`scripted_tools`] are the `add` and `echo` of AFK's corpus).
//! Used by the `afk fixtures check` command, the conformance suite's corpus level and the
//! core test-suite. [`resume_fixture`] is the resume alone (for a run stored some other way:
//! migrated, exported, on another store), and [`result_essence`] what two results of one run
//! must share.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use super::tool::{EffectPolicy, Tool, ToolContext, ToolError, ToolRef, ToolSpec};
use super::{Agent, ManualClock, Outcome, Runner, RunnerConfig, SequentialIds};
use crate::error::{Error, ErrorKind, Result};
use crate::fixture::{Fixture, rejected_keys};
use crate::ids::{RunId, ThreadId};
use crate::schema::AgentResult;
use crate::store::Store;

use crate::fixture::load_state;

/// The verdict on one fixture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureVerdict {
    /// The fixture's `name`.
    pub name: String,
    /// Every expectation that did not hold (empty: passed).
    pub problems: Vec<String>,
    /// Tools the fixture's script calls that the caller did not give: the fixture was not
    /// resumed (neither passed nor failed).
    pub missing_tools: Vec<String>,
}

impl FixtureVerdict {
    /// Whether the fixture was resumed and every expectation held.
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.missing_tools.is_empty()
    }
}

/// The tools of AFK's own corpus (`script.tools` of `fixtures/afk-python`): `add` and `echo`.
pub fn scripted_tools() -> Vec<ToolRef> {
    let counter = InvocationCounter::new();
    vec![
        ScriptedTool::add(counter.clone()),
        ScriptedTool::echo(counter),
    ]
}

/// The tool names a fixture's script needs: the keys of `script.tools` and every
/// `tool_calls[].tool_name` of `script.responses`.
pub fn tools_needed(fixture: &Value) -> BTreeSet<String> {
    let script = fixture.get("script");
    let mut names: BTreeSet<String> = script
        .and_then(|s| s.get("tools"))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let responses = script
        .and_then(|s| s.get("responses"))
        .and_then(Value::as_array);
    for r in responses.into_iter().flatten() {
        let calls = r.get("tool_calls").and_then(Value::as_array);
        for c in calls.into_iter().flatten() {
            if let Some(n) = c.get("tool_name").and_then(Value::as_str) {
                names.insert(n.to_owned());
            }
        }
    }
    names
}

/// Executions per tool call id.
type Executions = Arc<Mutex<BTreeMap<String, u64>>>;

/// A caller's tool, counting its real executions per call id.
#[derive(Debug)]
struct Counted {
    inner: ToolRef,
    executions: Executions,
}

#[async_trait]
impl Tool for Counted {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    fn effect_policy(&self) -> EffectPolicy {
        self.inner.effect_policy()
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> std::result::Result<Value, ToolError> {
        if let Ok(mut m) = self.executions.lock() {
            *m.entry(ctx.tool_call_id.clone()).or_insert(0) += 1;
        }
        self.inner.call(ctx, args).await
    }
}

fn field<'a>(v: &'a Value, k: &str) -> Result<&'a Value> {
    v.get(k)
        .ok_or_else(|| Error::invalid_input(format!("fixture has no {k:?}")))
}

fn max_timestamp(state: &Map<String, Value>) -> u64 {
    state
        .values()
        .filter_map(|v| v.get("timestamp_ms").and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

/// Resume one fixture (a parsed fixture file) on `store` (empty, fresh) with the caller's
/// `tools` and check it against its `expect` block: outcome; for an error, its kind (AFK's
/// `AgentCheckpointCorruptionError` is `Corrupt` or `NotFound`) and, when stored records are
/// rejected as corrupt ([`rejected_keys`]), that it names one of them; model calls and tool
/// executions during the resume; for a completed resume, final text, state, replayed
/// effects and the uninterrupted result.
///
/// A fixture whose script calls a tool not in `tools` is not resumed: its verdict lists the
/// [`missing_tools`](FixtureVerdict::missing_tools). Errors are problems with the fixture file
/// itself, not failed expectations.
pub async fn check_fixture(
    fixture: &Value,
    store: Arc<dyn Store>,
    tools: &[ToolRef],
) -> Result<FixtureVerdict> {
    let name = field(fixture, "name")?.as_str().unwrap_or("?").to_owned();
    let given: BTreeSet<String> = tools.iter().map(|t| t.spec().name).collect();
    let missing_tools: Vec<String> = tools_needed(fixture)
        .into_iter()
        .filter(|n| !given.contains(n))
        .collect();
    if !missing_tools.is_empty() {
        return Ok(FixtureVerdict {
            name,
            problems: Vec::new(),
            missing_tools,
        });
    }
    let rejected = serde_json::from_value::<Fixture>(fixture.clone())
        .map(|f| rejected_keys(&f))
        .unwrap_or_default();
    let thread = ThreadId::new(field(fixture, "thread_id")?.as_str().unwrap_or(""))?;
    RunId::new(field(fixture, "run_id")?.as_str().unwrap_or(""))?;
    let state = field(fixture, "state")?
        .as_object()
        .ok_or_else(|| Error::invalid_input("fixture state is not an object"))?;
    let expect = field(fixture, "expect")?;
    field(fixture, "script")?;
    load_state(store.as_ref(), &thread, state).await?;

    let FixtureResume {
        outcome: res,
        llm_calls,
        tool_executions: ran,
    } = resume_fixture(fixture, store, &thread, tools).await?;

    let mut problems = Vec::new();
    check_outcome(&res, fixture, &rejected, &mut problems);
    check_counts(expect, llm_calls, &ran, &mut problems);
    Ok(FixtureVerdict {
        name,
        problems,
        missing_tools,
    })
}

/// Compare the resume's outcome with the fixture's `expect` block: the outcome, the result
/// of a completed run, the kind and key of an error.
fn check_outcome(
    res: &Result<Outcome>,
    fixture: &Value,
    rejected: &[String],
    problems: &mut Vec<String>,
) {
    let expect = fixture.get("expect").unwrap_or(&Value::Null);
    let want_outcome = expect.get("outcome").and_then(Value::as_str).unwrap_or("");
    match (res, want_outcome) {
        (Ok(Outcome::Completed(r)), "completed") => {
            compare_result(r, expect, fixture.get("uninterrupted"), problems);
        }
        (Err(e), "error") => {
            let error_type = expect.get("error_type").and_then(Value::as_str);
            let corruption = matches!(error_type, None | Some("AgentCheckpointCorruptionError"));
            if corruption && !matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::NotFound) {
                problems.push(format!(
                    "error kind {} (want corrupt or not_found): {e}",
                    e.kind()
                ));
            }
            if !rejected.is_empty() && !e.key().is_some_and(|k| rejected.iter().any(|r| r == k)) {
                problems.push(format!(
                    "error {e} does not name a rejected record ({rejected:?})"
                ));
            }
        }
        (Ok(o), want) => problems.push(format!("outcome {o:?}, want {want}")),
        (Err(e), want) => problems.push(format!("error {e}, want {want}")),
    }
}

/// Compare what the resume ran (model calls, tool executions by name) with the fixture's
/// `expect` block.
fn check_counts(
    expect: &Value,
    llm_calls: u64,
    ran: &BTreeMap<String, u64>,
    problems: &mut Vec<String>,
) {
    let want_llm = expect
        .get("llm_calls_during_resume")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if llm_calls != want_llm {
        problems.push(format!("llm calls {llm_calls} (want {want_llm})"));
    }
    let mut want_tools = BTreeMap::new();
    if let Some(Value::Object(m)) = expect.get("tool_invocations_during_resume") {
        for (k, v) in m {
            want_tools.insert(k.clone(), v.as_u64().unwrap_or(0));
        }
    }
    if *ran != want_tools {
        problems.push(format!("tool executions {ran:?} (want {want_tools:?})"));
    }
}

/// What resuming a fixture's run gave ([`resume_fixture`]): the outcome, and what the resume
/// itself ran.
#[derive(Debug)]
#[non_exhaustive]
pub struct FixtureResume {
    /// The resume's outcome, or its error.
    pub outcome: Result<Outcome>,
    /// Model calls the resume made.
    pub llm_calls: u64,
    /// Real tool executions during the resume, per tool call id.
    pub tool_executions: BTreeMap<String, u64>,
}

impl FixtureResume {
    /// One JSON document to compare two resumes of the same run by (say, before and after a
    /// migration, or on two stores): the [`result_essence`] of a completed run (`null`
    /// otherwise, with `"outcome"` saying what happened) and the resume's own model calls
    /// and tool executions.
    pub fn summary(&self) -> Value {
        let (outcome, essence) = match &self.outcome {
            Ok(Outcome::Completed(r)) => ("completed".to_owned(), result_essence(r)),
            Ok(other) => (format!("{other:?}"), Value::Null),
            Err(e) => (format!("error: {e}"), Value::Null),
        };
        json!({"outcome": outcome, "result": essence, "resume_llm_calls": self.llm_calls,
            "resume_tool_executions": self.tool_executions})
    }
}

/// Resume the fixture's run (`run_id`), already stored in `thread` of `store` (by
/// [`load_state`], or migrated, exported, …), with the fixture's scripted model and the
/// caller's `tools`, counting what the resume runs. The agent is named as the run's
/// `run_started` record says; the clock stands at the newest stored timestamp, so wall-time
/// budgets stay meaningful. Checks nothing: see [`check_fixture`] for the `expect` block.
///
/// Errors: the fixture has no `run_id` or `script.responses`, or they are malformed.
pub async fn resume_fixture(
    fixture: &Value,
    store: Arc<dyn Store>,
    thread: &ThreadId,
    tools: &[ToolRef],
) -> Result<FixtureResume> {
    let run = RunId::new(field(fixture, "run_id")?.as_str().unwrap_or(""))?;
    let empty = Map::new();
    let state = fixture
        .get("state")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let llm = ScriptedLlm::from_fixture_responses(field(field(fixture, "script")?, "responses")?)?;
    let executions = Executions::default();
    let agent_name = state
        .get(&format!("checkpoint:{run}:0:run_started"))
        .and_then(|r| r.get("payload").and_then(|p| p.get("agent_name")))
        .and_then(Value::as_str)
        .unwrap_or("agent")
        .to_owned();
    let mut agent = Agent::new(agent_name, "", "unknown", llm.clone());
    for tool in tools {
        agent = agent.with_tool(Arc::new(Counted {
            inner: tool.clone(),
            executions: executions.clone(),
        }));
    }
    // Old timestamps: a clock standing at the newest stored record keeps the wall-time budget
    // meaningful (active time is what the records say, plus nothing).
    let config = RunnerConfig {
        clock: ManualClock::new(max_timestamp(state)),
        ids: Arc::new(SequentialIds::default()),
        ..RunnerConfig::default()
    };
    let outcome = Runner::new(store, config)
        .resume(&agent, thread, &run)
        .result()
        .await;
    let tool_executions = executions.lock().map(|m| m.clone()).unwrap_or_default();
    Ok(FixtureResume {
        outcome,
        llm_calls: llm.calls(),
        tool_executions,
    })
}

/// The parts of a run's result that a crash, a resume, a migration or another store must not
/// change: final text, status, step, usage, model and tool call counts, every tool execution
/// (name, call id, success, output, error) and the session token. Compare two of them with
/// `==`; the keys are for reading a failed comparison.
pub fn result_essence(r: &AgentResult) -> Value {
    let tools: Vec<Value> = r
        .tool_executions
        .iter()
        .map(|t| json!([t.tool_name, t.tool_call_id, t.success, t.output, t.error]))
        .collect();
    json!({"text": r.final_text, "state": r.state, "step": r.state_snapshot.step,
        "usage": serde_json::to_value(&r.usage_aggregate).ok(),
        "llm_calls": r.state_snapshot.llm_calls, "tool_calls": r.state_snapshot.tool_calls,
        "records": tools, "session": r.session_token})
}

fn compare_result(
    r: &AgentResult,
    expect: &Value,
    unint: Option<&Value>,
    problems: &mut Vec<String>,
) {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    if Some(r.final_text.clone()) != s(expect, "final_text") {
        problems.push(format!(
            "final_text {:?} (want {:?})",
            r.final_text,
            s(expect, "final_text")
        ));
    }
    if Some(r.state.as_str()) != s(expect, "state").as_deref() {
        problems.push(format!(
            "state {:?} (want {:?})",
            r.state.as_str(),
            s(expect, "state")
        ));
    }
    let want_rep = expect.get("replayed_effect_count").and_then(Value::as_u64);
    if Some(r.state_snapshot.replayed_effect_count) != want_rep {
        problems.push(format!(
            "replayed_effect_count {} (want {want_rep:?})",
            r.state_snapshot.replayed_effect_count
        ));
    }
    // Completed resumes of a completed run reproduce the uninterrupted result.
    let Some(u) = unint.filter(|u| u.get("state").and_then(Value::as_str) == Some("completed"))
    else {
        return;
    };
    if r.state != "completed" {
        return;
    }
    let Ok(got) = serde_json::to_value(r) else {
        problems.push("result does not serialize".to_owned());
        return;
    };
    for k in ["usage_aggregate", "session_token"] {
        if got.get(k) != u.get(k) {
            problems.push(format!(
                "{k} {:?} (uninterrupted {:?})",
                got.get(k),
                u.get(k)
            ));
        }
    }
    for k in ["llm_calls", "tool_calls"] {
        let g = got.get("state_snapshot").and_then(|x| x.get(k));
        let w = u.get("state_snapshot").and_then(|x| x.get(k));
        if g != w {
            problems.push(format!("state_snapshot.{k} {g:?} (uninterrupted {w:?})"));
        }
    }
    let strip = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .map(|row| {
                        let mut m = Map::new();
                        for k in ["tool_name", "tool_call_id", "success", "output", "error"] {
                            m.insert(k.to_owned(), row.get(k).cloned().unwrap_or(Value::Null));
                        }
                        Value::Object(m)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (g, w) = (
        strip(got.get("tool_executions")),
        strip(u.get("tool_executions")),
    );
    if g != w {
        problems.push(format!("tool records {g:?} (uninterrupted {w:?})"));
    }
}
