//! Store-level migration of a run's AFK Python v1 records to v2: [`migrate_run`].
//!
//! Each record goes through [`v1_to_v2`]. A v1 snapshot's
//! inline transcript and execution records move to the transcript log: the run's snapshots
//! share one chained log (snapshot n's messages and records extend snapshot n-1's, so each adds
//! one entry with what is new). A snapshot that does not continue the log (an AFK resume that
//! went back in time), or any v1 snapshot of a run whose log our runner already writes, keeps
//! its messages and records inline in v2 form (resume reads both).
//!
//! Everything is written under a fresh claim (a process still working on the run is fenced
//! off) and planned from what is read under it (a run a process moved on before the claim is
//! migrated as it is then, its pointer kept), log entries before the records that reference
//! them, the latest pointer last, in commits of at most
//! [`Capabilities::max_commit_keys`](crate::store::Capabilities) keys. A run with no v1 record
//! is left alone, so migrating twice is a no-op; a migration stopped part way (a crash, a store
//! error) is finished by running it again: the records already rewritten are v2 and read as
//! such, the rest are migrated against the log already written.

use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};
use crate::keys::{checkpoint_prefix, messages_key, messages_prefix};
use crate::normalize::{normalize_record, normalize_transcript_entry};
use crate::schema::migrate::v1_to_v2;
use crate::schema::{
    CheckpointRecord, Message, PhasePayload, SCHEMA_VERSION_V1, StepRecords, TranscriptEntry,
    TranscriptRef,
};
use crate::store::{Commit, Store, StoreExt, latest_key};

/// What [`migrate_run`] did to a run, or would do in a dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Migration {
    /// v1 records rewritten as v2 (the latest pointer counts as one); 0 when the run has none.
    pub records: usize,
    /// Transcript-log entries written (`messages:<run>:<index>`).
    pub log_entries: usize,
    /// v2 snapshots that keep their messages and records inline (they do not continue the log).
    pub inline: usize,
    /// Whether anything was written: `false` for a dry run and for a run with no v1 record.
    pub written: bool,
}

impl Migration {
    /// Whether the run had no v1 record (nothing to do).
    pub fn is_noop(&self) -> bool {
        self.records == 0
    }
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

/// Rewrite the v1 records of `run` as v2 (see the module docs); with `dry_run`, only count
/// what would be rewritten. Returns what was (or would be) done.
///
/// Errors: `Corrupt` for a record or log entry that does not normalize (nothing of the run is
/// written: every record is read and migrated before the first write); `Fenced` when another
/// process claims the run while it is being written; the store's own errors. After an error
/// part way, run it again to finish.
pub async fn migrate_run(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    dry_run: bool,
) -> Result<Migration> {
    let Some(first) = plan(store, thread, run).await? else {
        return Ok(Migration::default());
    };
    if dry_run {
        return Ok(first.done);
    }
    let epoch = store.claim(thread, run).await?;
    // What is written comes from what is stored under the claim. A runner that resumed the
    // run since the reads above is fenced from now on, but may have moved it on meanwhile:
    // records planned from the older reads would move its pointer back to a step whose
    // effects already ran.
    let Some(Plan {
        mut puts,
        mut latest,
        mut done,
    }) = plan(store, thread, run).await?
    else {
        return Ok(Migration::default());
    };
    let max = store
        .capabilities()
        .max_commit_keys
        .unwrap_or(usize::MAX)
        .max(1);
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
                attention: None,
            })
            .await?;
    }
    done.written = true;
    Ok(done)
}

/// What a migration writes: log entries, then records (in that order), the latest pointer
/// last; and what it does.
struct Plan {
    puts: Vec<(String, Vec<u8>)>,
    latest: Option<Vec<u8>>,
    done: Migration,
}

/// Read the run and plan its migration; `None` when it has no v1 record.
async fn plan(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Option<Plan>> {
    let lk = latest_key(run);
    let (mut v1, has_v2_log) = read_checkpoints(store, thread, run).await?;
    if v1.is_empty() {
        return Ok(None);
    }
    let mut log = read_log(store, thread, run).await?;
    let existing = log.len();
    // Step order, the latest pointer after the step records of its step.
    v1.sort_by_key(|(k, r)| (r.step, *k == lk, k.clone()));
    let (mut records, mut latest, mut inline) = (Vec::new(), None, 0);
    for (key, rec) in v1 {
        let (bytes, kept_inline) = migrate_record(&mut log, rec, !has_v2_log)?;
        inline += usize::from(kept_inline);
        if key == lk {
            latest = Some(bytes);
        } else {
            records.push((key, bytes));
        }
    }
    let n_records = records.len() + usize::from(latest.is_some());
    let entries = encode_entries(run, &log[existing..])?;
    let done = Migration {
        records: n_records,
        log_entries: entries.len(),
        inline,
        written: false,
    };
    let mut puts = entries;
    puts.extend(records);
    Ok(Some(Plan { puts, latest, done }))
}

/// The run's v1 checkpoint records (the latest pointer among them when it is v1), and whether
/// a v2 snapshot of the run references a transcript log (our runner writes the log).
async fn read_checkpoints(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<(Vec<(String, CheckpointRecord)>, bool)> {
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
    Ok((v1, has_v2_log))
}

/// The run's transcript log as stored, in index order.
async fn read_log(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Vec<TranscriptEntry>> {
    let mut log = Vec::new();
    for key in store.list_all(thread, &messages_prefix(run)).await? {
        if let Some(bytes) = store.get(thread, &key).await? {
            log.push(normalize_transcript_entry(&bytes, &key)?);
        }
    }
    Ok(log)
}

/// One v1 record as v2 bytes. A snapshot's messages and records go into the shared `log`
/// (appended to it only when `append`) or stay inline: `true` beside the bytes.
fn migrate_record(
    log: &mut Vec<TranscriptEntry>,
    rec: CheckpointRecord,
    append: bool,
) -> Result<(Vec<u8>, bool)> {
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
    let mut inline = false;
    if let PhasePayload::RuntimeState(s) = &mut m.payload {
        match place(log, &msgs, &recs, m.step, append) {
            Some(tref) => s.transcript = Some(tref),
            None => {
                s.transcript = None;
                s.messages = Some(msgs);
                s.tool_executions = recs.tool_executions;
                s.subagent_executions = recs.subagent_executions;
                s.skill_reads = recs.skill_reads;
                s.skill_command_executions = recs.skill_command_executions;
                inline = true;
            }
        }
    }
    Ok((m.to_bytes()?, inline))
}

/// The log entries to write, under their keys.
fn encode_entries(run: &RunId, new: &[TranscriptEntry]) -> Result<Vec<(String, Vec<u8>)>> {
    new.iter()
        .map(|e| {
            let bytes = serde_json::to_vec(e).map_err(|err| {
                Error::unexpected("cannot encode a transcript entry").with_source(err)
            })?;
            Ok((messages_key(run, e.index), bytes))
        })
        .collect::<Result<_>>()
}
