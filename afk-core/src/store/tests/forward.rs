//! The wrappers of this crate forward what they must: `get_many`, `commit_batch`,
//! `list_threads`, `claim_if_new` and `commit_owned` reach the inner store's own method instead of the trait's
//! default.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{RunId, ThreadId};
use crate::store::{
    Call, Commit, FaultStore, HookStore, Hooks, MemoryStore, RandomSource, RetryPolicy, RetryStore,
    Store, StoreExt,
};

/// Records the name of every call that reaches the store it hooks.
#[derive(Debug, Default)]
struct Record(Mutex<Vec<&'static str>>);

#[async_trait]
impl Hooks for Record {
    type Note = ();

    async fn before(&self, call: Call<'_>) -> Result<()> {
        self.0.lock().unwrap().push(call.name());
        Ok(())
    }
}

/// A memory store that records which of its methods were called.
type Recorder = HookStore<Record, MemoryStore>;

fn recorder() -> Arc<Recorder> {
    Arc::new(HookStore::new(
        Arc::new(MemoryStore::default()),
        Record::default(),
    ))
}

/// The calls recorded since the last `take`.
fn take(recorder: &Recorder) -> Vec<&'static str> {
    std::mem::take(&mut *recorder.hooks().0.lock().unwrap())
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
            attention: None,
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
        attention: None,
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
    take(inner)
}

#[tokio::test]
async fn retry_store_forwards_get_many_commit_batch_commit_owned_list_threads_and_claim_if_new() {
    let inner = recorder();
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
    let inner = recorder();
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

/// No hooks: a plain forwarding wrapper.
#[derive(Debug, Default)]
struct NoHooks {
    through_primitives: bool,
}

#[async_trait]
impl Hooks for NoHooks {
    type Note = ();

    fn through_primitives(&self) -> bool {
        self.through_primitives
    }
}

#[tokio::test]
async fn hook_store_forwards_every_method_to_the_same_method() {
    let inner = recorder();
    let store = HookStore::new(inner.clone(), NoHooks::default());
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
async fn hook_store_through_primitives_makes_composites_of_its_own_calls() {
    let inner = recorder();
    let hooks = NoHooks {
        through_primitives: true,
    };
    let store = HookStore::new(inner.clone(), hooks);
    let calls = through(&store, &inner).await;
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
