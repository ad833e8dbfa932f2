//! Retention that respects a run's state: [`sweep_finished`] deletes the runs that finished
//! before a cutoff, through the store's index of finished runs
//! ([`Store::list_finished`]), and nothing else.
//!
//! The index is a hint (see [`Store::list_finished`]), so each run it lists is checked before
//! anything is deleted:
//! - a run back in the index of runs that need attention (opened again after it closed) is
//!   not finished: its entry is dropped, the run kept (its next close enters it again);
//! - a run whose latest record is not terminal (in progress, paused, suspended, uncertain) is
//!   kept, whatever the index says;
//! - a run whose latest record cannot be read is kept, and its entry too: the sweep never
//!   deletes what it cannot read (`afk verify` says what is wrong with it);
//! - a run that is gone already only has its entry dropped.
//!
//! Child runs (a subagent's run, named by [`child_run_id`](super::child_run_id)) are not
//! deleted on their own: a parent that has not recorded a child's outcome yet would start the
//! child again if it were gone. They go with their parent: deleting a finished run deletes
//! the child runs its `pre_subagent_batch` records name, and theirs, first.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::Result;
use crate::ids::{RunId, ThreadId};
use crate::keys::checkpoint_prefix;
use crate::normalize::normalize_record;
use crate::schema::PhasePayload;
use crate::store::{FinishedRun, Store, StoreExt, latest_key};

use super::delegation::is_child_run_id;

/// Entries a sweep reads per listing.
const PAGE: usize = 500;

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Swept {
    /// Runs deleted (their child runs included).
    pub deleted: u64,
    /// Keys those runs held.
    pub keys: u64,
    /// Runs listed but kept: opened again, not terminal, unreadable, or a child run (which
    /// goes with its parent).
    pub kept: u64,
    /// Entries dropped from the index of finished runs (those of runs deleted or kept, and
    /// those of runs gone already: deleted before, or listed twice because they were closed
    /// twice).
    pub forgotten: u64,
}

/// Delete every run the store's index of finished runs lists as finished before `before_ms`
/// (ms since the Unix epoch, compared with the store's stamps), after checking each one (see
/// the module docs); drop the entries dealt with. Safe to run from several processes at once
/// (each deletion and drop is idempotent) and to stop at any point: an interrupted sweep
/// leaves entries that the next one finds again.
///
/// Errors: `Unsupported` for a store without
/// [`Capabilities::finished`](crate::store::Capabilities::finished) (a store whose server
/// expires finished runs itself, like Redis with a time to live, needs no sweep);
/// `Unavailable` and the store's other errors, with what was done until then lost only from
/// the report.
pub async fn sweep_finished(store: &dyn Store, before_ms: u64) -> Result<Swept> {
    let mut swept = Swept::default();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_finished(before_ms, cursor.as_deref(), PAGE)
            .await?;
        let mut done: Vec<FinishedRun> = Vec::with_capacity(page.runs.len());
        for entry in page.runs {
            match judge(store, &entry.thread, &entry.run).await? {
                Verdict::Delete => {
                    let (runs, keys) =
                        delete_with_children(store, &entry.thread, &entry.run).await?;
                    swept.deleted += runs;
                    swept.keys += keys;
                    done.push(entry);
                }
                Verdict::Drop => {
                    swept.kept += 1;
                    done.push(entry);
                }
                Verdict::Gone => done.push(entry),
                Verdict::Keep => swept.kept += 1,
            }
        }
        if !done.is_empty() {
            store.forget_finished(&done).await?;
            swept.forgotten += done.len() as u64;
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(swept),
        }
    }
}

/// What to do with a run the index lists.
enum Verdict {
    /// Finished: delete it, then drop its entry.
    Delete,
    /// Not to be deleted by this entry: drop the entry, keep the run.
    Drop,
    /// The run is gone already (deleted, or listed twice: closed twice): drop the entry.
    Gone,
    /// Keep the run and its entry (a later sweep looks again).
    Keep,
}

async fn judge(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Verdict> {
    if store.attention(thread, run).await?.is_some() {
        return Ok(Verdict::Drop); // opened again: its next close enters it anew
    }
    let key = latest_key(run);
    let Some(bytes) = store.get(thread, &key).await? else {
        return Ok(Verdict::Gone);
    };
    let record = match normalize_record(&bytes, thread, &key) {
        Ok(r) => r,
        Err(error) => {
            tracing::warn!(%thread, %run, %error, "retention sweep: the latest record of a finished run is unreadable; the run is kept");
            return Ok(Verdict::Keep);
        }
    };
    let terminal =
        matches!(&record.payload, PhasePayload::RunTerminal(p) if p.terminal_result.is_some());
    if !terminal {
        tracing::warn!(%thread, %run, phase = ?record.phase, "retention sweep: a run listed as finished is not terminal; kept");
        return Ok(Verdict::Drop);
    }
    if is_child_run_id(run) {
        return Ok(Verdict::Drop); // goes with its parent
    }
    Ok(Verdict::Delete)
}

/// Delete `run` and, first, the child runs its records name (depth first): returns the runs
/// and keys deleted. A child is deleted before its parent, so an interrupted sweep never
/// leaves a child whose parent is gone and could no longer name it.
async fn delete_with_children(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<(u64, u64)> {
    let mut order: Vec<RunId> = Vec::new();
    let mut seen: BTreeSet<RunId> = BTreeSet::new();
    let mut todo = vec![run.clone()];
    while let Some(r) = todo.pop() {
        if !seen.insert(r.clone()) {
            continue;
        }
        todo.extend(children_of(store, thread, &r).await?);
        order.push(r);
    }
    let (mut runs, mut keys) = (0, 0);
    // Parents were pushed before their children: delete in reverse, children first.
    for r in order.iter().rev() {
        let n = store.delete_run(thread, r).await?;
        if n > 0 {
            runs += 1;
            keys += n;
        }
    }
    Ok((runs, keys))
}

/// The child run ids a run's `pre_subagent_batch` records name.
async fn children_of(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Vec<RunId>> {
    let prefix = checkpoint_prefix(run);
    let keys: Vec<String> = store
        .list_all(thread, &prefix)
        .await?
        .into_iter()
        .filter(|k| k.ends_with(":pre_subagent_batch"))
        .collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (key, bytes) in keys.iter().zip(store.get_many(thread, &keys).await?) {
        let Some(bytes) = bytes else { continue };
        let Ok(record) = normalize_record(&bytes, thread, key) else {
            continue;
        };
        if let PhasePayload::PreSubagentBatch(p) = &record.payload
            && let Some(Value::Array(ids)) = p.extra.get("child_run_ids")
        {
            out.extend(
                ids.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|s| RunId::new(s).ok()),
            );
        }
    }
    Ok(out)
}
