//! `afk timeline --thread T --run R`: every checkpoint record, effect row and transcript-log
//! entry of a run, in step/phase order, one line each.
//!
//! JSON: `{"thread", "run", "entries": [{"key", "kind" ("checkpoint" | "effect" |
//! "messages" | "other"), "step", "text", "value"}]}`; `value` is the stored JSON as stored
//! (null when it is not JSON), `step` is null for transcript entries.

use std::process::ExitCode;

use afk_core::keys::{ParsedKey, parse_key};
use afk_core::normalize::{normalize_effect_row, normalize_record, normalize_transcript_entry};
use afk_core::schema::{EffectStatus, Phase, PhasePayload};
use afk_core::store::Store;
use afk_core::{Error, Result, RunId, ThreadId};

use super::common::{ids, keys_of_run};
use super::output::{Ctx, Report, wl};

/// `afk timeline`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread of the run.
    #[arg(long)]
    thread: String,
    /// The run.
    #[arg(long)]
    run: String,
}

/// Position of a line within its step: phases in the order a step writes them, effect rows
/// inside the tool batch, transcript entries after the step's records.
fn rank(key: &ParsedKey) -> (u64, u8) {
    let phase_rank = |p: &str| {
        let p: Phase = p.parse().unwrap_or(Phase::RunTerminal);
        let i = Phase::ALL.iter().position(|q| *q == p).unwrap_or(0) as u8;
        // Leave room for effect rows between pre_tool_batch (5) and post_tool_batch (6).
        if i >= 6 { i * 2 + 2 } else { i * 2 }
    };
    match key {
        ParsedKey::Checkpoint { step, phase, .. } => (*step, phase_rank(phase.as_str())),
        ParsedKey::Effect { step, .. } => (*step, 11),
        ParsedKey::Messages { .. } => (u64::MAX, 0),
        _ => (u64::MAX, 1),
    }
}

/// Print the run's timeline. Exit 0; 1 when the run has no keys.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    ctx.run("timeline", |store| async move {
        let (thread, run) = ids(&args.thread, Some(&args.run))?;
        let run = run.ok_or_else(|| Error::invalid_input("--run is required"))?;
        report(store.as_ref(), &thread, &run).await
    })
}

/// The report of `afk timeline` for `run`; `NotFound` when the run has no keys.
pub async fn report(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Report> {
    let mut keys: Vec<(ParsedKey, String)> = keys_of_run(store, thread, run)
        .await?
        .into_iter()
        .filter_map(|k| parse_key(&k).ok().map(|p| (p, k)))
        .filter(|(p, _)| !matches!(p, ParsedKey::Latest { .. } | ParsedKey::Run { .. }))
        .collect();
    if keys.is_empty() {
        return Err(Error::not_found(format!(
            "run {run} has no records in thread {thread}"
        )));
    }
    keys.sort_by_key(|(p, k)| (rank(p), k.clone()));
    let mut o = String::new();
    let mut entries = Vec::new();
    for (parsed, key) in &keys {
        let bytes = store.get(thread, key).await?;
        let text = line(thread, parsed, key, bytes.as_deref());
        wl!(o, "{text}");
        let (kind, step) = match parsed {
            ParsedKey::Checkpoint { step, .. } => ("checkpoint", Some(*step)),
            ParsedKey::Effect { step, .. } => ("effect", Some(*step)),
            ParsedKey::Messages { .. } => ("messages", None),
            _ => ("other", None),
        };
        let value = bytes
            .as_deref()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok());
        entries.push(serde_json::json!({"key": key, "kind": kind, "step": step,
            "text": text, "value": value}));
    }
    let doc = serde_json::json!({"thread": thread.as_str(), "run": run.as_str(),
        "entries": entries});
    Ok(Report::ok(doc, o))
}

fn line(thread: &ThreadId, parsed: &ParsedKey, key: &str, bytes: Option<&[u8]>) -> String {
    let Some(bytes) = bytes else {
        return format!("{key}: vanished while listing");
    };
    match parsed {
        ParsedKey::Checkpoint { step, .. } => match normalize_record(bytes, thread, key) {
            Ok(rec) => format!(
                "step {step:>3}  {:<19} ts {}  {}",
                rec.phase.as_str(),
                rec.timestamp_ms,
                detail(&rec.payload)
            ),
            Err(e) => format!("step {step:>3}  {key}  CORRUPT: {e}"),
        },
        ParsedKey::Effect { step, call_id, .. } => match normalize_effect_row(bytes, key) {
            Ok(row) => format!(
                "step {step:>3}  effect {call_id}  {}  {}  input_hash {}",
                row.tool_name.as_deref().unwrap_or("-"),
                match row.status() {
                    EffectStatus::Intent => "intent (no result)".to_owned(),
                    EffectStatus::Done if row.success => "result ok".to_owned(),
                    EffectStatus::Done => "result failed".to_owned(),
                },
                row.input_hash.get(..12).unwrap_or(&row.input_hash)
            ),
            Err(e) => format!("step {step:>3}  {key}  CORRUPT: {e}"),
        },
        ParsedKey::Messages { index, .. } => match normalize_transcript_entry(bytes, key) {
            Ok(e) => format!(
                "log {index:>4}  transcript entry of step {}: {} message(s){}",
                e.step,
                e.messages.len(),
                match e.tool_executions.len() + e.subagent_executions.len() {
                    0 => String::new(),
                    n => format!(", {n} execution record(s)"),
                }
            ),
            Err(e) => format!("log {index:>4}  CORRUPT: {e}"),
        },
        _ => format!("other    {key}"),
    }
}

fn detail(p: &PhasePayload) -> String {
    match p {
        PhasePayload::RunStarted(x) => format!("agent {} resumed={}", x.agent_name, x.resumed),
        PhasePayload::StepStarted(x) => format!("{} messages", x.message_count),
        PhasePayload::RuntimeState(s) => format!(
            "snapshot: {} model calls, {} tool calls{}",
            s.llm_calls,
            s.tool_calls,
            if s.pending_llm_response.is_some() {
                ", pending response"
            } else {
                ""
            }
        ),
        PhasePayload::PreLlm(x) => format!("model {} with {} messages", x.model, x.message_count),
        PhasePayload::PostLlm(x) => format!("{} tool call(s)", x.tool_call_count),
        PhasePayload::PreToolBatch(x) => format!("{} tool call(s)", x.tool_call_count),
        PhasePayload::PostToolBatch(x) => {
            format!("{} done, {} failed", x.tool_calls_total, x.tool_failures)
        }
        PhasePayload::RunTerminal(x) => format!("state {}", x.state),
        _ => String::new(),
    }
}
