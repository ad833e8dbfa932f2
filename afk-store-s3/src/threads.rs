//! Enumerating threads with `ListObjectsV2` and the delimiter `/`: every thread is one folder
//! `<prefix>/<thread>/` (a `CommonPrefix`), so a page of threads is one request however many
//! objects the threads hold. A thread exists while any object of it does: deleting its last
//! run removes it from the listing too. The folder of attention markers
//! (`<prefix>/.afk-attention/`) is the store's own and is skipped.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};

use crate::error::classify;
use crate::ops::Ops;

/// Threads under `root` (`""` or `"<prefix>/"`), in the service's key order, after `cursor`
/// (an S3 key this function handed out before).
pub(crate) async fn list_threads(
    ops: &Ops,
    root: &str,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ThreadPage> {
    let limit = thread_list_limit(limit);
    let mut req = ops
        .client
        .list_objects_v2()
        .bucket(&ops.bucket)
        .prefix(root)
        .delimiter("/")
        .max_keys(i32::try_from(limit).unwrap_or(i32::MAX));
    if let Some(c) = cursor {
        if !c.starts_with(root) {
            return Err(Error::invalid_input(format!(
                "bad thread cursor {c:?}: not one this store handed out"
            )));
        }
        req = req.start_after(c);
    }
    let page = req.send().await.map_err(|e| {
        classify(e, &ops.bucket, "ListObjectsV2").into_error(&ops.bucket, "ListObjectsV2")
    })?;
    let mut threads = Vec::new();
    for p in page.common_prefixes() {
        let Some(name) = p
            .prefix()
            .and_then(|p| p.strip_prefix(root))
            .and_then(|p| p.strip_suffix('/'))
        else {
            continue;
        };
        if name == crate::head::MARKERS || name == crate::finished::FINISHED {
            // The store's own folders (its indexes of runs), not threads.
            continue;
        }
        match ThreadId::new(name) {
            Ok(t) => threads.push(t),
            Err(_) => tracing::warn!(folder = name, "s3: a folder that is no thread id; skipped"),
        }
    }
    // The cursor is the S3 key to start after: past every object of the last folder (object
    // names below a folder use only id characters and `/`, all below 0x7f), or past the last
    // plain object (a leftover probe object at the root) if that comes later.
    let next_cursor = (page.is_truncated() == Some(true))
        .then(|| {
            let folder = page
                .common_prefixes()
                .iter()
                .filter_map(|p| p.prefix())
                .map(|p| format!("{p}\u{7f}"))
                .max();
            let object = page
                .contents()
                .iter()
                .filter_map(|o| o.key())
                .max()
                .map(str::to_owned);
            folder.max(object)
        })
        .flatten();
    Ok(ThreadPage {
        threads,
        next_cursor,
    })
}
