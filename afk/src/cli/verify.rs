//! `afk verify --thread T [--run R]`: check a run's stored invariants.
//!
//! Per run: the latest pointer exists and normalizes; the record it copies exists under its
//! step key (legacy AFK v1 states may lack it: noted, not a problem); the newest snapshot's
//! transcript log is complete and its digest chain matches the snapshot; every effect row
//! normalizes and has a well-formed input hash (64 lowercase hex digits). Intent rows without a
//! result are listed as `uncertain` (a crash between intent and result; not a problem by
//! itself, resume decides by the tool's policy).

use std::process::ExitCode;

use afk_core::keys::{checkpoint_key, effect_prefix, messages_key};
use afk_core::normalize::{normalize_effect_row, normalize_transcript_entry};
use afk_core::schema::{EffectStatus, SCHEMA_VERSION_V1, reassemble};
use afk_core::{Result, RunId, Store, ThreadId};

use super::common::{ids, latest, list_all, newest_snapshot, runs_of, with_store};

/// `afk verify`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread to check.
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
}

/// What one run's check found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Broken invariants.
    pub problems: Vec<String>,
    /// Intent rows without a result.
    pub uncertain: Vec<String>,
    /// Remarks that are not problems.
    pub notes: Vec<String>,
}

/// Prints `PROBLEM`, `uncertain`, `note` and `ok` lines and a closing count; exit 0 when no
/// problem was found, 1 otherwise.
pub fn run(args: Args, url: &str) -> ExitCode {
    with_store("verify", url, |store| async move {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let runs = match run {
            Some(r) => vec![r],
            None => runs_of(store.as_ref(), &thread).await?,
        };
        let (mut problems, mut uncertain) = (0, 0);
        for run in &runs {
            let f = check_run(store.as_ref(), &thread, run).await?;
            for p in &f.problems {
                println!("PROBLEM {run}: {p}");
            }
            for u in &f.uncertain {
                println!("uncertain {run}: {u}");
            }
            for n in &f.notes {
                println!("note {run}: {n}");
            }
            if f.problems.is_empty() {
                println!("ok {run}");
            }
            problems += f.problems.len();
            uncertain += f.uncertain.len();
        }
        println!(
            "{} run(s) checked, {problems} problem(s), {uncertain} uncertain effect(s)",
            runs.len()
        );
        Ok(if problems == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

fn well_formed_hash(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Check one run. Store errors are returned; broken data is reported in the findings.
pub async fn check_run(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Findings> {
    let mut f = Findings::default();
    let latest = match latest(store, thread, run).await {
        Ok(Some(l)) => Some(l),
        Ok(None) => {
            f.problems.push("no latest pointer".to_owned());
            None
        }
        Err(e) => {
            f.problems
                .push(format!("latest pointer does not normalize: {e}"));
            None
        }
    };
    if let Some(l) = &latest {
        let key = checkpoint_key(run, l.step, l.phase.as_str())?;
        if store.get(thread, &key).await?.is_none() {
            if l.schema_version == SCHEMA_VERSION_V1 {
                f.notes
                    .push(format!("legacy AFK state: latest has no step record {key}"));
            } else {
                f.problems
                    .push(format!("latest points to {key}, which does not exist"));
            }
        }
    }
    match newest_snapshot(store, thread, run, latest.as_ref()).await {
        Ok(Some(rec)) => check_transcript(store, thread, run, &rec, &mut f).await?,
        Ok(None) if latest.is_some() => f.notes.push("no runtime_state snapshot yet".to_owned()),
        Ok(None) => {}
        Err(e) => f
            .problems
            .push(format!("newest snapshot does not normalize: {e}")),
    }
    for key in list_all(store, thread, &effect_prefix(run)).await? {
        let Some(bytes) = store.get(thread, &key).await? else {
            continue;
        };
        match normalize_effect_row(&bytes, &key) {
            Err(e) => f.problems.push(e.to_string()),
            Ok(row) => {
                if !well_formed_hash(&row.input_hash) {
                    f.problems.push(format!(
                        "{key}: input_hash {:?} is not 64 lowercase hex digits",
                        row.input_hash
                    ));
                }
                if row.status() == EffectStatus::Intent {
                    f.uncertain.push(format!(
                        "{key}: intent without a result (may or may not have run)"
                    ));
                }
            }
        }
    }
    Ok(f)
}

async fn check_transcript(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    rec: &afk_core::schema::CheckpointRecord,
    f: &mut Findings,
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
                f.problems.push(format!(
                    "transcript entry {key} is missing (snapshot at step {} expects {})",
                    rec.step, tref.len
                ));
                return Ok(());
            }
            Some(Err(e)) => {
                f.problems.push(e.to_string());
                return Ok(());
            }
            Some(Ok(e)) => entries.push(e),
        }
    }
    if let Err(e) = reassemble(&entries, tref) {
        f.problems.push(format!(
            "transcript log does not match the snapshot at step {}: {}",
            rec.step,
            e.message()
        ));
    }
    Ok(())
}
