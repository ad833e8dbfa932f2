//! The store contract: a small trait over bytes and logical keys.
//!
//! A store keeps opaque bytes under `(thread, key)`. It never sees schema types: everything
//! about records lives in the rest of `afk-core`. Backends implement [`Store`]; the runner holds
//! them as `Arc<dyn Store>`.
//!
//! Runs are *fenced*: [`Store::claim`] hands out a strictly increasing [`Epoch`] per run, and
//! every [`Commit`] carries the epoch of the claim it was made under. A commit whose epoch is no
//! longer the run's current epoch fails with [`ErrorKind::Fenced`](crate::ErrorKind::Fenced) and
//! writes nothing. Two processes resuming one run: exactly one goes on.
//!
//! Logical keys are built by [`crate::keys`]. Every key that belongs to a run has the form
//! `<family>:<run_id>:…` (`checkpoint:`, `effect:`, `messages:`, `bgtool:`) or is `run:<run_id>`,
//! so a store can find the run of any key with [`run_of_key`] (Redis uses it for hash tags, S3
//! and RocksDB for their per-run layout).
//!
//! Every name of the store contract has this one path (`afk_core::store::Store`, [`Commit`],
//! [`Epoch`], …), so the crate root keeps only what nearly every caller names: errors, ids,
//! [`MemoryStore`](crate::MemoryStore) (a backend, named at its crate's root like the other
//! stores' `RocksDbStore`, `RedisStore`, `S3Store`) and `CheckpointConfig`.

use std::fmt;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::hash::EffectHashes;
use crate::ids::{RunId, ThreadId};

mod attention;
mod ext;
#[cfg(any(test, feature = "test-kit"))]
mod fault;
mod finished;
#[cfg(any(test, feature = "test-kit"))]
mod hooks;
// `MemoryStore` is named at the crate root only (`afk_core::MemoryStore`).
pub(crate) mod memory;
mod retry;
mod threads;
mod validate;

pub use crate::ids::{MAX_KEY_LEN, validate_key};
pub use attention::{
    Attention, AttentionPage, AttentionRun, MAX_ATTENTION_LEN, attention_cursor,
    attention_list_limit, attention_unsupported, parse_attention_cursor, validate_attention,
};
pub use ext::StoreExt;
#[cfg(any(test, feature = "test-kit"))]
pub use fault::{CrashMode, FaultEvent, FaultStore, Hold, Op};
pub use finished::{
    FINISHED_MS_DIGITS, FinishedPage, FinishedRun, finished_cursor, finished_list_limit,
    finished_unsupported, parse_finished_cursor, store_now_ms,
};
#[cfg(any(test, feature = "test-kit"))]
pub use hooks::{Call, Done, HookStore, Hooks};
#[cfg(test)]
pub(crate) use memory::MemoryStore;
pub use retry::{RandomSource, RetryPolicy, RetryStore};
pub use threads::{ThreadPage, thread_list_limit, threads_unsupported};
pub use validate::{validate_commit, validate_list};

/// A fencing epoch. Epoch 0 means "never claimed"; [`Store::claim`] returns 1, 2, ….
///
/// Only the order of epochs is part of the contract: a backend may skip numbers, so callers
/// compare epochs, never count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One atomic write: a set of keys of one run, plus optionally the run's latest pointer.
///
/// Applied all-or-nothing, and only if `epoch` is still the run's current epoch.
#[derive(Clone, PartialEq, Eq)]
pub struct Commit {
    /// The thread the run lives in.
    pub thread: ThreadId,
    /// The run every key belongs to.
    pub run: RunId,
    /// The epoch of the claim this commit is made under.
    pub epoch: Epoch,
    /// Keys and values to write (insert or overwrite). Every key must belong to `run`
    /// ([`run_of_key`]), appear once, and be neither the latest pointer (use `latest`) nor the
    /// fence `run:<run>` (written only by [`Store::claim`]); see [`validate_commit`].
    pub puts: Vec<(String, Vec<u8>)>,
    /// New value of `checkpoint:<run>:latest`, if this commit moves the pointer.
    pub latest: Option<Vec<u8>>,
    /// How the commit moves the run in or out of the index of runs that need attention
    /// ([`Store::list_attention`]), applied with the rest of the commit; `None` leaves the
    /// run's place as it is. Stores without the index ignore it.
    pub attention: Option<Attention>,
}

