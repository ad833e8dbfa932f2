//! Enumerating threads ([`Store::list_threads`]), an optional capability: a store without
//! [`Capabilities::list_threads`](afk_core::store::Capabilities::list_threads) must answer
//! `Unsupported`; a store with it must list every thread that holds a key exactly once, in
//! pages of at most the limit, with any limit.
//!
//! Other cases may write threads concurrently into the same store, so these cases only make
//! claims about their own (uniquely named) threads and about duplicates.

use std::collections::BTreeMap;

use afk_core::{ErrorKind, ThreadId, store::Store};

use crate::support::{CaseResult, Ctx, commit, ensure, expect_kind, unique_run, unique_thread};

/// Every page of a listing with `limit`: the threads in listing order, checked for page sizes
/// and duplicates.
async fn walk(store: &dyn Store, limit: usize) -> Result<Vec<ThreadId>, String> {
    let mut out = Vec::new();
    let mut seen = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for page_no in 0.. {
        let page = store
            .list_threads(cursor.as_deref(), limit)
            .await
            .ctx(format!("list_threads (limit {limit}, page {page_no})"))?;
        ensure!(
            page.threads.len() <= limit.max(1),
            "list_threads with limit {limit} returned {} threads in one page",
            page.threads.len()
        );
        for t in page.threads {
            if let Some(first) = seen.insert(t.clone(), page_no) {
                return Err(format!(
                    "list_threads (limit {limit}) listed thread {t} twice (pages {first} and \
                     {page_no})"
                ));
            }
            out.push(t);
        }
        match page.next_cursor {
            Some(c) => {
                ensure!(
                    cursor.as_deref() != Some(c.as_str()),
                    "list_threads (limit {limit}) handed out the same cursor twice: {c:?}"
                );
                cursor = Some(c);
            }
            None => break,
        }
    }
    Ok(out)
}

/// `Ok(false)` (after checking the answer is `Unsupported`) when the store does not list
/// threads.
async fn supported(store: &dyn Store) -> Result<bool, String> {
    if store.capabilities().list_threads {
        return Ok(true);
    }
    expect_kind(
        store.list_threads(None, 10).await,
        ErrorKind::Unsupported,
        "list_threads on a store without the list_threads capability",
    )?;
    Ok(false)
}

