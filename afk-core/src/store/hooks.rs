//! [`HookStore`]: a store wrapper for tests that forwards every call to an inner store, with
//! hooks before and after each forwarded call. For wrappers that only count, record, gate,
//! report other capabilities or refuse some calls; a wrapper that changes what it forwards
//! (other arguments, other answers) is a store of its own.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{
    AttentionPage, Capabilities, Commit, CommitRejected, Epoch, ListPage, Store, ThreadPage,
    claim_if_new_each, commit_by_ref, commit_each,
};
use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};

/// One call of a [`Store`] method, as a [`Hooks::before`] hook sees it.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    /// [`Store::get`].
    Get {
        /// The thread.
        thread: &'a ThreadId,
        /// The key.
        key: &'a str,
    },
    /// [`Store::get_many`].
    GetMany {
        /// The thread.
        thread: &'a ThreadId,
        /// The keys.
        keys: &'a [String],
    },
    /// [`Store::list`].
    List {
        /// The thread.
        thread: &'a ThreadId,
        /// The key prefix.
        prefix: &'a str,
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// Most keys on the page.
        limit: usize,
    },
    /// [`Store::delete`].
    Delete {
        /// The thread.
        thread: &'a ThreadId,
        /// The keys.
        keys: &'a [String],
    },
    /// [`Store::delete_run`].
    DeleteRun {
        /// The thread.
        thread: &'a ThreadId,
        /// The run.
        run: &'a RunId,
    },
    /// [`Store::claim`].
    Claim {
        /// The thread.
        thread: &'a ThreadId,
        /// The run.
        run: &'a RunId,
    },
    /// [`Store::finish_run`].
    FinishRun {
        /// The thread.
        thread: &'a ThreadId,
        /// The run.
        run: &'a RunId,
    },
    /// [`Store::claim_if_new`].
    ClaimIfNew {
        /// The thread.
        thread: &'a ThreadId,
        /// The run.
        run: &'a RunId,
    },
    /// [`Store::commit`].
    Commit(&'a Commit),
    /// [`Store::commit_owned`].
    CommitOwned(&'a Commit),
    /// [`Store::commit_batch`].
    CommitBatch(&'a [Commit]),
    /// [`Store::list_threads`].
    ListThreads {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// Most threads on the page.
        limit: usize,
    },
    /// [`Store::list_attention`].
    ListAttention {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// Most runs on the page.
        limit: usize,
    },
    /// [`Store::attention`].
    Attention {
        /// The thread.
        thread: &'a ThreadId,
        /// The run.
        run: &'a RunId,
    },
    /// [`Store::list_finished`].
    ListFinished {
        /// The cutoff, ms since the Unix epoch.
        before_ms: u64,
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// Most entries on the page.
        limit: usize,
    },
    /// [`Store::forget_finished`].
    ForgetFinished(&'a [super::FinishedRun]),
}

impl Call<'_> {
    /// The name of the [`Store`] method: `"get"`, `"commit_batch"`, ….
    pub fn name(&self) -> &'static str {
        match self {
            Call::Get { .. } => "get",
            Call::GetMany { .. } => "get_many",
            Call::List { .. } => "list",
            Call::Delete { .. } => "delete",
            Call::DeleteRun { .. } => "delete_run",
            Call::Claim { .. } => "claim",
            Call::FinishRun { .. } => "finish_run",
            Call::ClaimIfNew { .. } => "claim_if_new",
            Call::Commit(_) => "commit",
            Call::CommitOwned(_) => "commit_owned",
            Call::CommitBatch(_) => "commit_batch",
            Call::ListThreads { .. } => "list_threads",
            Call::ListAttention { .. } => "list_attention",
            Call::Attention { .. } => "attention",
            Call::ListFinished { .. } => "list_finished",
            Call::ForgetFinished(_) => "forget_finished",
        }
    }
}

/// How a forwarded call ended, as a [`Hooks::after`] hook sees it.
#[derive(Debug, Clone, Copy)]
pub enum Done<'a> {
    /// It returned `Ok`.
    Ok,
    /// It returned this error (for `commit_owned`, the error of the refused commit).
    Err(&'a Error),
    /// A `commit_batch` returned these results, one per commit in order.
    Batch(&'a [Result<()>]),
}

impl Done<'_> {
    /// Whether the call succeeded (for a batch: every commit of it).
    pub fn is_ok(&self) -> bool {
        match self {
            Done::Ok => true,
            Done::Err(_) => false,
            Done::Batch(results) => results.iter().all(Result::is_ok),
        }
    }
}

/// What a [`HookStore`] does around each forwarded call. Every method has a default that does
/// nothing; implement the ones the test needs.
#[async_trait]
pub trait Hooks: Send + Sync + fmt::Debug {
    /// What [`Hooks::before`] hands to [`Hooks::after`] for the same call (`()` when nothing).
    type Note: Send + Default;

    /// The capabilities the wrapper reports, given the inner store's.
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner
    }

    /// Runs before `call` is forwarded (and may wait). An `Err` is returned to the caller
    /// instead of forwarding the call (for `commit_batch`, as the result of every commit), and
    /// [`Hooks::after`] is not called.
    async fn before(&self, call: Call<'_>) -> Result<Self::Note> {
        let _ = call;
        Ok(Self::Note::default())
    }

    /// Runs after the forwarded call returned, with what [`Hooks::before`] returned for it.
    fn after(&self, note: Self::Note, done: Done<'_>) {
        let _ = (note, done);
    }

    /// `false` (the default): every method is forwarded to the same method of the inner store.
    /// `true`: `claim_if_new`, `commit_owned` and `commit_batch` go through this wrapper's own
    /// `get`, `claim` and `commit` (the trait's composition of them), so the hooks see, and
    /// may refuse, each get, claim and commit they are made of.
    fn through_primitives(&self) -> bool {
        false
    }
}