impl Commit {
    /// Total payload bytes of the commit (keys and values), for metrics and size limits.
    pub fn byte_len(&self) -> usize {
        self.puts
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            + self.latest.as_ref().map_or(0, Vec::len)
            + match &self.attention {
                Some(Attention::Open(v)) => v.len(),
                _ => 0,
            }
    }
}

impl fmt::Debug for Commit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit")
            .field("thread", &self.thread)
            .field("run", &self.run)
            .field("epoch", &self.epoch)
            .field(
                "keys",
                &self
                    .puts
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("latest", &self.latest.as_ref().map(Vec::len))
            .field("attention", &self.attention)
            .finish()
    }
}

/// One page of a [`Store::list`] answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Keys, sorted by byte order, all starting with the requested prefix.
    pub keys: Vec<String>,
    /// Pass to the next call to continue; `None` when the listing is complete.
    pub next_cursor: Option<String>,
}

/// What a store supports, as data, so callers branch on facts rather than on store types.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name (`"memory"`, `"rocksdb"`, `"redis"`, `"s3"`, …).
    pub name: &'static str,
    /// Largest value a single put may carry, in bytes, if the backend has a limit. The runner
    /// keeps its records under it: a tool output over its step's share is recorded as a failed
    /// call ("its output was dropped"), a longer error message is cut, and a model answer too
    /// large to record fails as a model call does, rather than a commit the store must refuse
    /// (which would leave the run unable to go on).
    pub max_value_size: Option<usize>,
    /// Most keys one commit may carry, if the backend has a limit.
    pub max_commit_keys: Option<usize>,
    /// Whether keys can expire (a per-run TTL).
    pub ttl: bool,
    /// Whether [`Store::commit_batch`] sends several commits in one round trip.
    pub batch_commit: bool,
    /// Whether an acknowledged commit survives a process crash.
    pub durable: bool,
    /// Whether several processes may open the same store at once.
    pub multi_process: bool,
    /// Whether [`Store::list_threads`] enumerates the store's threads.
    pub list_threads: bool,
    /// Whether the store keeps the index of runs that need attention ([`Commit::attention`],
    /// [`Store::list_attention`], [`Store::attention`]).
    pub attention: bool,
    /// Whether [`Store::claim_if`] claims on condition of the current epoch.
    pub claim_if: bool,
    /// Whether the store keeps the index of finished runs by when they finished
    /// ([`Store::list_finished`], [`Store::forget_finished`]), for a retention sweep. A store
    /// whose server expires finished runs itself (Redis's per-run time to live) has no need
    /// of it.
    pub finished: bool,
}

impl Capabilities {
    /// Capabilities with every optional feature off, for `name`.
    pub fn new(name: &'static str) -> Self {
        Capabilities {
            name,
            max_value_size: None,
            max_commit_keys: None,
            ttl: false,
            batch_commit: false,
            durable: false,
            multi_process: false,
            list_threads: false,
            attention: false,
            claim_if: false,
            finished: false,
        }
    }
}

/// Most keys a single [`Store::list`] call returns when the caller asks for more.
pub const MAX_LIST_LIMIT: usize = 1000;

