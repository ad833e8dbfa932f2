//! Enumerating the threads of a store ([`Store::list_threads`](super::Store::list_threads)), an
//! optional capability ([`Capabilities::list_threads`](super::Capabilities::list_threads)).

use super::MAX_LIST_LIMIT;
use crate::error::Error;
use crate::ids::ThreadId;

/// One page of a [`Store::list_threads`](super::Store::list_threads) answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadPage {
    /// Thread ids, each at most once across all pages of one listing.
    pub threads: Vec<ThreadId>,
    /// Pass to the next call to continue; `None` when the listing is complete. Opaque.
    pub next_cursor: Option<String>,
}

/// The page size to use for a thread listing: `limit` clamped to `1..=`[`MAX_LIST_LIMIT`].
pub fn thread_list_limit(limit: usize) -> usize {
    limit.clamp(1, MAX_LIST_LIMIT)
}

/// The answer of a store that cannot enumerate its threads.
pub fn threads_unsupported(store: &str) -> Error {
    Error::unsupported(format!(
        "the {store} store cannot list its threads; name the thread (--thread)"
    ))
}