/// A store that forwards every call to `inner`, running [`Hooks`] before and after each.
pub struct HookStore<H, S: ?Sized = dyn Store> {
    inner: Arc<S>,
    hooks: H,
}

impl<H: Hooks, S: Store + ?Sized> HookStore<H, S> {
    /// Wrap `inner` with `hooks`.
    pub fn new(inner: Arc<S>, hooks: H) -> Self {
        HookStore { inner, hooks }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// The hooks (and whatever they recorded).
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// `before`, the forwarded call `f`, then `after`.
    async fn around<T, F>(&self, call: Call<'_>, f: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send,
    {
        let note = self.hooks.before(call).await?;
        let out = f.await;
        match &out {
            Ok(_) => self.hooks.after(note, Done::Ok),
            Err(e) => self.hooks.after(note, Done::Err(e)),
        }
        out
    }
}

impl<H: fmt::Debug, S: fmt::Debug + ?Sized> fmt::Debug for HookStore<H, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookStore")
            .field("inner", &self.inner)
            .field("hooks", &self.hooks)
            .finish()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<H: Hooks, S: Store + ?Sized> Store for HookStore<H, S> {
    fn capabilities(&self) -> Capabilities {
        self.hooks.capabilities(self.inner.capabilities())
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        let call = Call::Get { thread, key };
        self.around(call, self.inner.get(thread, key)).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        let call = Call::GetMany { thread, keys };
        self.around(call, self.inner.get_many(thread, keys)).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let call = Call::List {
            thread,
            prefix,
            cursor,
            limit,
        };
        let f = self.inner.list(thread, prefix, cursor, limit);
        self.around(call, f).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        let call = Call::Delete { thread, keys };
        self.around(call, self.inner.delete(thread, keys)).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let call = Call::DeleteRun { thread, run };
        self.around(call, self.inner.delete_run(thread, run)).await
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        let call = Call::FinishRun { thread, run };

        self.around(call, self.inner.finish_run(thread, run, epoch))
            .await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        let call = Call::Claim { thread, run };
        self.around(call, self.inner.claim_if(thread, run, seen))
            .await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let call = Call::Claim { thread, run };
        self.around(call, self.inner.claim(thread, run)).await
    }

    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        if self.hooks.through_primitives() {
            return claim_if_new_each(self, thread, run).await;
        }
        let call = Call::ClaimIfNew { thread, run };
        self.around(call, self.inner.claim_if_new(thread, run))
            .await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.around(Call::Commit(commit), self.inner.commit(commit))
            .await
    }

    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        if self.hooks.through_primitives() {
            return commit_by_ref(self, commit).await;
        }
        let note = match self.hooks.before(Call::CommitOwned(&commit)).await {
            Ok(note) => note,
            Err(error) => {
                return Err(CommitRejected {
                    error,
                    commit: Box::new(commit),
                });
            }
        };
        let out = self.inner.commit_owned(commit).await;
        match &out {
            Ok(()) => self.hooks.after(note, Done::Ok),
            Err(rejected) => self.hooks.after(note, Done::Err(&rejected.error)),
        }
        out
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        if self.hooks.through_primitives() {
            return commit_each(self, commits).await;
        }
        let note = match self.hooks.before(Call::CommitBatch(commits)).await {
            Ok(note) => note,
            Err(error) => {
                return commits
                    .iter()
                    .map(|_| Err(Error::new(error.kind(), error.to_string())))
                    .collect();
            }
        };
        let out = self.inner.commit_batch(commits).await;
        self.hooks.after(note, Done::Batch(&out));
        out
    }

    async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<ThreadPage> {
        let call = Call::ListThreads { cursor, limit };
        self.around(call, self.inner.list_threads(cursor, limit))
            .await
    }

    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        let call = Call::ListAttention { cursor, limit };
        self.around(call, self.inner.list_attention(cursor, limit))
            .await
    }

    /// Forwarded without hooks: it reads the thread's keys, not the store.
    async fn effect_hashes(&self, thread: &ThreadId) -> Result<crate::hash::EffectHashes> {
        self.inner.effect_hashes(thread).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        let call = Call::Attention { thread, run };
        self.around(call, self.inner.attention(thread, run)).await
    }

    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<super::FinishedPage> {
        let call = Call::ListFinished {
            before_ms,
            cursor,
            limit,
        };
        self.around(call, self.inner.list_finished(before_ms, cursor, limit))
            .await
    }

    async fn forget_finished(&self, entries: &[super::FinishedRun]) -> Result<()> {
        let call = Call::ForgetFinished(entries);
        self.around(call, self.inner.forget_finished(entries)).await
    }
}