/// The store contract. Every method is safe to call concurrently from many tasks.
///
/// Errors: backends map their native errors to the coarse kinds of [`crate::ErrorKind`];
/// network failures, timeouts and overload are `Unavailable` (retryable).
///
/// # Writing a store: a guide
///
/// A store keeps bytes under `(thread, key)`; it never parses them. Run the conformance suite
/// (`afk-conformance`) on yours from a `tests/conformance.rs` of one macro line,
/// `afk_conformance::store_suite!(store(), reopen = open_at);`, and read
/// `examples/custom-store` (an append-only log file) for a whole store in 300 lines.
///
/// **Keys.** Every key is printable ASCII, 1 to [`MAX_KEY_LEN`](MAX_KEY_LEN)
/// bytes ([`validate_key`]). The keys of run `<run>` are the families
/// of [`KEY_FAMILIES`] (`<family>:<run>:…`) plus the fence `run:<run>`; [`run_of_key`] finds
/// the run of any key, so a store may lay a run out together (a hash slot, a folder, a key
/// range). [`Store::delete_run`] removes exactly those keys: every family of [`KEY_FAMILIES`]
/// and the fence, not `run_10`'s when deleting `run_1` (match `<family>:<run>:`, with the
/// colon). Keys of no run (`other:x`) are valid to read, list and delete, never to commit.
///
/// **The fence `run:<run>`.** Written only by [`Store::claim`], never by a commit
/// ([`validate_commit`] rejects it). Its *value is private to the store*: keep whatever your
/// fencing needs there (an epoch counter, JSON, a version) or nothing meaningful; callers and
/// the suite only check that the key exists after a claim, is listed like any other key, and
/// is gone after `delete_run`. Only the order of the epochs `claim` returns is contract.
///
/// **Cursors.** A cursor is a key. `list(thread, prefix, Some(c), limit)` returns the keys
/// under `prefix` strictly after `c` in byte order. Any valid key is a valid cursor, not only
/// one the store returned: a cursor that sorts before the prefix means "from the first key
/// of the prefix", one that sorts after every key of the prefix gives an empty last page.
/// Return as `next_cursor` a key such that continuing from it gives the rest (the last key of
/// the page is the simple choice), and `None` once the listing is complete. A page may be
/// shorter than `limit`, or empty, and still carry a cursor; a key that existed throughout a
/// listing appears in exactly one page.
///
/// **Commits.** All or nothing, fenced, and atomic for readers: a reader never sees the
/// pointer name a record that is not there, a record of a commit whose pointer has not
/// moved, or part of a commit. Two writes (pointer and records), even back to back, break
/// this; so does acknowledging a commit a crash can lose, if the store reports
/// [`Capabilities::durable`].
///
/// **Which case checks which clause** (`afk_conformance::cases::<group>::<case>`):
///
/// | clause | cases |
/// |---|---|
/// | `get`, `get_many` (order, repeats) | `basic::*`, `model::model_based` |
/// | commit all or nothing; invalid commits write nothing | `atomicity::rejected_commit_writes_nothing`, `keys::invalid_commit_keys_are_rejected`, `basic::empty_commit_checks_fence_only` |
/// | pointer moves with its records, for live readers | `atomicity::pointer_moves_with_its_record`, `torn::concurrent_reader_sees_no_torn_commit` |
/// | commits survive a killed writer whole, acknowledged ones all | `crash::killed_writer_leaves_whole_commits` (durable stores) |
/// | `commit_batch`: one result per commit, in order | `basic::commit_batch_applies_each_in_order` |
/// | `commit_owned`: `commit`'s outcome, and a refused commit handed back unchanged | `model::model_based` |
/// | fencing: increasing epochs; stale, future and unclaimed epochs `Fenced` | `fencing::*`, `concurrency::racing_resumers_one_finishes` |
/// | a read after a claim sees every commit made before the claim | `concurrency::racing_starters_run_it_once` |
/// | `claim_if_new`: claims only a run with no pointer, and a refusal fences nothing | `fencing::claim_if_new_claims_only_runs_without_a_pointer`, `model::model_based` |
/// | `list`: byte order, prefixes, every page size, cursors anywhere, the fence listed | `list::*`, `model::model_based` (explicit paging), `large::hundred_thousand_keys_list_in_order` |
/// | `delete`, `delete_run` (every family, prefix-sharing runs untouched) | `delete::*`, `isolation::prefix_sharing_runs_are_isolated` |
/// | threads and runs isolated | `isolation::*` |
/// | the index of runs that need attention: listed once with their entry, moved only by applied commits, atomically with them | `attention::*` (stores with [`Capabilities::attention`]) |
/// | the index of finished runs: every applied closing commit enters its run, stamped, listed oldest first below a cutoff, once each; `forget_finished` drops only what it names | `finished::*` (stores with [`Capabilities::finished`]) |
/// | values: empty, odd bytes, up to `max_value_size` | `values::*` |
/// | keys: odd valid ones round-trip, invalid ones `InvalidInput` | `keys::*` |
/// | everything above against the reference store, shrunk to a minimal sequence | `model::model_based` |
/// | records of real runs: resume, corruption, the AFK corpus | `resume::crash_and_resume`, `corruption::*`, `corpus::*` |
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// What this store supports.
    fn capabilities(&self) -> Capabilities;

    /// Read one key. `Ok(None)` when it does not exist. The latest pointer is read as the key
    /// `checkpoint:<run>:latest`.
    ///
    /// Errors: `InvalidInput` for a malformed key; `Unavailable` when the backend cannot answer.
    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>>;

    /// Read several keys of one thread; answers are in the order of `keys`. Backends override
    /// this to use one round trip; the default reads them one by one.
    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        get_each(self, thread, keys).await
    }

    /// List the keys of `thread` that start with `prefix` (the empty prefix lists all), sorted
    /// by byte order, at most `limit` per page (clamped to `1..=`[`MAX_LIST_LIMIT`]). Pass the
    /// returned `next_cursor` to continue: the next page starts strictly after it. A cursor is
    /// a key (any valid key, see the guide above): one before the prefix starts at the
    /// prefix, one after it gives an empty page. A page may hold fewer than `limit` keys, or
    /// none, and still have a `next_cursor`.
    ///
    /// Errors: `InvalidInput` for a non-empty prefix or a cursor that is not a valid key;
    /// `Unavailable`. The fence key `run:<run>` is listed like any other
    /// key. Keys written after a listing started may or may not appear in later pages; keys
    /// that existed throughout appear exactly once.
    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage>;

    /// Delete keys of a thread. Missing keys are ignored. Not fenced: deletion is maintenance
    /// (the CLI's `prune`), not part of a run.
    ///
    /// Errors: `InvalidInput` for a malformed key (nothing is deleted); `Unavailable`.
    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()>;

    /// Delete every key of a run, including its latest pointer and fence. Returns how many
    /// logical keys were removed (the fence counts as one key, as it is listed as one). Keys of
    /// other runs are untouched, also those of a run whose id has this one as a prefix
    /// (`run_1` vs `run_10`).
    ///
    /// Deleting the fence resets the run's epochs: a later claim may hand out an epoch that was
    /// handed out before. Delete only runs that nobody is working on.
    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64>;

    /// Claim a run: returns a new epoch, strictly greater than every epoch handed out for this
    /// run before (also across processes, for multi-process stores) since the run was last
    /// deleted. From then on, commits carrying an older epoch fail with `Fenced`. Creates the
    /// fence key `run:<run>` if needed. Reads made after `claim` returns see every commit
    /// acknowledged before it (no stale cache, no lagging replica): the runner decides under
    /// its claim whether a run exists and where it stands.
    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch>;

    /// The run has ended: its terminal record is durable. The same as an empty commit under
    /// `epoch` carrying [`Attention::Closed`] (the runner puts that on the terminal record's own
    /// commit; this is for a run found ended whose index entry may have outlived it): the run
    /// leaves the index of runs that need attention, and a store with a retention for finished
    /// runs applies it from now on (Redis: the per-run time to live). Runs that have not ended
    /// (in progress, paused, suspended, uncertain) never expire by retention. `Fenced` if a
    /// newer claim exists. Calling it again is harmless.
    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        self.commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: Vec::new(),
            latest: None,
            attention: Some(Attention::Closed),
        })
        .await
    }

    /// Claim the run only if its current epoch is still `seen` (a compare-and-swap on the
    /// fence): `Ok(Some(epoch))` with the new epoch, as [`Store::claim`] gives it, or `Ok(None)`,
    /// with nothing claimed, when another claim came first. A recovery worker takes a run over
    /// this way, with the epoch its index entry was written under, so that of several workers
    /// that found the same expired lease exactly one takes the run.
    ///
    /// Errors: `Unsupported` unless [`Capabilities::claim_if`] (the default); `Unavailable`.
    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        let _ = (thread, run, seen);
        Err(Error::unsupported(format!(
            "the {} store cannot claim a run on condition of its epoch",
            self.capabilities().name
        )))
    }

    /// Claim a run that has no latest pointer: `Ok(None)`, and nothing claimed, when
    /// `checkpoint:<run>:latest` exists; otherwise [`Store::claim`]'s new epoch. This is how a
    /// runner starts a fresh run: a start refused because the run exists must not fence off
    /// the runner working on it.
    ///
    /// The look and the claim need not be atomic: a runner that gets an epoch above the first
    /// one it could have had looks at the run again under its claim. Stores override this to
    /// do both in one round trip; the default is [`Store::get`] of the pointer, then
    /// [`Store::claim`].
    ///
    /// Errors: those of `get` and `claim`.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        claim_if_new_each(self, thread, run).await
    }

    /// Atomically write `commit.puts` and, if given, the latest pointer, only if `commit.epoch`
    /// is the run's current epoch. Otherwise fail with `Fenced` and write nothing. A run that
    /// was never claimed has no current epoch: every commit to it is `Fenced`. A commit with no
    /// puts and no latest only checks the fence.
    ///
    /// All or nothing: no reader ever sees a pointer to a record of this commit that is not
    /// there, or a record of it without its pointer move. A commit whose outcome is unknown (a
    /// timeout after the request was sent) is resolved by the backend before returning, or
    /// reported as `Unavailable` only when nothing was written.
    ///
    /// Errors: `Fenced`; `InvalidInput` when [`validate_commit`] rejects the commit, for a value
    /// over [`Capabilities::max_value_size`] or more keys than
    /// [`Capabilities::max_commit_keys`]; `Unavailable`. On every error nothing is written.
    async fn commit(&self, commit: &Commit) -> Result<()>;

    /// [`Store::commit`] of a commit the caller is done with, taken by value, so a store that
    /// keeps the bytes it is given (the in-memory store) can move them in instead of copying
    /// them. The same contract as `commit`; on an error nothing is written and the commit
    /// comes back unchanged in the [`CommitRejected`], so the caller can retry it. The
    /// runner's checkpoint writer commits through this. The default is `commit` by reference
    /// ([`commit_by_ref`]); override it only to save that copy.
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        commit_by_ref(self, commit).await
    }

    /// List the threads of the store: every thread that holds at least one key (a claimed run's
    /// fence counts) is in exactly one page of a complete listing, in an order of the store's
    /// choosing. At most `limit` per page (clamped to `1..=`[`MAX_LIST_LIMIT`]); pass the
    /// returned `next_cursor` to continue (opaque). A page may hold fewer than `limit`
    /// threads, or none, and still have a `next_cursor`.
    ///
    /// A thread whose keys were all deleted may still be listed by stores that keep an index
    /// of threads (callers find it empty). Threads created while a listing runs may or may not
    /// appear. Stores answer without reading every key where they can (an index, a listing by
    /// folder, a seek per thread).
    ///
    /// Errors: `Unsupported` unless [`Capabilities::list_threads`] (the default);
    /// `InvalidInput` for a cursor the store did not hand out; `Unavailable`.
    async fn list_threads(&self, cursor: Option<&str>, limit: usize) -> Result<ThreadPage> {
        let _ = (cursor, limit);
        Err(threads_unsupported(self.capabilities().name))
    }

    /// List the runs that need attention: every run whose last commit carrying an
    /// [`Attention`] carried [`Attention::Open`], with that entry, is in exactly one page of
    /// a complete listing, in an order of the store's choosing; finished runs
    /// ([`Attention::Closed`], [`Store::finish_run`]) and deleted runs ([`Store::delete_run`])
    /// are not. At most `limit` per page (clamped to `1..=`[`MAX_LIST_LIMIT`]); pass the
    /// returned `next_cursor` to continue (opaque). A page may hold fewer than `limit` runs,
    /// or none, and still have a `next_cursor`. Costs O(runs listed), never a read of the
    /// runs that have finished.
    ///
    /// Errors: `Unsupported` unless [`Capabilities::attention`] (the default);
    /// `InvalidInput` for a cursor the store did not hand out; `Unavailable`.
    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        let _ = (cursor, limit);
        Err(attention_unsupported(self.capabilities().name))
    }

    /// The index entry of one run: `Some` with the bytes of its last [`Attention::Open`]
    /// while it needs attention, `None` once it finished, was deleted, or never had one.
    ///
    /// Errors: `Unsupported` unless [`Capabilities::attention`] (the default); `Unavailable`.
    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        let _ = (thread, run);
        Err(attention_unsupported(self.capabilities().name))
    }

    /// List the index of finished runs: the runs a commit carrying [`Attention::Closed`]
    /// (also [`Store::finish_run`]'s) closed before `before_ms` by the store's clock (ms since
    /// the Unix epoch), oldest first, in `(finished_ms, thread, run)` order, at most `limit`
    /// per page (clamped to `1..=`[`MAX_LIST_LIMIT`]); pass the returned `next_cursor` to
    /// continue (opaque). Costs O(entries listed): a sweep reads what it may delete and
    /// nothing else.
    ///
    /// Every applied closing commit enters its run; a refused one enters nothing. The index is
    /// a hint: an entry stays until [`Store::forget_finished`] drops it, so a run may be listed
    /// after it was deleted, twice (closed twice), or after a later commit opened it again.
    /// Whoever deletes by it checks the run first.
    ///
    /// Errors: `Unsupported` unless [`Capabilities::finished`] (the default); `InvalidInput`
    /// for a cursor the store did not hand out; `Unavailable`.
    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<FinishedPage> {
        let _ = (before_ms, cursor, limit);
        Err(finished_unsupported(self.capabilities().name))
    }

    /// Drop these entries from the index of finished runs (exactly as listed: the same time,
    /// thread and run); entries not in the index are ignored. The runs themselves are
    /// untouched.
    ///
    /// Errors: `Unsupported` unless [`Capabilities::finished`] (the default); `Unavailable`.
    async fn forget_finished(&self, entries: &[FinishedRun]) -> Result<()> {
        let _ = entries;
        Err(finished_unsupported(self.capabilities().name))
    }

    /// How the effect hashes (`input_hash`, `output_hash`) of `thread` are computed: plain
    /// SHA-256, as AFK computes them (the default), or keyed with the thread's own key by a
    /// store that seals its values at rest, so that a stored hash confirms no guessed
    /// argument. The runner asks once per claim, before it writes or compares an effect row
    /// of the thread.
    ///
    /// Errors: those of reading the thread's keys (`Unavailable`, `InvalidConfig`).
    async fn effect_hashes(&self, thread: &ThreadId) -> Result<EffectHashes> {
        let _ = thread;
        Ok(EffectHashes::plain())
    }

    /// Apply several commits, in order, as one batch where the backend can (pipelines, write
    /// batches). Each commit is still atomic and fenced on its own; the answer has one result
    /// per commit, in order. The default applies them one by one.
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        commit_each(self, commits).await
    }
}

