//! `afk migrate --thread T [--run R] [--dry-run]`: rewrite v1 records as v2.
//!
//! Each record goes through [`afk_core::schema::migrate::v1_to_v2`]. A v1 snapshot's inline
//! transcript and execution records move to the transcript log: the run's snapshots share one
//! chained log (snapshot n's messages and records extend snapshot n-1's, so each adds one entry
//! with what is new). A snapshot that does not continue the log (an AFK resume that went back
//! in time), or any v1 snapshot of a run whose log our runner already writes, keeps its
//! messages and records inline in v2 form (resume reads both). Everything is written under a fresh claim (a process still
//! working on the run is fenced off), log entries before the records that reference them, the
//! latest pointer last. A run with no v1 record is left alone, so running it twice is a no-op.
//!
//! JSON: `{"thread", "dry_run", "runs": [{"run", "ok", "line"}], "failed"}` (`line` is the
//! text line of the run).

use std::process::ExitCode;

use afk_core::keys::{checkpoint_prefix, messages_prefix};
use afk_core::normalize::{normalize_record, normalize_transcript_entry};
use afk_core::schema::migrate::v1_to_v2;
use afk_core::schema::{
    CheckpointRecord, Message, PhasePayload, SCHEMA_VERSION_V1, StepRecords, TranscriptEntry,
    TranscriptRef,
};
use afk_core::store::StoreExt;
use afk_core::store::latest_key;
use afk_core::{Commit, Error, Result, RunId, Store, ThreadId};

use super::common::ids;
use super::output::{Ctx, Report, wl};

/// `afk migrate`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread to migrate.
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
    /// Only say what would be rewritten.
    #[arg(long)]
    dry_run: bool,
}

/// One line per run; exit 0, or 1 when a run could not be migrated (a record that does not
/// normalize: nothing of that run is written).
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    ctx.run("migrate", |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let runs = match run {
            Some(r) => vec![r],
            None => store.list_runs(&thread).await?,
        };
        let mut failed = 0;
        let mut o = String::new();
        let mut docs = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            progress.tick("migrating runs", i, Some(runs.len()));
            let (ok, line) = match migrate_run(store.as_ref(), &thread, run, args.dry_run).await {
                Ok(line) => (true, line),
                Err(e) => {
                    failed += 1;
                    (false, format!("FAIL {run}: {e}"))
                }
            };
            wl!(o, "{line}");
            docs.push(serde_json::json!({"run": run.as_str(), "ok": ok, "line": line}));
        }
        progress.done();
        let doc = serde_json::json!({"thread": thread.as_str(), "dry_run": args.dry_run,
            "runs": docs, "failed": failed});
        let mut report = Report::ok(doc, o);
        report.failed = failed > 0;
        Ok(report)
    })
}

/// Advance `pos` over `part` if `part` is what `all` holds at `pos`.
fn take<T: PartialEq>(all: &[T], pos: &mut usize, part: &[T]) -> bool {
    let end = *pos + part.len();
    if end > all.len() || all[*pos..end] != *part {
        return false;
    }
    *pos = end;
    true
}

/// Where a snapshot's messages and records go: a prefix of the log, an appended entry, or
/// inline (`None`). Each log entry must continue every list of the snapshot.
fn place(
    log: &mut Vec<TranscriptEntry>,
    msgs: &[Message],
    recs: &StepRecords,
    step: u64,
    append: bool,
) -> Option<TranscriptRef> {
    let (mut m, mut t, mut s, mut r, mut c) = (0, 0, 0, 0, 0);
    let done = |m, t, s, r, c| {
        m == msgs.len()
            && t == recs.tool_executions.len()
            && s == recs.subagent_executions.len()
            && r == recs.skill_reads.len()
            && c == recs.skill_command_executions.len()
    };
    if done(m, t, s, r, c) {
        return Some(TranscriptRef::of(&[]));
    }
    for (i, e) in log.iter().enumerate() {
        let fits = take(msgs, &mut m, &e.messages)
            && take(&recs.tool_executions, &mut t, &e.tool_executions)
            && take(&recs.subagent_executions, &mut s, &e.subagent_executions)
            && take(&recs.skill_reads, &mut r, &e.skill_reads)
            && take(
                &recs.skill_command_executions,
                &mut c,
                &e.skill_command_executions,
            );
        if !fits {
            return None;
        }
        if done(m, t, s, r, c) {
            return Some(TranscriptRef::of(&log[..=i]));
        }
    }
    if !append {
        return None;
    }
    let prev = log.last().map(|e| e.digest.clone()).unwrap_or_default();
    let rest = StepRecords {
        tool_executions: recs.tool_executions[t..].to_vec(),
        subagent_executions: recs.subagent_executions[s..].to_vec(),
        skill_reads: recs.skill_reads[r..].to_vec(),
        skill_command_executions: recs.skill_command_executions[c..].to_vec(),
    };
    log.push(TranscriptEntry::with_records(
        log.len() as u64,
        step,
        msgs[m..].to_vec(),
        rest,
        &prev,
    ));
    Some(TranscriptRef::of(log))
}

