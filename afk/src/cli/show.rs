//! `afk show --thread T --run R [--json]`: the normalized latest record and a summary of the
//! run's newest snapshot. The summary's tool records are the snapshot's inline ones (v1) and
//! those of the transcript log it references (v2); `--json` prints the records as stored.

use std::process::ExitCode;

use afk_core::schema::{CheckpointRecord, PhasePayload, StepRecords};
use afk_core::{Error, Result};
use serde_json::json;

use super::common::{ids, latest, newest_snapshot, snapshot_records, with_store};
use super::runs::state_of;

/// `afk show`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread of the run.
    #[arg(long)]
    thread: String,
    /// The run to show.
    #[arg(long)]
    run: String,
    /// Print `{"latest": <record>, "snapshot": <record or null>}` as JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::unexpected("cannot encode JSON").with_source(e))
}

/// Exit 0 after printing; 1 when the run has no latest pointer or it does not normalize.
pub fn run(args: Args, url: &str) -> ExitCode {
    with_store("show", url, |store| async move {
        let (thread, run) = ids(&args.thread, Some(&args.run))?;
        let run = run.ok_or_else(|| Error::invalid_input("--run is required"))?;
        let Some(rec) = latest(store.as_ref(), &thread, &run).await? else {
            return Err(Error::not_found(format!(
                "run {run} in thread {thread} has no latest pointer"
            )));
        };
        let snap = newest_snapshot(store.as_ref(), &thread, &run, Some(&rec)).await?;
        if args.json {
            let out = json!({"latest": to_json(&rec)?, "snapshot": snap.as_ref().map(to_json).transpose()?});
            let text = serde_json::to_string_pretty(&out)
                .map_err(|e| Error::unexpected("cannot encode JSON").with_source(e))?;
            println!("{text}");
            return Ok(ExitCode::SUCCESS);
        }
        print_latest(&rec);
        match snap.as_ref().and_then(|r| r.snapshot().map(|s| (r, s))) {
            Some((r, s)) => {
                let records = snapshot_records(store.as_ref(), &thread, &run, s).await?;
                print_snapshot(r, &records);
            }
            None => println!("snapshot: none (no runtime_state record)"),
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn print_latest(rec: &CheckpointRecord) {
    println!("run:      {} (thread {})", rec.run_id, rec.thread_id);
    println!(
        "latest:   step {} {} ({}), ts {}",
        rec.step, rec.phase, rec.schema_version, rec.timestamp_ms
    );
    println!("state:    {}", state_of(rec));
    match &rec.payload {
        PhasePayload::RunTerminal(p) => {
            if let Some(r) = &p.terminal_result {
                println!("result:   {} - {:?}", r.state, r.final_text);
            }
            if let Some(m) = &p.message {
                println!("message:  {m}");
            }
        }
        PhasePayload::Paused(p) => {
            if let Some(r) = &p.request {
                println!("waiting:  {:?} for call {:?}", r.reason, r.tool_call_id);
            }
        }
        _ => {}
    }
}

/// The snapshot summary; `records` are its execution records (inline and from the log).
fn print_snapshot(rec: &CheckpointRecord, records: &StepRecords) {
    let Some(s) = rec.snapshot() else { return };
    println!(
        "snapshot: step {} ({}), state {:?}",
        rec.step, rec.schema_version, s.state
    );
    println!(
        "counters: {} model calls, {} tool calls, {} effects replayed",
        s.llm_calls, s.tool_calls, s.replayed_effect_count
    );
    println!(
        "usage:    {} in + {} out = {} tokens, cost ${:.4}",
        s.usage.input_tokens, s.usage.output_tokens, s.usage.total_tokens, s.total_cost_usd
    );
    match (&s.transcript, &s.messages) {
        (Some(t), _) => println!(
            "transcript: {} messages in {} log entries (digest {})",
            t.message_count,
            t.len,
            t.digest.get(..12).unwrap_or(&t.digest)
        ),
        (None, Some(m)) => println!("transcript: {} messages inline (v1)", m.len()),
        (None, None) => println!("transcript: empty"),
    }
    println!("tool records: {}", records.tool_executions.len());
    for t in &records.tool_executions {
        println!(
            "  {} ({}): {}",
            t.tool_name,
            t.tool_call_id.as_deref().unwrap_or("-"),
            if t.success { "ok" } else { "failed" }
        );
    }
    println!("final text: {:?}", s.final_text);
    match &s.pending_llm_response {
        Some(r) if r.tool_calls.is_empty() => {
            println!("pending response: the model's final answer, not yet the run's result")
        }
        Some(r) => println!(
            "pending response: {} tool call(s) not done yet: {}",
            r.tool_calls.len(),
            r.tool_calls
                .iter()
                .map(|c| format!("{}({})", c.tool_name, c.id.as_deref().unwrap_or("-")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => println!("pending response: none"),
    }
}
