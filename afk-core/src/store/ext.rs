//! [`StoreExt`]: conveniences every [`Store`] gets for free, built on the trait's own methods.
//!
//! The [`Store`] trait stays small (what a backend must implement); whatever can be written
//! once on top of it lives here, as `object_store`'s `ObjectStoreExt` does. Today that is the
//! listings that follow every page of a paginated answer.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{MAX_LIST_LIMIT, Store};
use crate::error::Result;
use crate::ids::{RunId, ThreadId};
use crate::keys::{ParsedKey, parse_key};

/// Conveniences over any [`Store`] (implemented for every store, `dyn Store` included).
///
/// ```
/// # tokio_test_block_on(async {
/// use afk_core::MemoryStore;
/// use afk_core::store::{Store, StoreExt};
/// use afk_core::{RunId, ThreadId};
///
/// let store = MemoryStore::new();
/// let thread = ThreadId::new("t")?;
/// store.claim(&thread, &RunId::new("run_1")?).await?;
/// assert_eq!(store.list_all(&thread, "run:").await?, ["run:run_1"]);
/// assert_eq!(store.list_runs(&thread).await?, [RunId::new("run_1")?]);
/// assert_eq!(store.list_all_threads().await?, [thread]);
/// # Ok::<(), afk_core::Error>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[async_trait]
pub trait StoreExt: Store {
    /// Every key of `thread` that starts with `prefix`, in byte order: [`Store::list`]
    /// followed page by page (pages of [`MAX_LIST_LIMIT`]) to the end.
    ///
    /// Errors: those of [`Store::list`].
    async fn list_all(&self, thread: &ThreadId, prefix: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .list(thread, prefix, cursor.as_deref(), MAX_LIST_LIMIT)
                .await?;
            out.extend(page.keys);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Every thread of the store: [`Store::list_threads`] followed page by page to the end.
    ///
    /// Errors: those of [`Store::list_threads`] (`Unsupported` for a store that cannot list
    /// its threads).
    async fn list_all_threads(&self) -> Result<Vec<ThreadId>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list_threads(cursor.as_deref(), MAX_LIST_LIMIT).await?;
            out.extend(page.threads);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// The runs of `thread`, sorted by id: every run with a fence `run:<run>` (it was claimed)
    /// or a latest pointer `checkpoint:<run>:latest` (AFK Python writes no fence).
    ///
    /// Errors: those of [`Store::list`].
    async fn list_runs(&self, thread: &ThreadId) -> Result<Vec<RunId>> {
        let mut runs = BTreeMap::new();
        for key in self.list_all(thread, "run:").await? {
            if let Ok(ParsedKey::Run { run }) = parse_key(&key) {
                runs.insert(run.to_string(), run);
            }
        }
        for key in self.list_all(thread, "checkpoint:").await? {
            if let Ok(ParsedKey::Latest { run }) = parse_key(&key) {
                runs.insert(run.to_string(), run);
            }
        }
        Ok(runs.into_values().collect())
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Commit, MemoryStore};

    fn t(s: &str) -> ThreadId {
        ThreadId::new(s).unwrap()
    }

    /// More keys than one page holds, so `list_all` must follow the cursor.
    #[tokio::test]
    async fn list_all_follows_every_page() {
        let store = MemoryStore::new();
        let run = RunId::new("run_1").unwrap();
        let epoch = store.claim(&t("a"), &run).await.unwrap();
        let n = MAX_LIST_LIMIT * 2 + 7;
        let puts = (0..n)
            .map(|i| (format!("messages:run_1:{i:020}"), vec![1]))
            .collect();
        let commit = Commit {
            thread: t("a"),
            run: run.clone(),
            epoch,
            puts,
            latest: Some(b"p".to_vec()),
            attention: None,
        };
        store.commit(&commit).await.unwrap();
        let first = store.list(&t("a"), "messages:", None, usize::MAX).await;
        assert!(first.unwrap().next_cursor.is_some(), "one page holds all");
        let all = store.list_all(&t("a"), "messages:").await.unwrap();
        let want: Vec<String> = (0..n).map(|i| format!("messages:run_1:{i:020}")).collect();
        assert_eq!(all, want);
        // Through `dyn Store` too.
        let dyn_store: &dyn Store = &store;
        assert_eq!(
            dyn_store.list_all(&t("a"), "run:").await.unwrap(),
            ["run:run_1"]
        );
    }

    #[tokio::test]
    async fn list_runs_finds_fenced_and_pointer_only_runs() {
        let store = MemoryStore::new();
        for run in ["run_b", "run_a"] {
            store
                .claim(&t("a"), &RunId::new(run).unwrap())
                .await
                .unwrap();
        }
        // A pointer without a fence, as AFK Python leaves it: written through a claim whose
        // fence is then deleted.
        let c = RunId::new("run_c").unwrap();
        let epoch = store.claim(&t("a"), &c).await.unwrap();
        let commit = Commit {
            thread: t("a"),
            run: c.clone(),
            epoch,
            puts: Vec::new(),
            latest: Some(b"p".to_vec()),
            attention: None,
        };
        store.commit(&commit).await.unwrap();
        store
            .delete(&t("a"), &["run:run_c".to_owned()])
            .await
            .unwrap();
        store
            .claim(&t("b"), &RunId::new("run_z").unwrap())
            .await
            .unwrap();
        let runs: Vec<String> = store
            .list_runs(&t("a"))
            .await
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(runs, ["run_a", "run_b", "run_c"]);
    }

    #[tokio::test]
    async fn list_all_threads_follows_every_page() {
        let store = MemoryStore::new();
        let run = RunId::new("r").unwrap();
        let n = MAX_LIST_LIMIT + 3;
        for i in 0..n {
            store.claim(&t(&format!("t{i:05}")), &run).await.unwrap();
        }
        let mut got = store.list_all_threads().await.unwrap();
        got.sort();
        let want: Vec<ThreadId> = (0..n).map(|i| t(&format!("t{i:05}"))).collect();
        assert_eq!(got, want);
    }
}
