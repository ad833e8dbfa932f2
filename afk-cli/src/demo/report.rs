//! The demo's plain-language lines. Every number printed comes from a counter or the store.

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Outcome, RunEvent};
use afk_core::schema::{AgentResult, EffectStatus};
use afk_core::store::{Store, StoreExt};
use afk_core::{ErrorKind, Result, RunId, ThreadId};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::script::{CALLS, tool_of};
use crate::common::{latest, newest_snapshot};

/// What one process did: its model, its tool counter, its events.
pub struct Process {
    pub llm: Arc<ScriptedLlm>,
    pub tools: InvocationCounter,
    pub events: Vec<RunEvent>,
}

/// Every event still buffered in a run's event channel.
pub fn drain(rx: Option<broadcast::Receiver<RunEvent>>) -> Vec<RunEvent> {
    let mut out = Vec::new();
    let Some(mut rx) = rx else { return out };
    loop {
        match rx.try_recv() {
            Ok(e) => out.push(e),
            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => return out,
        }
    }
}

fn times(n: u64) -> String {
    if n == 1 {
        "1 time".to_owned()
    } else {
        format!("{n} times")
    }
}

fn tool_counts(c: &InvocationCounter) -> String {
    CALLS
        .iter()
        .map(|(id, tool, _)| format!("{tool} {}", c.get(id)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the first process ended: the narrative, and the `first_process` fields of `--json`.
pub fn crash(out: &mut String, first: &Result<Outcome>, persisted: u64, p: &Process) -> Value {
    match first {
        Err(e) => say!(
            out,
            "  CRASH: commit #{} failed ({e}); the process is gone, nothing after saved #{persisted} exists",
            persisted + 1
        ),
        Ok(_) => say!(
            out,
            "  no crash: the run finished after {persisted} commits (the crash point is past its end)"
        ),
    }
    say!(
        out,
        "  before the crash: model called {}; tools executed: {}",
        times(p.llm.calls()),
        tool_counts(&p.tools)
    );
    json!({
        "crashed": first.is_err(),
        "error": first.as_ref().err().map(ToString::to_string),
        "commits_saved": persisted,
        "llm_calls": p.llm.calls(),
        "tool_executions": p.tools.snapshot(),
    })
}

/// Describe what the store holds for the run; returns the call ids with a durable result and
/// the `stored` fields of `--json`.
pub async fn stored(
    out: &mut String,
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<(Vec<String>, Value)> {
    let latest = latest(store, thread, run).await?;
    match &latest {
        Some(l) => say!(
            out,
            "  latest pointer: step {} {} (the last record the first process saved)",
            l.step,
            l.phase
        ),
        None => say!(out, "  no latest pointer: nothing of the run was saved"),
    }
    let mut doc = json!({
        "latest": latest.as_ref().map(|l| json!({"step": l.step, "phase": l.phase})),
        "snapshot": null,
    });
    match newest_snapshot(store, thread, run, latest.as_ref()).await? {
        Some(rec) => {
            let pending = rec
                .snapshot()
                .and_then(|s| s.pending_llm_response.as_ref())
                .map_or(0, |r| r.tool_calls.len());
            let msgs = rec
                .snapshot()
                .and_then(|s| s.transcript.as_ref())
                .map_or(0, |t| t.message_count);
            say!(
                out,
                "  newest snapshot: step {}, {msgs} transcript messages{}",
                rec.step,
                if pending > 0 {
                    format!(", the model's answer with {pending} tool call(s) saved as pending")
                } else {
                    String::new()
                }
            );
            doc["snapshot"] = json!({"step": rec.step, "transcript_messages": msgs,
                "pending_tool_calls": pending});
        }
        None => say!(
            out,
            "  no snapshot: the user's request itself was never saved"
        ),
    }
    let mut durable = Vec::new();
    let mut rows = Vec::new();
    let effects = store
        .list_all(thread, &afk_core::keys::effect_prefix(run))
        .await?;
    for (id, tool, policy) in CALLS {
        let key = effects.iter().find(|k| k.ends_with(&format!(":{id}")));
        let row = match key {
            Some(k) => store.get(thread, k).await?,
            None => None,
        };
        let (status, text) = match row.map(|b| afk_core::normalize::normalize_effect_row(&b, id)) {
            None => ("none", "nothing saved".to_owned()),
            Some(Err(e)) => ("unreadable", format!("unreadable row: {e}")),
            Some(Ok(r)) if r.status() == EffectStatus::Intent => (
                "intent",
                "intent saved, no result: it may or may not have run".to_owned(),
            ),
            Some(Ok(r)) => {
                durable.push(id.to_owned());
                (
                    "result",
                    format!("result saved in the effect journal: {}", r.output),
                )
            }
        };
        say!(out, "  {tool} ({policy}, {id}): {text}");
        rows.push(json!({"call": id, "tool": tool, "policy": policy, "status": status}));
    }
    doc["effects"] = json!(rows);
    Ok((durable, doc))
}

/// The resumed run's events, one line each; returns the `model_answers` and `tool_results`
/// fields of `--json`'s `resume`.
pub fn resume_events(out: &mut String, p: &Process) -> [(&'static str, Value); 2] {
    let asked = p.llm.asked();
    let (mut answers, mut results) = (Vec::new(), Vec::new());
    for e in &p.events {
        match e {
            RunEvent::RunStarted { run_id, .. } => say!(out, "  resumed run {run_id}"),
            RunEvent::StepStarted { step } => say!(out, "  step {step} starts"),
            RunEvent::LlmCompleted { step, tool_calls } => {
                let called = asked.contains(&(step.saturating_sub(1) as usize));
                let how = if called {
                    "model called"
                } else {
                    "saved model answer reused (no model call)"
                };
                say!(
                    out,
                    "  step {step}: {how}; it asks for {tool_calls} tool call(s)"
                );
                answers.push(json!({"step": step, "model_called": called}));
            }
            RunEvent::ToolCompleted {
                step,
                tool_call_id,
                success,
                replayed,
            } => {
                let tool = tool_of(tool_call_id);
                let what = if *replayed {
                    "result replayed from the effect journal, not executed".to_owned()
                } else {
                    format!("executed now ({})", if *success { "ok" } else { "failed" })
                };
                say!(out, "  step {step}: {tool} ({tool_call_id}): {what}");
                results.push(json!({"step": step, "call": tool_call_id, "tool": tool,
                    "replayed": replayed, "success": success}));
            }
            RunEvent::Finished { state } => say!(out, "  run finished: {state}"),
            RunEvent::Failed { kind, message } => say!(out, "  run stopped: {kind}: {message}"),
            other => say!(out, "  {other:?}"),
        }
    }
    [
        ("model_answers", json!(answers)),
        ("tool_results", json!(results)),
    ]
}

fn essence(r: &AgentResult) -> Value {
    let tools: Vec<Value> = r
        .tool_executions
        .iter()
        .map(|t| json!([t.tool_name, t.tool_call_id, t.success, t.output]))
        .collect();
    json!({"text": r.final_text, "state": r.state, "tools": tools,
        "usage": serde_json::to_value(&r.usage_aggregate).ok(),
        "llm": r.state_snapshot.llm_calls, "tool_calls": r.state_snapshot.tool_calls})
}

/// The closing facts, and the `--json` fields they give.
pub struct Summary {
    /// What did not hold (empty: the same result as the uncrashed run, no durable result
    /// executed again, the at-most-once tool at most once).
    pub problems: Vec<String>,
    /// `resume` (without its events).
    pub resume: Value,
    /// `model_calls`.
    pub model_calls: Value,
    /// `tools`.
    pub tools: Value,
}

/// The closing facts.
pub fn summary(
    out: &mut String,
    second: &Result<Outcome>,
    first: &Process,
    resumed: &Process,
    durable: &[String],
    reference: (&AgentResult, u64, &InvocationCounter),
) -> Summary {
    let (base, base_llm, base_tools) = reference;
    let (a, b) = (first.llm.calls(), resumed.llm.calls());
    let answers = resumed
        .events
        .iter()
        .filter(|e| matches!(e, RunEvent::LlmCompleted { .. }))
        .count() as u64;
    let reused = answers.saturating_sub(b);
    say!(
        out,
        "  model calls: {a} before the crash + {b} on resume = {} (uncrashed run: {base_llm}); {reused} saved answer(s) reused without calling the model",
        a + b,
    );
    let mut closing = Closing {
        out,
        problems: Vec::new(),
    };
    let tools = closing.tools(first, resumed, durable, base_tools);
    if first.tools.get("call_charge") + resumed.tools.get("call_charge") > 1 {
        closing.problem("the at-most-once charge ran more than once".to_owned());
    }
    let resume = closing.resume(second, resumed, base, reused);
    Summary {
        problems: closing.problems,
        resume,
        model_calls: json!({"before_crash": a, "on_resume": b, "total": a + b,
            "uncrashed": base_llm}),
        tools: json!(tools),
    }
}

/// The closing lines being written, and the problems found so far.
struct Closing<'a> {
    out: &'a mut String,
    problems: Vec<String>,
}

impl Closing<'_> {
    /// Note what did not hold, also as a `PROBLEM:` line.
    fn problem(&mut self, p: String) {
        say!(self.out, "  PROBLEM: {p}");
        self.problems.push(p);
    }

    /// One line per tool call: how often it ran before the crash, on resume, in total and in
    /// the uncrashed run (`base_tools`); a problem when a call with a result in `durable` ran
    /// again. The `tools` rows of `--json`.
    fn tools(
        &mut self,
        first: &Process,
        resumed: &Process,
        durable: &[String],
        base_tools: &InvocationCounter,
    ) -> Vec<Value> {
        let mut tools = Vec::new();
        for (id, tool, policy) in CALLS {
            let (t1, t2) = (first.tools.get(id), resumed.tools.get(id));
            say!(
                self.out,
                "  {tool} ({policy}): executed {} before the crash, {} {} on resume, {} in total (uncrashed run: {})",
                times(t1),
                times(t2),
                if t1 > 0 {
                    "again"
                } else {
                    "for the first time"
                },
                t1 + t2,
                base_tools.get(id)
            );
            tools.push(
                json!({"call": id, "tool": tool, "policy": policy, "before_crash": t1,
                "on_resume": t2, "total": t1 + t2, "uncrashed": base_tools.get(id)}),
            );
            if durable.iter().any(|d| d == id) && t2 > 0 {
                self.problem(format!("{tool} had a saved result and ran again"));
            }
        }
        tools
    }

    /// How the resume (`second`) ended, with the problems that shows (another result than the
    /// uncrashed `base`, a model or tool call where there should be none). The `resume` of
    /// `--json`, without its events; `reused` is the saved answers it reused.
    fn resume(
        &mut self,
        second: &Result<Outcome>,
        resumed: &Process,
        base: &AgentResult,
        reused: u64,
    ) -> Value {
        let b = resumed.llm.calls();
        let mut resume = json!({
            "outcome": "failed", "error": second.as_ref().err().map(ToString::to_string),
            "llm_calls": b, "saved_answers_reused": reused, "replayed_effects": null,
            "final_text": null, "identical_to_uncrashed": null,
        });
        match second {
            Ok(Outcome::Completed(r)) => {
                let replayed = r.state_snapshot.replayed_effect_count;
                say!(self.out, "  effects replayed from the journal: {replayed}");
                say!(self.out, "  final answer: {}", r.final_text);
                let same = essence(r) == essence(base);
                say!(
                    self.out,
                    "  result identical to the uncrashed run: {}",
                    if same { "yes" } else { "NO" }
                );
                if !same {
                    self.problem("the result differs from the uncrashed run".to_owned());
                }
                resume["outcome"] = json!("completed");
                resume["replayed_effects"] = json!(replayed);
                resume["final_text"] = json!(r.final_text);
                resume["identical_to_uncrashed"] = json!(same);
            }
            Err(e) if e.kind() == ErrorKind::EffectUncertain => {
                say!(
                    self.out,
                    "  resume stopped with EffectUncertain: the at-most-once charge_card has an intent \
                     but no result, so it may have charged the card; a person must decide ({e})"
                );
                if b != 0 {
                    self.problem("resume called the model before stopping".to_owned());
                }
                resume["outcome"] = json!("effect_uncertain");
            }
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Corrupt) => {
                say!(
                    self.out,
                    "  nothing to resume: the crash came before the first snapshot, so the request \
                     was never durable ({e})"
                );
                if b != 0 || resumed.tools.total() != 0 {
                    self.problem(
                        "a run with nothing saved called the model or a tool on resume".to_owned(),
                    );
                }
                resume["outcome"] = json!("nothing_to_resume");
            }
            Ok(Outcome::Paused { .. }) => {
                self.problem("the demo run paused".to_owned());
                resume["outcome"] = json!("paused");
            }
            Ok(other) => self.problem(format!("the demo run ended {other:?}")),
            Err(e) => self.problem(format!("resume failed: {e}")),
        }
        resume
    }
}