/// Migrate one run; returns the line to print.
pub async fn migrate_run(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    dry_run: bool,
) -> Result<String> {
    let lk = latest_key(run);
    let mut v1: Vec<(String, CheckpointRecord)> = Vec::new();
    let mut has_v2_log = false;
    for key in store.list_all(thread, &checkpoint_prefix(run)).await? {
        let Some(bytes) = store.get(thread, &key).await? else {
            continue;
        };
        let rec = normalize_record(&bytes, thread, &key)?;
        if rec.schema_version == SCHEMA_VERSION_V1 {
            v1.push((key, rec));
        } else if rec.snapshot().is_some_and(|s| s.transcript.is_some()) {
            has_v2_log = true;
        }
    }
    if v1.is_empty() {
        return Ok(format!("{run}: no v1 records, nothing to do"));
    }
    let mut log = Vec::new();
    for key in store.list_all(thread, &messages_prefix(run)).await? {
        if let Some(bytes) = store.get(thread, &key).await? {
            log.push(normalize_transcript_entry(&bytes, &key)?);
        }
    }
    let existing = log.len();
    // Step order, the latest pointer after the step records of its step.
    v1.sort_by_key(|(k, r)| (r.step, *k == lk, k.clone()));
    let (mut records, mut latest, mut inline) = (Vec::new(), None, 0);
    for (key, rec) in v1 {
        // `v1_to_v2` moves the inline messages and records into one entry; they go into the
        // shared log.
        let migrated = v1_to_v2(rec);
        let (msgs, recs) = match migrated.transcript.into_iter().next() {
            Some(e) => (
                e.messages,
                StepRecords {
                    tool_executions: e.tool_executions,
                    subagent_executions: e.subagent_executions,
                    skill_reads: e.skill_reads,
                    skill_command_executions: e.skill_command_executions,
                },
            ),
            None => (Vec::new(), StepRecords::default()),
        };
        let mut m = migrated.record;
        if let PhasePayload::RuntimeState(s) = &mut m.payload {
            match place(&mut log, &msgs, &recs, m.step, !has_v2_log) {
                Some(tref) => s.transcript = Some(tref),
                None => {
                    s.transcript = None;
                    s.messages = Some(msgs);
                    s.tool_executions = recs.tool_executions;
                    s.subagent_executions = recs.subagent_executions;
                    s.skill_reads = recs.skill_reads;
                    s.skill_command_executions = recs.skill_command_executions;
                    inline += 1;
                }
            }
        }
        let bytes = m.to_bytes()?;
        if key == lk {
            latest = Some(bytes);
        } else {
            records.push((key, bytes));
        }
    }
    let n_records = records.len() + usize::from(latest.is_some());
    let entries: Vec<(String, Vec<u8>)> = log[existing..]
        .iter()
        .map(|e| {
            let bytes = serde_json::to_vec(e).map_err(|err| {
                Error::unexpected("cannot encode a transcript entry").with_source(err)
            })?;
            Ok((afk_core::keys::messages_key(run, e.index), bytes))
        })
        .collect::<Result<_>>()?;
    let summary = format!(
        "{n_records} record(s) v1 -> v2, {} transcript entr(ies) written, {inline} snapshot(s) kept inline",
        entries.len()
    );
    if dry_run {
        return Ok(format!("{run}: would migrate: {summary}"));
    }
    let epoch = store.claim(thread, run).await?;
    let max = store
        .capabilities()
        .max_commit_keys
        .unwrap_or(usize::MAX)
        .max(1);
    let mut puts = entries;
    puts.extend(records);
    let mut chunks: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    while !puts.is_empty() {
        let rest = puts.split_off(puts.len().min(max));
        chunks.push(std::mem::replace(&mut puts, rest));
    }
    if chunks.is_empty() || latest.is_some() {
        chunks.push(Vec::new());
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        store
            .commit(&Commit {
                thread: thread.clone(),
                run: run.clone(),
                epoch,
                puts: chunk,
                latest: if i == last { latest.take() } else { None },
            })
            .await?;
    }
    Ok(format!("{run}: migrated {summary}"))
}
