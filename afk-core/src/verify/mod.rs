//! Checking a run's stored invariants (what `afk verify` prints and the store crates' restart
//! tests assert): nothing half-written.
//!
//! Per run: the latest pointer exists and normalizes; the record it copies exists under its
//! step key (legacy AFK v1 states may lack it: a note, not a problem); the newest snapshot's
//! transcript log is complete and its digest chain and counts match the snapshot; every effect
//! row normalizes and has a well-formed input hash (64 lowercase hex digits). Intent rows
//! without a result are noted as uncertain (a crash between intent and result; not a problem
//! by itself, resume decides by the tool's policy).
//!
//! The checks read bytes through the [`Store`] trait only, so they work on every backend.

mod read;
#[cfg(test)]
mod tests;

use std::fmt;

pub use read::{latest_record, newest_snapshot};

use crate::keys::{checkpoint_key, effect_prefix, messages_key};
use crate::normalize::{normalize_effect_row, normalize_transcript_entry};
use crate::schema::{CheckpointRecord, EffectStatus, SCHEMA_VERSION_V1, reassemble};
use crate::store::{StoreExt, latest_key};
use crate::{Error, ErrorKind, Result, RunId, ThreadId, store::Store};

/// Which invariant a [`Problem`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The run has no `checkpoint:<run>:latest` pointer.
    MissingLatest,
    /// The latest pointer does not normalize.
    MalformedLatest,
    /// The latest pointer copies a record whose step key does not exist.
    DanglingLatest,
    /// The newest `runtime_state` snapshot does not normalize.
    MalformedSnapshot,
    /// A transcript entry the snapshot references is missing (a truncated log).
    MissingTranscriptEntry,
    /// A transcript entry does not normalize.
    MalformedTranscriptEntry,
    /// The transcript log's indices, digest chain or counts differ from the snapshot's.
    TranscriptMismatch,
    /// An effect row does not normalize.
    MalformedEffectRow,
    /// An effect row's input hash is not 64 lowercase hex digits.
    MalformedInputHash,
}

/// A broken invariant: what kind, at which key, and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The invariant broken.
    pub kind: ProblemKind,
    /// The key the problem is about (the pointer, record, entry or effect row).
    pub key: String,
    /// One line for a person, as `afk verify` prints it after `PROBLEM <run>: `.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a [`Note`] remarks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoteKind {
    /// An effect intent row without a result: the effect may or may not have run.
    UncertainEffect,
    /// A legacy AFK v1 state whose latest pointer has no step record (allowed for v1).
    LegacyWithoutStepRecord,
    /// The run has a latest pointer but no `runtime_state` snapshot yet.
    NoSnapshotYet,
}

/// A remark that is not a problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// What the note is about.
    pub kind: NoteKind,
    /// The key concerned.
    pub key: String,
    /// One line for a person.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What checking one run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The run checked.
    pub run: RunId,
    /// Broken invariants, in the order checked (pointer, snapshot/transcript, effect rows).
    pub problems: Vec<Problem>,
    /// Remarks that are not problems, including uncertain effects.
    pub notes: Vec<Note>,
}

impl Report {
    /// `true` when no invariant is broken (notes do not count).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The notes about effect intents without a result.
    pub fn uncertain(&self) -> impl Iterator<Item = &Note> {
        self.notes
            .iter()
            .filter(|n| n.kind == NoteKind::UncertainEffect)
    }

    /// Whether a problem of `kind` was found.
    pub fn has(&self, kind: ProblemKind) -> bool {
        self.problems.iter().any(|p| p.kind == kind)
    }

    fn problem(&mut self, kind: ProblemKind, key: impl Into<String>, message: String) {
        self.problems.push(Problem {
            kind,
            key: key.into(),
            message,
        });
    }

    fn note(&mut self, kind: NoteKind, key: impl Into<String>, message: String) {
        self.notes.push(Note {
            kind,
            key: key.into(),
            message,
        });
    }
}

/// Check every run of `thread` (see [`StoreExt::list_runs`]), in run-id order. Store errors are returned;
/// broken data is reported in the reports.
pub async fn verify_thread(store: &dyn Store, thread: &ThreadId) -> Result<Vec<Report>> {
    let mut out = Vec::new();
    for run in store.list_runs(thread).await? {
        out.push(verify_run(store, thread, &run).await?);
    }
    Ok(out)
}