/// Threads with records, a thread holding only a claimed run's fence, and threads whose ids
/// extend another's (`T`, `T-b`, `T.c`, `T_d`, `Tz`) are each listed exactly once, whatever the
/// page size; a thread never written is not listed.
pub async fn threads_holding_keys_are_listed_once(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let base = unique_thread("threads");
    let ids: Vec<ThreadId> = ["", "-b", ".c", "_d", "z"]
        .iter()
        .map(|s| ThreadId::new(format!("{base}{s}")).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    for (i, t) in ids.iter().enumerate() {
        let r = unique_run();
        let e = store.claim(t, &r).await.ctx("claim")?;
        if i != 1 {
            let puts = vec![(format!("checkpoint:{r}:0:run_started"), b"x".to_vec())];
            store
                .commit(&commit(t, &r, e, puts, Some(b"p".to_vec())))
                .await
                .ctx("commit")?;
        }
    }
    let never = unique_thread("threads-never");
    for limit in [1000, 3, 1, 0] {
        let listed = walk(store, limit).await?;
        for t in &ids {
            ensure!(
                listed.contains(t),
                "list_threads (limit {limit}) left out thread {t}, which holds keys"
            );
        }
        ensure!(
            !listed.contains(&never),
            "list_threads (limit {limit}) listed thread {never}, which was never written"
        );
    }
    Ok(())
}

/// A thread whose only run was deleted is either not listed any more or holds no key; claimed
/// again, it is listed again.
pub async fn emptied_threads_hold_nothing(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let t = unique_thread("threads-emptied");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let puts = vec![(format!("effect:{r}:0:c"), b"x".to_vec())];
    store
        .commit(&commit(&t, &r, e, puts, None))
        .await
        .ctx("commit")?;
    ensure!(
        walk(store, 1000).await?.contains(&t),
        "thread {t} holds keys but is not listed"
    );
    store.delete_run(&t, &r).await.ctx("delete_run")?;
    if walk(store, 1000).await?.contains(&t) {
        let left = store.list(&t, "", None, 10).await.ctx("list")?;
        ensure!(
            left.keys.is_empty(),
            "thread {t} is listed after its only run was deleted and still holds {:?}",
            left.keys
        );
    }
    store.claim(&t, &r).await.ctx("claim again")?;
    ensure!(
        walk(store, 1000).await?.contains(&t),
        "thread {t} was claimed again but is not listed"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use afk_core::store::ThreadPage;
    use afk_core::{
        MemoryStore, Result, RunId,
        store::{Capabilities, Commit, Epoch, ListPage},
    };
    use async_trait::async_trait;

    use super::*;

    /// How a broken thread listing breaks.
    #[derive(Debug, Clone, Copy)]
    enum Fault {
        /// Drops the last thread of every full page.
        DropsOne,
        /// Repeats the first thread of every later page.
        Repeats,
        /// Claims the capability and answers `Unsupported`.
        Lies,
        /// Ignores the limit.
        Oversized,
    }

    #[derive(Debug)]
    struct Broken(MemoryStore, Fault);

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl Store for Broken {
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        async fn get(&self, t: &ThreadId, k: &str) -> Result<Option<Vec<u8>>> {
            self.0.get(t, k).await
        }
        async fn get_many(&self, t: &ThreadId, k: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
            self.0.get_many(t, k).await
        }
        async fn commit_batch(&self, c: &[Commit]) -> Vec<Result<()>> {
            self.0.commit_batch(c).await
        }
        async fn list(&self, t: &ThreadId, p: &str, c: Option<&str>, l: usize) -> Result<ListPage> {
            self.0.list(t, p, c, l).await
        }
        async fn delete(&self, t: &ThreadId, k: &[String]) -> Result<()> {
            self.0.delete(t, k).await
        }
        async fn delete_run(&self, t: &ThreadId, r: &RunId) -> Result<u64> {
            self.0.delete_run(t, r).await
        }
        async fn claim(&self, t: &ThreadId, r: &RunId) -> Result<Epoch> {
            self.0.claim(t, r).await
        }
        async fn claim_if(&self, t: &ThreadId, r: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
            self.0.claim_if(t, r, seen).await
        }
        async fn finish_run(&self, t: &ThreadId, r: &RunId, e: Epoch) -> Result<()> {
            self.0.finish_run(t, r, e).await
        }
        async fn list_attention(
            &self,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<afk_core::store::AttentionPage> {
            self.0.list_attention(cursor, limit).await
        }
        async fn effect_hashes(&self, t: &ThreadId) -> Result<afk_core::hash::EffectHashes> {
            self.0.effect_hashes(t).await
        }

        async fn attention(&self, t: &ThreadId, r: &RunId) -> Result<Option<Vec<u8>>> {
            self.0.attention(t, r).await
        }
        async fn list_finished(
            &self,
            before_ms: u64,
            cursor: Option<&str>,
            limit: usize,
        ) -> Result<afk_core::store::FinishedPage> {
            self.0.list_finished(before_ms, cursor, limit).await
        }
        async fn forget_finished(&self, e: &[afk_core::store::FinishedRun]) -> Result<()> {
            self.0.forget_finished(e).await
        }
        async fn claim_if_new(&self, t: &ThreadId, r: &RunId) -> Result<Option<Epoch>> {
            self.0.claim_if_new(t, r).await
        }
        async fn commit(&self, c: &Commit) -> Result<()> {
            self.0.commit(c).await
        }
        async fn commit_owned(
            &self,
            c: Commit,
        ) -> std::result::Result<(), afk_core::store::CommitRejected> {
            self.0.commit_owned(c).await
        }
        async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<ThreadPage> {
            match self.1 {
                Fault::Lies => Err(afk_core::Error::unsupported("no")),
                Fault::Oversized => self.0.list_threads(cursor, 1000).await,
                Fault::DropsOne => {
                    let mut p = self.0.list_threads(cursor, limit).await?;
                    if p.next_cursor.is_some() && p.threads.len() > 1 {
                        p.threads.pop();
                    }
                    Ok(p)
                }
                Fault::Repeats => {
                    let mut p = self.0.list_threads(cursor, limit).await?;
                    if let Some(c) = cursor
                        && let Ok(t) = ThreadId::new(c)
                    {
                        p.threads.insert(0, t);
                    }
                    Ok(p)
                }
            }
        }
    }

    async fn both(store: Arc<dyn Store>) -> CaseResult {
        threads_holding_keys_are_listed_once(&*store).await?;
        emptied_threads_hold_nothing(&*store).await
    }

    #[tokio::test]
    async fn the_reference_store_passes() {
        both(Arc::new(MemoryStore::new())).await.unwrap();
    }

    #[tokio::test]
    async fn broken_listings_are_caught() {
        for fault in [
            Fault::DropsOne,
            Fault::Repeats,
            Fault::Lies,
            Fault::Oversized,
        ] {
            let store: Arc<dyn Store> = Arc::new(Broken(MemoryStore::new(), fault));
            let err = both(store).await.unwrap_err();
            println!("{fault:?}: {err}");
        }
    }

    #[tokio::test]
    async fn a_store_without_the_capability_must_say_unsupported() {
        #[derive(Debug)]
        struct Plain(MemoryStore);
        #[async_trait]
        impl Store for Plain {
            fn capabilities(&self) -> Capabilities {
                Capabilities::new("plain")
            }
            async fn get(&self, t: &ThreadId, k: &str) -> Result<Option<Vec<u8>>> {
                self.0.get(t, k).await
            }
            async fn list(
                &self,
                t: &ThreadId,
                p: &str,
                c: Option<&str>,
                l: usize,
            ) -> Result<ListPage> {
                self.0.list(t, p, c, l).await
            }
            async fn delete(&self, t: &ThreadId, k: &[String]) -> Result<()> {
                self.0.delete(t, k).await
            }
            async fn delete_run(&self, t: &ThreadId, r: &RunId) -> Result<u64> {
                self.0.delete_run(t, r).await
            }
            async fn claim(&self, t: &ThreadId, r: &RunId) -> Result<Epoch> {
                self.0.claim(t, r).await
            }
            async fn commit(&self, c: &Commit) -> Result<()> {
                self.0.commit(c).await
            }
        }
        both(Arc::new(Plain(MemoryStore::new()))).await.unwrap();
    }
}
