//! `afk show --thread T --run R`: the normalized latest record and a summary of the run's
//! newest snapshot, and what the operator can do next (`afk settle` for an uncertain call,
//! `afk decide` for a pause). The summary's tool records are the snapshot's inline ones (v1)
//! and those of the transcript log it references (v2).
//!
//! When the run has an entry in the store's index of runs that need attention, the text gains
//! `entry:` lines after the latest record's (the entry's state, owner and lease, and what it
//! means: waiting for a human's decision or settlement, suspended until when, taken over by a
//! worker; see `entry.rs`).
//!
//! JSON: `{"thread", "run", "state", "uncertain_calls", "latest": <record>, "snapshot":
//! <record or null>, "attention"?: <entry>}`, the records as stored (normalized); `attention`
//! only for an unfinished run with an entry (its fields: `entry.rs`).

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload, StepRecords};
use afk_core::store::Store;
use afk_core::{Error, Result, RunId, ThreadId};
use serde_json::json;

use super::common::{ids, latest, newest_snapshot, snapshot_records};
use super::entry::{Entry, entry_of, has_index, now_ms};
use super::output::{Ctx, Report, wl};
use super::runs::state_of;
use super::status::{call_of, run_status};

/// `afk show`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread of the run.
    #[arg(long)]
    thread: String,
    /// The run to show.
    #[arg(long)]
    run: String,
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::unexpected("cannot encode JSON").with_source(e))
}

/// Exit 0 after printing; 1 when the run has no latest pointer or it does not normalize.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    ctx.run("show", |store| async move {
        let (thread, run) = ids(&args.thread, Some(&args.run))?;
        let run = run.ok_or_else(|| Error::invalid_input("--run is required"))?;
        report(store.as_ref(), &thread, &run, now_ms()).await
    })
}

/// The report of `afk show` for `run`, lease times read at `now_ms`.
pub async fn report(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    now_ms: u64,
) -> Result<Report> {
    let Some(rec) = latest(store, thread, run).await? else {
        return Err(Error::not_found(format!(
            "run {run} in thread {thread} has no latest pointer"
        ))
        .with_key(afk_core::store::latest_key(run)));
    };
    let snap = newest_snapshot(store, thread, run, Some(&rec)).await?;
    let status = run_status(store, thread, run).await?;
    let entry = if has_index(store) && !status.is_terminal() {
        entry_of(store, thread, run, now_ms).await?
    } else {
        None
    };
    let calls: Vec<&str> = status
        .uncertain_effects
        .iter()
        .map(|k| call_of(k))
        .collect();
    let mut doc = json!({"thread": thread.as_str(), "run": run.as_str(), "state": status.state,
        "uncertain_calls": calls, "latest": to_json(&rec)?,
        "snapshot": snap.as_ref().map(to_json).transpose()?});
    if let Some(e) = &entry {
        doc["attention"] = to_json(e)?;
    }
    let mut o = String::new();
    print_latest(&mut o, &rec);
    for line in entry.iter().flat_map(Entry::lines) {
        wl!(o, "{line}");
    }
    match snap.as_ref().and_then(|r| r.snapshot().map(|s| (r, s))) {
        Some((r, s)) => {
            let records = snapshot_records(store, thread, run, s).await?;
            print_snapshot(&mut o, r, &records);
        }
        None => wl!(o, "snapshot: none (no runtime_state record)"),
    }
    for call in &calls {
        wl!(
            o,
            "uncertain: call {call} has an intent and no result. If its tool is at-most-once, \
             resume stops with EffectUncertain; find out what happened, then\n  afk settle \
             --thread {thread} --run {run} --call {call} (--ran JSON | --did-not-run | \
             --failed MSG)"
        );
    }
    if status.state == "paused" {
        wl!(
            o,
            "next:     afk decide --thread {thread} --run {run} (--approve | --deny MSG)"
        );
    }
    Ok(Report::ok(doc, o))
}

fn print_latest(o: &mut String, rec: &CheckpointRecord) {
    wl!(o, "run:      {} (thread {})", rec.run_id, rec.thread_id);
    wl!(
        o,
        "latest:   step {} {} ({}), ts {}",
        rec.step,
        rec.phase,
        rec.schema_version,
        rec.timestamp_ms
    );
    wl!(o, "state:    {}", state_of(rec));
    match &rec.payload {
        PhasePayload::RunTerminal(p) => {
            if let Some(r) = &p.terminal_result {
                wl!(o, "result:   {} - {:?}", r.state, r.final_text);
            }
            if let Some(m) = &p.message {
                wl!(o, "message:  {m}");
            }
        }
        PhasePayload::Paused(p) => {
            if let Some(r) = &p.request {
                wl!(o, "waiting:  {:?} for call {:?}", r.reason, r.tool_call_id);
            }
        }
        PhasePayload::RuntimeState(s) => {
            if let Some(a) = s.agent() {
                let fp = a.fingerprint.get(..12).unwrap_or(&a.fingerprint);
                wl!(
                    o,
                    "agent:    {} version {:?} (fingerprint {fp})",
                    a.name,
                    a.version
                );
            }
            if let Some(sus) = s.suspension() {
                wl!(
                    o,
                    "suspended: attempt {}, not before {} (ms since the epoch): {}",
                    sus.attempt,
                    sus.not_before_ms,
                    sus.reason
                );
            }
        }
        _ => {}
    }
}

/// The snapshot summary; `records` are its execution records (inline and from the log).
fn print_snapshot(o: &mut String, rec: &CheckpointRecord, records: &StepRecords) {
    let Some(s) = rec.snapshot() else { return };
    wl!(
        o,
        "snapshot: step {} ({}), state {:?}",
        rec.step,
        rec.schema_version,
        s.state
    );
    wl!(
        o,
        "counters: {} model calls, {} tool calls, {} effects replayed",
        s.llm_calls,
        s.tool_calls,
        s.replayed_effect_count
    );
    wl!(
        o,
        "usage:    {} in + {} out = {} tokens, cost ${:.4}",
        s.usage.input_tokens,
        s.usage.output_tokens,
        s.usage.total_tokens,
        s.total_cost_usd
    );
    match (&s.transcript, &s.messages) {
        (Some(t), _) => wl!(
            o,
            "transcript: {} messages in {} log entries (digest {})",
            t.message_count,
            t.len,
            t.digest.get(..12).unwrap_or(&t.digest)
        ),
        (None, Some(m)) => wl!(o, "transcript: {} messages inline (v1)", m.len()),
        (None, None) => wl!(o, "transcript: empty"),
    }
    wl!(o, "tool records: {}", records.tool_executions.len());
    for t in &records.tool_executions {
        wl!(
            o,
            "  {} ({}): {}",
            t.tool_name,
            t.tool_call_id.as_deref().unwrap_or("-"),
            if t.success { "ok" } else { "failed" }
        );
    }
    wl!(o, "final text: {:?}", s.final_text);
    match &s.pending_llm_response {
        Some(r) if r.tool_calls.is_empty() => {
            wl!(
                o,
                "pending response: the model's final answer, not yet the run's result"
            )
        }
        Some(r) => wl!(
            o,
            "pending response: {} tool call(s) not done yet: {}",
            r.tool_calls.len(),
            r.tool_calls
                .iter()
                .map(|c| format!("{}({})", c.tool_name, c.id.as_deref().unwrap_or("-")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => wl!(o, "pending response: none"),
    }
}
