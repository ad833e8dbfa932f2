//! The index of finished runs on S3 ([`Store::list_finished`](afk_core::store::Store::list_finished)):
//! one empty object per closing commit,
//!
//! ```text
//! <prefix>/.afk-finished/<finished ms, 20 digits>/<thread>/<run>
//! ```
//!
//! outside every thread folder (a thread id never starts with `.`). The part after the folder
//! is the entry's cursor ([`finished_cursor`]), and zero-padded digits sort as the times do,
//! so a listing below a cutoff is one `ListObjectsV2` page from the oldest entry (or the
//! cursor), stopping at the first key at or past the cutoff: it reads the runs a sweep may
//! delete and nothing else.
//!
//! A closing commit writes its entry with its record objects, before its head swap (a marker
//! PUT in the same round of requests: no extra round trip unless the commit has no records),
//! stamped with this process's clock. So every closing commit that lands has its entry; one
//! that does not land may leave an entry for a run still open, which a sweep checks before it
//! deletes anything (the index is a hint). `delete_run` leaves the entries; a sweep forgets
//! them with `DeleteObjects`.

use afk_core::store::{
    FinishedPage, FinishedRun, finished_cursor, finished_list_limit, parse_finished_cursor,
};
use afk_core::{Error, Result};

use crate::head::Layout;
use crate::store::S3Store;

/// The name of the folder of entries, under the store's prefix.
pub(crate) const FINISHED: &str = ".afk-finished";

/// `InvalidInput` unless `cursor` is one this store could have handed out.
fn check_cursor(cursor: &str) -> Result<()> {
    parse_finished_cursor(cursor).map(|_| ()).map_err(|_| {
        Error::invalid_input(format!(
            "bad finished-runs cursor {cursor:?}: not one this store handed out"
        ))
    })
}

impl Layout {
    /// The folder of every entry: `<prefix>/.afk-finished/`.
    pub(crate) fn finished_dir(&self) -> String {
        format!("{}{FINISHED}/", self.root)
    }

    /// The object of one entry: `<prefix>/.afk-finished/<ms:020>/<thread>/<run>`.
    pub(crate) fn finished(&self, entry: &FinishedRun) -> String {
        format!("{}{}", self.finished_dir(), finished_cursor(entry))
    }
}

impl S3Store {
    /// [`afk_core::store::Store::list_finished`]: one page of entries in key order, up to the
    /// first at or past the cutoff.
    pub(crate) async fn list_finished_page(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<FinishedPage> {
        let limit = finished_list_limit(limit);
        if let Some(c) = cursor {
            check_cursor(c)?;
        }
        let root = self.layout.finished_dir();
        let start = cursor.map(|c| format!("{root}{c}"));
        let (keys, truncated) = self.ops.list_page(&root, start, limit).await?;
        let mut runs = Vec::with_capacity(keys.len());
        let mut past_cutoff = false;
        let mut last_rel = None;
        for key in &keys {
            let Some(rel) = key.strip_prefix(&root) else {
                continue;
            };
            last_rel = Some(rel);
            let Ok(entry) = parse_finished_cursor(rel) else {
                tracing::warn!(key = %key, "s3: an object in the finished-runs folder that is no entry; skipped");
                continue;
            };
            if entry.finished_ms >= before_ms {
                past_cutoff = true;
                break;
            }
            runs.push(entry);
        }
        let next_cursor = match last_rel {
            Some(last) if truncated && !past_cutoff => Some(last.to_owned()),
            _ => None,
        };
        Ok(FinishedPage { runs, next_cursor })
    }

    /// [`afk_core::store::Store::forget_finished`]: one `DeleteObjects` per 1,000 entries.
    pub(crate) async fn forget_finished_entries(&self, entries: &[FinishedRun]) -> Result<()> {
        let keys: Vec<String> = entries.iter().map(|e| self.layout.finished(e)).collect();
        self.ops.delete_many(&keys).await
    }
}
