//! The index of finished runs by when they finished ([`Store::list_finished`](super::Store::list_finished)),
//! an optional capability ([`Capabilities::finished`](super::Capabilities::finished)) for
//! stores whose retention is a sweep rather than an expiry the server applies itself.
//!
//! A commit carrying [`Attention::Closed`](super::Attention::Closed) that is applied also
//! enters the run into this index, stamped with the store's clock at that moment. A retention
//! sweep lists the runs that finished before a cutoff, oldest first, and deletes them: it
//! reads the runs it may delete and nothing else, whatever the number of runs in progress or
//! finished recently.
//!
//! The index is a hint, not the truth. A run may be listed after it was deleted, listed twice
//! (closed twice), or listed although a later commit opened it again; a sweep checks each run
//! it lists (still out of the index of runs that need attention, its latest record terminal)
//! before deleting it, and [`Store::forget_finished`](super::Store::forget_finished) drops the
//! entries it has dealt with. What the index never does is miss a run: every applied closing
//! commit enters its run.

use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};

use super::MAX_LIST_LIMIT;

/// One entry of the index of finished runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FinishedRun {
    /// When the store applied the closing commit, in ms since the Unix epoch, by the store's
    /// clock.
    pub finished_ms: u64,
    /// The thread of the run.
    pub thread: ThreadId,
    /// The run.
    pub run: RunId,
}

/// One page of a [`Store::list_finished`](super::Store::list_finished) answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishedPage {
    /// Entries in `(finished_ms, thread, run)` order, each at most once across the pages of
    /// one listing.
    pub runs: Vec<FinishedRun>,
    /// Pass to the next call to continue; `None` when the listing is complete. Opaque.
    pub next_cursor: Option<String>,
}

/// The answer of a store without the index.
pub fn finished_unsupported(store: &str) -> Error {
    Error::unsupported(format!(
        "the {store} store keeps no index of finished runs (its retention, if any, is applied \
         by the server)"
    ))
}

/// The page size to use for a listing: `limit` clamped to `1..=`[`MAX_LIST_LIMIT`].
pub fn finished_list_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIST_LIMIT)
}

/// Width of the zero-padded time in a cursor and in stores' index keys: every `u64` fits, so
/// text order is time order.
pub const FINISHED_MS_DIGITS: usize = 20;

/// A cursor naming an entry: `<finished_ms, 20 digits>/<thread>/<run>` (ids never contain
/// `/`), which sorts as the entries do. Stores that list in entry order may use it.
pub fn finished_cursor(entry: &FinishedRun) -> String {
    format!(
        "{:0width$}/{}/{}",
        entry.finished_ms,
        entry.thread,
        entry.run,
        width = FINISHED_MS_DIGITS
    )
}

/// The entry a cursor made by [`finished_cursor`] names; `InvalidInput` for anything else.
pub fn parse_finished_cursor(cursor: &str) -> Result<FinishedRun> {
    let bad = || Error::invalid_input(format!("bad finished-runs cursor {cursor:?}"));
    let mut parts = cursor.splitn(3, '/');
    let (Some(ms), Some(t), Some(r)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if ms.len() != FINISHED_MS_DIGITS || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok(FinishedRun {
        finished_ms: ms.parse().map_err(|_| bad())?,
        thread: ThreadId::new(t).map_err(|_| bad())?,
        run: RunId::new(r).map_err(|_| bad())?,
    })
}

/// The store's clock: ms since the Unix epoch (0 for a clock before it).
pub fn store_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ms: u64, t: &str, r: &str) -> FinishedRun {
        FinishedRun {
            finished_ms: ms,
            thread: ThreadId::new(t).expect("valid id"),
            run: RunId::new(r).expect("valid id"),
        }
    }

    #[test]
    fn cursors_round_trip_and_sort_as_their_entries() {
        let entries = [
            entry(9, "t", "r"),
            entry(10, "a", "a"),
            entry(10, "thread_1", "z"),
            entry(10, "thread_10", "a"),
            entry(u64::MAX, "t", "r"),
        ];
        for e in &entries {
            assert_eq!(
                &parse_finished_cursor(&finished_cursor(e)).expect("parses"),
                e
            );
        }
        for pair in entries.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(finished_cursor(&pair[0]) < finished_cursor(&pair[1]));
        }
    }

    #[test]
    fn malformed_cursors_are_invalid_input() {
        for c in [
            "",
            "12/t/r",
            "0000000000000000000x/t/r",
            "00000000000000000001/t",
            "x",
        ] {
            let err = parse_finished_cursor(c).expect_err(c);
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{c}");
        }
    }
}
