//! Enumerating the threads of a store ([`Store::list_threads`](super::Store::list_threads)), an
//! optional capability ([`Capabilities::list_threads`](super::Capabilities::list_threads)).

use super::{MAX_LIST_LIMIT, Store};
use crate::error::{Error, Result};
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

/// Every thread of `store`, walking all pages of [`Store::list_threads`](super::Store::list_threads).
pub async fn list_all_threads(store: &dyn Store) -> Result<Vec<ThreadId>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_threads(cursor.as_deref(), MAX_LIST_LIMIT)
            .await?;
        out.extend(page.threads);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
}
