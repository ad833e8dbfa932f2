//! The index of runs that need attention ([`Store::list_attention`](super::Store::list_attention)),
//! an optional capability ([`Capabilities::attention`](super::Capabilities::attention)).
//!
//! A run needs attention from its first commit until it has finished: while it is in progress
//! (someone works on it, or a dead process left it), paused for a human, suspended after a
//! model outage, or stopped on an uncertain effect. A recovery worker lists these runs instead
//! of reading every run of the store, so finding them costs O(runs needing attention), not
//! O(all runs).
//!
//! The index moves with the run's own commits: a [`Commit`](super::Commit) carrying
//! [`Attention::Open`] enters the run (or replaces its entry), one carrying
//! [`Attention::Closed`] removes it, atomically with the commit's records and under the same
//! fence. The entry's bytes are the caller's (the runner keeps a small JSON document there:
//! the run's state, its owner and lease, when a suspended run may go on); the store keeps them
//! opaque, like every value.

use super::MAX_LIST_LIMIT;
use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};

/// Largest entry an [`Attention::Open`] may carry, in bytes. The runner's entries are about
/// 200 bytes; the bound keeps the index small enough to list in pages.
pub const MAX_ATTENTION_LEN: usize = 4096;

/// How a commit changes the run's place in the index of runs that need attention.
#[derive(Clone, PartialEq, Eq)]
pub enum Attention {
    /// The run needs attention: enter it into the index with these bytes, or replace its
    /// entry.
    Open(Vec<u8>),
    /// The run has finished: remove it from the index. A store with a retention for finished
    /// runs applies it from this commit on (Redis: the per-run time to live).
    Closed,
}

impl std::fmt::Debug for Attention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attention::Open(v) => write!(f, "Open({} bytes)", v.len()),
            Attention::Closed => f.write_str("Closed"),
        }
    }
}

/// One run of the index and its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionRun {
    /// The thread of the run.
    pub thread: ThreadId,
    /// The run.
    pub run: RunId,
    /// The bytes of its last [`Attention::Open`].
    pub entry: Vec<u8>,
}

/// One page of a [`Store::list_attention`](super::Store::list_attention) answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttentionPage {
    /// Runs, each at most once across all pages of one listing.
    pub runs: Vec<AttentionRun>,
    /// Pass to the next call to continue; `None` when the listing is complete. Opaque.
    pub next_cursor: Option<String>,
}

/// The page size to use for an attention listing: `limit` clamped to `1..=`[`MAX_LIST_LIMIT`].
pub fn attention_list_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIST_LIMIT)
}

/// The answer of a store without the index.
pub fn attention_unsupported(store: &str) -> Error {
    Error::unsupported(format!(
        "the {store} store keeps no index of runs that need attention"
    ))
}

/// A cursor naming `(thread, run)`: `<thread>/<run>` (ids never contain `/`), which sorts as
/// the pair does. Stores that list the index in `(thread, run)` order may use it.
pub fn attention_cursor(thread: &ThreadId, run: &RunId) -> String {
    [thread.as_str(), "/", run.as_str()].concat()
}

/// The `(thread, run)` of a cursor made by [`attention_cursor`]; `InvalidInput` for anything
/// else.
pub fn parse_attention_cursor(cursor: &str) -> Result<(ThreadId, RunId)> {
    let bad = || Error::invalid_input(format!("bad attention cursor {cursor:?}"));
    let (t, r) = cursor.split_once('/').ok_or_else(bad)?;
    Ok((
        ThreadId::new(t).map_err(|_| bad())?,
        RunId::new(r).map_err(|_| bad())?,
    ))
}

/// Check an [`Attention`] before anything is written: an entry over [`MAX_ATTENTION_LEN`] is
/// `InvalidInput`.
pub fn validate_attention(attention: Option<&Attention>) -> Result<()> {
    if let Some(Attention::Open(v)) = attention
        && v.len() > MAX_ATTENTION_LEN
    {
        return Err(Error::invalid_input(format!(
            "attention entry of {} bytes is over the limit of {MAX_ATTENTION_LEN}",
            v.len()
        )));
    }
    Ok(())
}