/// [`Store::claim_if_new`] as [`Store::get`] of the pointer, then [`Store::claim`]: the
/// trait's default, for a wrapper whose `get` and `claim` do something `claim_if_new` must not
/// skip.
pub async fn claim_if_new_each<S: Store + ?Sized>(
    store: &S,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Option<Epoch>> {
    if store.get(thread, &latest_key(run)).await?.is_some() {
        return Ok(None);
    }
    store.claim(thread, run).await.map(Some)
}

/// [`Store::get_many`] as [`Store::get`] of each key in turn: the trait's default, for a
/// wrapper whose `get` does something `get_many` must not skip.
///
/// # Writing a wrapper
///
/// A store that wraps another implements *every* method of [`Store`], so that nothing falls
/// back to a default silently (a `get_many` that reads key by key, a `commit_batch` that loses
/// the backend's batching, a `list_threads` that answers `Unsupported` for a store that can):
/// put `#[deny(clippy::missing_trait_methods)]` on the `impl`. Each method either forwards to
/// the inner store's same method or, where the wrapper changes what a single call does (a
/// limit, a fault, a gate), goes through the wrapper's own single-key method with
/// [`get_each`], [`commit_each`], [`commit_by_ref`] or [`claim_if_new_each`].
pub async fn get_each<S: Store + ?Sized>(
    store: &S,
    thread: &ThreadId,
    keys: &[String],
) -> Result<Vec<Option<Vec<u8>>>> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        out.push(store.get(thread, key).await?);
    }
    Ok(out)
}

