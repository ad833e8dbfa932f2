//! The demo's plain-language lines. Every number printed comes from a counter or the store.

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Outcome, RunEvent};
use afk_core::schema::{AgentResult, EffectStatus};
use afk_core::store::StoreExt;
use afk_core::{ErrorKind, Result, RunId, Store, ThreadId};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::script::{CALLS, tool_of};
use crate::cli::common::{latest, newest_snapshot};

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

/// How the first process ended.
pub fn crash(first: &Result<Outcome>, persisted: u64, p: &Process) {
    match first {
        Err(e) => println!(
            "  CRASH: commit #{} failed ({e}); the process is gone, nothing after saved #{persisted} exists",
            persisted + 1
        ),
        Ok(_) => println!(
            "  no crash: the run finished after {persisted} commits (the crash point is past its end)"
        ),
    }
    println!(
        "  before the crash: model called {}; tools executed: {}",
        times(p.llm.calls()),
        tool_counts(&p.tools)
    );
}

/// Describe what the store holds for the run; returns the call ids with a durable result.
pub async fn stored(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Vec<String>> {
    let latest = latest(store, thread, run).await?;
    match &latest {
        Some(l) => println!(
            "  latest pointer: step {} {} (the last record the first process saved)",
            l.step, l.phase
        ),
        None => println!("  no latest pointer: nothing of the run was saved"),
    }
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
            println!(
                "  newest snapshot: step {}, {msgs} transcript messages{}",
                rec.step,
                if pending > 0 {
                    format!(", the model's answer with {pending} tool call(s) saved as pending")
                } else {
                    String::new()
                }
            );
        }
        None => println!("  no snapshot: the user's request itself was never saved"),
    }
    let mut durable = Vec::new();
    let effects = store
        .list_all(thread, &afk_core::keys::effect_prefix(run))
        .await?;
    for (id, tool, policy) in CALLS {
        let key = effects.iter().find(|k| k.ends_with(&format!(":{id}")));
        let row = match key {
            Some(k) => store.get(thread, k).await?,
            None => None,
        };
        let status = match row.map(|b| afk_core::normalize::normalize_effect_row(&b, id)) {
            None => "nothing saved".to_owned(),
            Some(Err(e)) => format!("unreadable row: {e}"),
            Some(Ok(r)) if r.status() == EffectStatus::Intent => {
                "intent saved, no result: it may or may not have run".to_owned()
            }
            Some(Ok(r)) => {
                durable.push(id.to_owned());
                format!("result saved in the effect journal: {}", r.output)
            }
        };
        println!("  {tool} ({policy}, {id}): {status}");
    }
    Ok(durable)
}

/// The resumed run's events, one line each.
pub fn resume_events(p: &Process) {
    let asked = p.llm.asked();
    for e in &p.events {
        match e {
            RunEvent::RunStarted { run_id, .. } => println!("  resumed run {run_id}"),
            RunEvent::StepStarted { step } => println!("  step {step} starts"),
            RunEvent::LlmCompleted { step, tool_calls } => {
                let called = asked.contains(&(step.saturating_sub(1) as usize));
                let how = if called {
                    "model called"
                } else {
                    "saved model answer reused (no model call)"
                };
                println!("  step {step}: {how}; it asks for {tool_calls} tool call(s)");
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
                println!("  step {step}: {tool} ({tool_call_id}): {what}");
            }
            RunEvent::Finished { state } => println!("  run finished: {state}"),
            RunEvent::Failed { kind, message } => println!("  run stopped: {kind}: {message}"),
            other => println!("  {other:?}"),
        }
    }
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

/// The closing facts. Returns whether everything held (same result as the uncrashed run, no
/// durable result executed again, the at-most-once tool at most once).
pub fn summary(
    second: &Result<Outcome>,
    first: &Process,
    resumed: &Process,
    durable: &[String],
    reference: (&AgentResult, u64, &InvocationCounter),
) -> bool {
    let (base, base_llm, base_tools) = reference;
    let (a, b) = (first.llm.calls(), resumed.llm.calls());
    let answers = resumed
        .events
        .iter()
        .filter(|e| matches!(e, RunEvent::LlmCompleted { .. }))
        .count() as u64;
    println!(
        "  model calls: {a} before the crash + {b} on resume = {} (uncrashed run: {base_llm}); {} saved answer(s) reused without calling the model",
        a + b,
        answers.saturating_sub(b)
    );
    let mut ok = true;
    for (id, tool, policy) in CALLS {
        let (t1, t2) = (first.tools.get(id), resumed.tools.get(id));
        println!(
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
        if durable.iter().any(|d| d == id) && t2 > 0 {
            println!("  PROBLEM: {tool} had a saved result and ran again");
            ok = false;
        }
    }
    if first.tools.get("call_charge") + resumed.tools.get("call_charge") > 1 {
        println!("  PROBLEM: the at-most-once charge ran more than once");
        ok = false;
    }
    match second {
        Ok(Outcome::Completed(r)) => {
            println!(
                "  effects replayed from the journal: {}",
                r.state_snapshot.replayed_effect_count
            );
            println!("  final answer: {}", r.final_text);
            let same = essence(r) == essence(base);
            println!(
                "  result identical to the uncrashed run: {}",
                if same { "yes" } else { "NO" }
            );
            ok && same
        }
        Err(e) if e.kind() == ErrorKind::EffectUncertain => {
            println!(
                "  resume stopped with EffectUncertain: the at-most-once charge_card has an intent \
                 but no result, so it may have charged the card; a person must decide ({e})"
            );
            ok && b == 0
        }
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Corrupt) => {
            println!(
                "  nothing to resume: the crash came before the first snapshot, so the request \
                 was never durable ({e})"
            );
            ok && b == 0 && resumed.tools.total() == 0
        }
        Ok(Outcome::Paused { .. }) => {
            println!("  PROBLEM: the demo run paused");
            false
        }
        Err(e) => {
            println!("  PROBLEM: resume failed: {e}");
            false
        }
    }
}