/// Check one run. Store errors (unavailable, timeout, ...) are returned as `Err`; broken data
/// never is: it is a [`Problem`] in the report. A run with no keys at all reports
/// [`ProblemKind::MissingLatest`].
pub async fn verify_run(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Report> {
    let mut r = Report {
        run: run.clone(),
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let lkey = latest_key(run);
    let latest = match latest_record(store, thread, run).await {
        Ok(Some(l)) => Some(l),
        Ok(None) => {
            r.problem(ProblemKind::MissingLatest, lkey, "no latest pointer".into());
            None
        }
        Err(e) if !is_data_error(&e) => return Err(e),
        Err(e) => {
            let msg = format!("latest pointer does not normalize: {e}");
            r.problem(ProblemKind::MalformedLatest, lkey, msg);
            None
        }
    };
    if let Some(l) = &latest {
        let key = checkpoint_key(run, l.step, l.phase);
        if store.get(thread, &key).await?.is_none() {
            if l.schema_version == SCHEMA_VERSION_V1 {
                let msg = format!("legacy AFK state: latest has no step record {key}");
                r.note(NoteKind::LegacyWithoutStepRecord, key, msg);
            } else {
                let msg = format!("latest points to {key}, which does not exist");
                r.problem(ProblemKind::DanglingLatest, key, msg);
            }
        }
    }
    match newest_snapshot(store, thread, run, latest.as_ref()).await {
        Ok(Some(rec)) => check_transcript(store, thread, run, &rec, &mut r).await?,
        Ok(None) if latest.is_some() => {
            let msg = "no runtime_state snapshot yet".to_owned();
            r.note(NoteKind::NoSnapshotYet, latest_key(run), msg);
        }
        Ok(None) => {}
        Err(e) if !is_data_error(&e) => return Err(e),
        Err(e) => {
            let msg = format!("newest snapshot does not normalize: {e}");
            r.problem(ProblemKind::MalformedSnapshot, latest_key(run), msg);
        }
    }
    check_effects(store, thread, run, &mut r).await?;
    Ok(r)
}

/// Errors that say the stored bytes are bad (reported), as opposed to the store failing
/// (returned).
fn is_data_error(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Corrupt | ErrorKind::Unsupported | ErrorKind::InvalidInput
    )
}

fn well_formed_hash(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

async fn check_effects(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    r: &mut Report,
) -> Result<()> {
    for key in store.list_all(thread, &effect_prefix(run)).await? {
        let Some(bytes) = store.get(thread, &key).await? else {
            continue;
        };
        match normalize_effect_row(&bytes, &key) {
            Err(e) => r.problem(ProblemKind::MalformedEffectRow, key, e.to_string()),
            Ok(row) => {
                if !well_formed_hash(&row.input_hash) {
                    let msg = format!(
                        "{key}: input_hash {:?} is not 64 lowercase hex digits",
                        row.input_hash
                    );
                    r.problem(ProblemKind::MalformedInputHash, key.clone(), msg);
                }
                if row.status() == EffectStatus::Intent {
                    let msg = format!("{key}: intent without a result (may or may not have run)");
                    r.note(NoteKind::UncertainEffect, key, msg);
                }
            }
        }
    }
    Ok(())
}

async fn check_transcript(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    rec: &CheckpointRecord,
    r: &mut Report,
) -> Result<()> {
    let Some(tref) = rec.snapshot().and_then(|s| s.transcript.as_ref()) else {
        return Ok(()); // v1: transcript inline
    };
    let keys: Vec<String> = (0..tref.len).map(|i| messages_key(run, i)).collect();
    let values = store.get_many(thread, &keys).await?;
    let mut entries = Vec::with_capacity(keys.len());
    for (key, value) in keys.iter().zip(values) {
        match value.map(|b| normalize_transcript_entry(&b, key)) {
            None => {
                let msg = format!(
                    "transcript entry {key} is missing (snapshot at step {} expects {})",
                    rec.step, tref.len
                );
                r.problem(ProblemKind::MissingTranscriptEntry, key.clone(), msg);
                return Ok(());
            }
            Some(Err(e)) => {
                r.problem(
                    ProblemKind::MalformedTranscriptEntry,
                    key.clone(),
                    e.to_string(),
                );
                return Ok(());
            }
            Some(Ok(e)) => entries.push(e),
        }
    }
    if let Err(e) = reassemble(&entries, tref) {
        let key = checkpoint_key(run, rec.step, rec.phase);
        let msg = format!(
            "transcript log does not match the snapshot at step {}: {}",
            rec.step,
            e.message()
        );
        r.problem(ProblemKind::TranscriptMismatch, key, msg);
    }
    Ok(())
}