/// [`Store::commit_batch`] as [`Store::commit`] of each commit in turn, one result per commit:
/// the trait's default, for a wrapper whose `commit` does something a batch must not skip (see
/// [`get_each`]).
pub async fn commit_each<S: Store + ?Sized>(store: &S, commits: &[Commit]) -> Vec<Result<()>> {
    let mut out = Vec::with_capacity(commits.len());
    for c in commits {
        out.push(store.commit(c).await);
    }
    out
}

/// A [`Store::commit_owned`] that wrote nothing: the error [`Store::commit`] would have
/// returned, and the commit as it was handed in.
#[derive(Debug)]
pub struct CommitRejected {
    /// Why nothing was written.
    pub error: Error,
    /// The commit, unchanged (boxed: the error path is the rare one).
    pub commit: Box<Commit>,
}

impl From<CommitRejected> for Error {
    fn from(rejected: CommitRejected) -> Self {
        rejected.error
    }
}

/// [`Store::commit_owned`] as [`Store::commit`] by reference: the trait's default, for a
/// wrapper whose `commit` does something an owned commit must not skip (see [`get_each`]).
pub async fn commit_by_ref<S: Store + ?Sized>(
    store: &S,
    commit: Commit,
) -> std::result::Result<(), CommitRejected> {
    match store.commit(&commit).await {
        Ok(()) => Ok(()),
        Err(error) => Err(CommitRejected {
            error,
            commit: Box::new(commit),
        }),
    }
}

