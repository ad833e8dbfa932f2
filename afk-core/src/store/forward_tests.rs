//! The wrappers of this crate forward what they must: `get_many`, `commit_batch`,
//! `list_threads`, `claim_if_new` and `commit_owned` reach the inner store's own method instead of the trait's
//! default.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Capabilities, Commit, CommitRejected, Epoch, FaultStore, ListPage, MemoryStore, RandomSource,
    RetryPolicy, RetryStore, Store, StoreExt, ThreadPage,
};
use crate::error::Result;
use crate::ids::{RunId, ThreadId};

/// A memory store that records which of its methods were called.
#[derive(Debug, Default)]
struct Recorder {
    inner: MemoryStore,
    calls: Mutex<Vec<&'static str>>,
}

impl Recorder {
    fn saw(&self, name: &'static str) {
        self.calls.lock().unwrap().push(name);
    }

    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for Recorder {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn get(&self, t: &ThreadId, k: &str) -> Result<Option<Vec<u8>>> {
        self.saw("get");
        self.inner.get(t, k).await
    }
    async fn get_many(&self, t: &ThreadId, k: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.saw("get_many");
        self.inner.get_many(t, k).await
    }
    async fn list(&self, t: &ThreadId, p: &str, c: Option<&str>, l: usize) -> Result<ListPage> {
        self.saw("list");
        self.inner.list(t, p, c, l).await
    }
    async fn delete(&self, t: &ThreadId, k: &[String]) -> Result<()> {
        self.saw("delete");
        self.inner.delete(t, k).await
    }
    async fn delete_run(&self, t: &ThreadId, r: &RunId) -> Result<u64> {
        self.saw("delete_run");
        self.inner.delete_run(t, r).await
    }
    async fn claim(&self, t: &ThreadId, r: &RunId) -> Result<Epoch> {
        self.saw("claim");
        self.inner.claim(t, r).await
    }
    async fn claim_if_new(&self, t: &ThreadId, r: &RunId) -> Result<Option<Epoch>> {
        self.saw("claim_if_new");
        self.inner.claim_if_new(t, r).await
    }
    async fn commit(&self, c: &Commit) -> Result<()> {
        self.saw("commit");
        self.inner.commit(c).await
    }
    async fn commit_owned(&self, c: Commit) -> std::result::Result<(), CommitRejected> {
        self.saw("commit_owned");
        self.inner.commit_owned(c).await
    }
    async fn list_threads(&self, c: Option<&str>, l: usize) -> Result<ThreadPage> {
        self.saw("list_threads");
        self.inner.list_threads(c, l).await
    }
    async fn commit_batch(&self, c: &[Commit]) -> Vec<Result<()>> {
        self.saw("commit_batch");
        self.inner.commit_batch(c).await
    }
}

fn t(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}

/// Claims two runs in two threads through `store` and commits one record to each with one
/// `commit_batch`; returns the commits.
async fn fill(store: &dyn Store) -> Vec<Commit> {
    let mut commits = Vec::new();
    for (thread, run) in [("t_a", "run_a"), ("t_b", "run_b")] {
        let run = RunId::new(run).unwrap();
        let epoch = store.claim(&t(thread), &run).await.unwrap();
        commits.push(Commit {
            thread: t(thread),
            run: run.clone(),
            epoch,
            puts: vec![(format!("messages:{run}:1"), b"m".to_vec())],
            latest: None,
        });
    }
    let results = store.commit_batch(&commits).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    commits
}

/// What reached the inner store when `get_many`, `commit_batch`, `list_threads` and
/// `claim_if_new` went through `wrapper`, after checking their answers.
async fn through(wrapper: &dyn Store, inner: &Recorder) -> Vec<&'static str> {
    fill(wrapper).await;
    let fresh = RunId::new("run_c").unwrap();
    let epoch = wrapper.claim_if_new(&t("t_a"), &fresh).await.unwrap();
    let Some(epoch) = epoch else {
        panic!("a run with no pointer is claimed")
    };
    let owned = Commit {
        thread: t("t_a"),
        run: fresh.clone(),
        epoch,
        puts: vec![(format!("messages:{fresh}:1"), b"o".to_vec())],
        latest: Some(b"p".to_vec()),
    };
    wrapper.commit_owned(owned).await.unwrap();
    assert_eq!(
        wrapper.get(&t("t_a"), "messages:run_c:1").await.unwrap(),
        Some(b"o".to_vec())
    );
    let keys = vec!["messages:run_a:1".to_owned(), "messages:run_a:2".to_owned()];
    let values = wrapper.get_many(&t("t_a"), &keys).await.unwrap();
    assert_eq!(values, [Some(b"m".to_vec()), None]);
    let mut threads = wrapper.list_all_threads().await.unwrap();
    threads.sort();
    assert_eq!(threads, [t("t_a"), t("t_b")], "the inner store's threads");
    inner.take()
}

#[tokio::test]
async fn retry_store_forwards_get_many_commit_batch_commit_owned_list_threads_and_claim_if_new() {
    let inner = Arc::new(Recorder::default());
    let store = RetryStore::from_arc(
        inner.clone(),
        RetryPolicy::default(),
        RandomSource::seeded(1),
    );
    let calls = through(&store, &inner).await;
    assert_eq!(
        calls,
        [
            "claim",
            "claim",
            "commit_batch",
            "claim_if_new",
            "commit_owned",
            "get",
            "get_many",
            "list_threads"
        ]
    );
}

#[tokio::test]
async fn fault_store_forwards_get_many_and_list_threads() {
    let inner = Arc::new(Recorder::default());
    let store = FaultStore::from_arc(inner.clone());
    let calls = through(&store, &inner).await;
    // `commit_batch`, `claim_if_new` and `commit_owned` go through the fault store's own
    // per-call faults by design.
    assert_eq!(
        calls,
        [
            "claim",
            "claim",
            "commit",
            "commit",
            "get",
            "claim",
            "commit",
            "get",
            "get_many",
            "list_threads"
        ]
    );
}
