//! Replaying the AFK golden fixtures (`fixtures/afk-python/`) at the resume level: load a
//! fixture's stored state into a store, resume it with the fixture's scripted model and tools,
//! and compare with its `expect` block (and, for completed resumes, with the uninterrupted
//! result). Used by the `afk fixtures check` command and the core test-suite.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use super::{Agent, ManualClock, Outcome, Runner, RunnerConfig, SequentialIds};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::schema::AgentResult;
use crate::store::Store;

pub use crate::fixture::load_state;

/// The verdict on one fixture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureVerdict {
    /// The fixture's `name`.
    pub name: String,
    /// Every expectation that did not hold (empty: passed).
    pub problems: Vec<String>,
}

impl FixtureVerdict {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
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

/// Resume one fixture (a parsed fixture file) on `store` (empty, fresh) and check it.
/// Errors are problems with the fixture file itself, not failed expectations.
pub async fn check_fixture(fixture: &Value, store: Arc<dyn Store>) -> Result<FixtureVerdict> {
    let name = field(fixture, "name")?.as_str().unwrap_or("?").to_owned();
    let thread = ThreadId::new(field(fixture, "thread_id")?.as_str().unwrap_or(""))?;
    let run = RunId::new(field(fixture, "run_id")?.as_str().unwrap_or(""))?;
    let state = field(fixture, "state")?
        .as_object()
        .ok_or_else(|| Error::invalid_input("fixture state is not an object"))?;
    let expect = field(fixture, "expect")?;
    let script = field(fixture, "script")?;
    load_state(store.as_ref(), &thread, state).await?;

    let llm = ScriptedLlm::from_fixture_responses(field(script, "responses")?)?;
    let counter = InvocationCounter::new();
    let agent_name = state
        .get(&format!("checkpoint:{run}:0:run_started"))
        .and_then(|r| r.get("payload").and_then(|p| p.get("agent_name")))
        .and_then(Value::as_str)
        .unwrap_or("agent")
        .to_owned();
    let agent = Agent::new(agent_name, "", "unknown", llm.clone())
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_tool(ScriptedTool::echo(counter.clone()));
    // Old timestamps: a clock standing at the newest stored record keeps the wall-time budget
    // meaningful (active time is what the records say, plus nothing).
    let config = RunnerConfig {
        clock: ManualClock::new(max_timestamp(state)),
        ids: Arc::new(SequentialIds::default()),
        ..RunnerConfig::default()
    };
    let runner = Runner::new(store, config);
    let res = runner.resume(&agent, &thread, &run).result().await;

    let mut problems = Vec::new();
    let want_outcome = expect.get("outcome").and_then(Value::as_str).unwrap_or("");
    match (&res, want_outcome) {
        (Ok(Outcome::Completed(r)), "completed") => {
            compare_result(r, expect, fixture.get("uninterrupted"), &mut problems);
        }
        (Err(e), "error") => {
            if !matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::NotFound) {
                problems.push(format!(
                    "error kind {} (want corrupt or not_found): {e}",
                    e.kind()
                ));
            }
        }
        (Ok(o), want) => problems.push(format!("outcome {o:?}, want {want}")),
        (Err(e), want) => problems.push(format!("error {e}, want {want}")),
    }
    let want_llm = expect
        .get("llm_calls_during_resume")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if llm.calls() != want_llm {
        problems.push(format!("llm calls {} (want {want_llm})", llm.calls()));
    }
    let mut want_tools = BTreeMap::new();
    if let Some(Value::Object(m)) = expect.get("tool_invocations_during_resume") {
        for (k, v) in m {
            want_tools.insert(k.clone(), v.as_u64().unwrap_or(0));
        }
    }
    if counter.snapshot() != want_tools {
        problems.push(format!(
            "tool executions {:?} (want {want_tools:?})",
            counter.snapshot()
        ));
    }
    Ok(FixtureVerdict { name, problems })
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
    if Some(r.state.clone()) != s(expect, "state") {
        problems.push(format!(
            "state {:?} (want {:?})",
            r.state,
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