/// The key families of a run: its keys are `<family>:<run>:…` for each of these, plus the
/// fence `run:<run>` ([`run_key`]). [`Store::delete_run`] removes all of them.
pub const KEY_FAMILIES: [&str; 4] = ["checkpoint", "effect", "messages", "bgtool"];

/// The run id a logical key belongs to: the second `:`-separated field of a key of one of
/// the [`KEY_FAMILIES`], and the rest of a `run:` key. `None` for a key that belongs to no
/// run.
pub fn run_of_key(key: &str) -> Option<&str> {
    let (family, rest) = key.split_once(':')?;
    if family == "run" {
        return Some(rest).filter(|r| !r.is_empty() && !r.contains(':'));
    }
    if KEY_FAMILIES.contains(&family) {
        return rest.split(':').next().filter(|r| !r.is_empty());
    }
    None
}

/// The logical key of a run's latest pointer.
pub fn latest_key(run: &RunId) -> String {
    // Exact size, no formatting machinery: built for every commit. `format!` grew the string
    // twice; this measured +7% steps/s on 10-step in-memory runs (BENCHMARKS.md, 2026-12-01).
    ["checkpoint:", run.as_str(), ":latest"].concat()
}

/// The logical key of a run's fence and metadata.
pub fn run_key(run: &RunId) -> String {
    // Exact size (see `latest_key`): every fence check builds it.
    ["run:", run.as_str()].concat()
}

#[cfg(test)]
mod tests;
