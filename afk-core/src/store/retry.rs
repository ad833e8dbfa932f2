//! A store wrapper that retries retryable failures with bounded, jittered exponential backoff.
//!
//! [`RetryStore`] forwards every call to the wrapped store and, when the answer is an error whose
//! [`Error::is_retryable`] is true, waits and tries again, up to [`RetryPolicy::max_attempts`]
//! calls and [`RetryPolicy::max_elapsed`] of total time. Any other error is returned at once.
//!
//! Randomness is injected ([`RandomSource`]): library code never reaches for a global RNG, so
//! tests pass a seeded source and get the same delays every time. Time is tokio's, so tests can
//! pause it.
//!
//! # Why retrying is safe for every method
//! - Reads, lists and deletes are idempotent.
//! - [`Store::commit`]: the contract says a commit that fails with `Unavailable` wrote nothing
//!   (backends resolve ambiguous outcomes before answering). Even if a backend did write it,
//!   applying the same commit again under the same epoch overwrites the same keys with the same
//!   bytes and moves the pointer to the same value: a no-op. A commit whose epoch was superseded
//!   meanwhile fails with `Fenced`, which is not retryable, so a retry can never write under a
//!   stale claim.
//! - [`Store::claim`]: a failed claim may have bumped the epoch; claiming again simply hands out
//!   a newer one, which fences the unknown one.
//! - [`Store::claim_if_new`]: as `claim`; an attempt that failed after claiming wrote no
//!   pointer (only commits do), so the next attempt claims again, or finds the pointer a
//!   runner that claimed since wrote and answers `None`, as it would have.
//! - [`Store::commit_batch`]: only the failed, retryable commits are sent again, and only those
//!   whose run has no later commit in the same batch (re-applying an older commit after a newer
//!   one of its run succeeded would move the latest pointer backwards); those keep their error.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};
use crate::store::{Capabilities, Commit, CommitRejected, Epoch, ListPage, Store};

/// An injected source of uniform random numbers in `[0, 1)`, used for backoff jitter.
pub struct RandomSource(Box<dyn FnMut() -> f64 + Send>);

impl RandomSource {
    /// Wrap any function returning numbers in `[0, 1)` (values outside are clamped).
    pub fn new(f: impl FnMut() -> f64 + Send + 'static) -> Self {
        RandomSource(Box::new(f))
    }

    /// A deterministic source seeded with `seed` (tests, reproducible runs).
    pub fn seeded(seed: u64) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        RandomSource::new(move || rng.random::<f64>())
    }

    /// A source seeded once from the operating system. For the top level of an application;
    /// library code takes a `RandomSource` from its caller instead.
    pub fn from_os() -> Self {
        let mut rng = rand::rngs::StdRng::from_os_rng();
        RandomSource::new(move || rng.random::<f64>())
    }

    /// The next number, in `[0, 1)`.
    pub fn next_unit(&mut self) -> f64 {
        let x = (self.0)();
        if x.is_nan() {
            0.0
        } else {
            x.clamp(0.0, 1.0 - f64::EPSILON)
        }
    }
}

impl fmt::Debug for RandomSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RandomSource")
    }
}

/// How often and how long to retry: `RetryPolicy::default()` (or [`RetryPolicy::none`]) and
/// the `with_*` setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Most calls made in total, the first one included (at least 1; 1 means no retry).
    pub max_attempts: u32,
    /// Delay before the first retry, before jitter.
    pub initial_backoff: Duration,
    /// Largest delay between two attempts, before jitter.
    pub max_backoff: Duration,
    /// Growth factor of the delay per attempt (at least 1).
    pub multiplier: f64,
    /// No retry is started if waiting for it would pass this much time since the first call.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts, 50 ms doubling up to 2 s, at most 5 s in total: well inside AFK's 10 s
    /// checkpoint flush timeout, so a store that keeps failing fails the run before the flush
    /// gives up waiting.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            multiplier: 2.0,
            max_elapsed: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Set [`RetryPolicy::max_attempts`] (1: no retry).
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Set [`RetryPolicy::initial_backoff`].
    #[must_use]
    pub fn with_initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.initial_backoff = initial_backoff;
        self
    }

    /// Set [`RetryPolicy::max_backoff`].
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Set [`RetryPolicy::multiplier`].
    #[must_use]
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Set [`RetryPolicy::max_elapsed`].
    #[must_use]
    pub fn with_max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = max_elapsed;
        self
    }

    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `retry` (1 for the first retry), given a uniform `unit`
    /// in `[0, 1)`: the exponential delay capped at `max_backoff`, then jittered into
    /// `[delay / 2, delay)` ("equal jitter": never zero, never in lockstep).
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let mult = self.multiplier.max(1.0);
        let exp = mult.powi(retry.saturating_sub(1).min(64) as i32);
        let base = self.initial_backoff.as_secs_f64() * exp;
        let capped = base.min(self.max_backoff.as_secs_f64()).max(0.0);
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        Duration::from_secs_f64(capped * (0.5 + 0.5 * unit))
    }
}

/// Run `op` under `policy`, drawing jitter from `rng`. Returns the first success, the first
/// non-retryable error, or the last retryable error once the bound is reached.
pub(crate) async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    rng: &Mutex<RandomSource>,
    retries: &AtomicU64,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let attempt = |()| {
        let call = op();
        async move { call.await.map_err(|e| (e, ())) }
    };
    retry_passing(policy, rng, retries, (), attempt)
        .await
        .map_err(|(e, ())| e)
}

/// [`with_retry`] of an `op` that takes `arg` and, when it fails, hands it back for the next
/// attempt (a commit given by value). The last failure comes with `arg`.
pub(crate) async fn retry_passing<A, T, F, Fut>(
    policy: &RetryPolicy,
    rng: &Mutex<RandomSource>,
    retries: &AtomicU64,
    arg: A,
    mut op: F,
) -> std::result::Result<T, (Error, A)>
where
    F: FnMut(A) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, (Error, A)>>,
{
    let start = tokio::time::Instant::now();
    let mut attempt = 1u32;
    let mut arg = arg;
    loop {
        match op(arg).await {
            Ok(v) => return Ok(v),
            Err((e, back)) if !e.is_retryable() => return Err((e, back)),
            Err((e, back)) => {
                let Some(delay) = next_delay(policy, rng, attempt, start) else {
                    return Err((e, back));
                };
                tracing::debug!(attempt, ?delay, error = %e, "retrying store call");
                retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                attempt += 1;
                arg = back;
            }
        }
    }
}

/// The delay before the next attempt, or `None` when the policy says stop.
pub(crate) fn next_delay(
    policy: &RetryPolicy,
    rng: &Mutex<RandomSource>,
    attempts_made: u32,
    start: tokio::time::Instant,
) -> Option<Duration> {
    if attempts_made >= policy.max_attempts.max(1) {
        return None;
    }
    let unit = match rng.lock() {
        Ok(mut r) => r.next_unit(),
        Err(poisoned) => poisoned.into_inner().next_unit(),
    };
    let delay = policy.backoff(attempts_made, unit);
    if start.elapsed() + delay > policy.max_elapsed {
        return None;
    }
    Some(delay)
}

/// A [`Store`] that retries the retryable failures of the store it wraps. See the module docs.
pub struct RetryStore<S: ?Sized = dyn Store> {
    inner: Arc<S>,
    policy: RetryPolicy,
    rng: Mutex<RandomSource>,
    retries: AtomicU64,
}

impl<S: Store> RetryStore<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, policy: RetryPolicy, rng: RandomSource) -> Self {
        RetryStore::from_arc(Arc::new(inner), policy, rng)
    }
}

impl<S: Store + ?Sized> RetryStore<S> {
    /// Wrap a shared store (for example an `Arc<dyn Store>`).
    pub fn from_arc(inner: Arc<S>, policy: RetryPolicy, rng: RandomSource) -> Self {
        RetryStore {
            inner,
            policy,
            rng: Mutex::new(rng),
            retries: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// The policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Retries made so far, over every call (attempts after a call's first; a retried
    /// [`Store::commit_batch`] counts once per retry round).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

impl<S: Store + ?Sized> fmt::Debug for RetryStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryStore")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: Store + ?Sized> Store for RetryStore<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.get(thread, key)
        })
        .await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.get_many(thread, keys)
        })
        .await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.list(thread, prefix, cursor, limit)
        })
        .await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.delete(thread, keys)
        })
        .await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.delete_run(thread, run)
        })
        .await
    }

    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::ThreadPage> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.list_threads(cursor, limit)
        })
        .await
    }

    async fn list_attention(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::AttentionPage> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.list_attention(cursor, limit)
        })
        .await
    }

    /// Forwarded once: reading a thread's keys retries (or not) in the key source.
    async fn effect_hashes(&self, thread: &ThreadId) -> Result<crate::hash::EffectHashes> {
        self.inner.effect_hashes(thread).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.attention(thread, run)
        })
        .await
    }

    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::store::FinishedPage> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.list_finished(before_ms, cursor, limit)
        })
        .await
    }

    /// Retried: dropping an entry twice is harmless.
    async fn forget_finished(&self, entries: &[crate::store::FinishedRun]) -> Result<()> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.forget_finished(entries)
        })
        .await
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.finish_run(thread, run, epoch)
        })
        .await
    }

    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.claim_if(thread, run, seen)
        })
        .await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.claim(thread, run)
        })
        .await
    }

    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.claim_if_new(thread, run)
        })
        .await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        with_retry(&self.policy, &self.rng, &self.retries, || {
            self.inner.commit(commit)
        })
        .await
    }

    /// Each attempt hands the commit to the inner store's `commit_owned`; a retryable refusal
    /// gives it back for the next attempt.
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        let attempt = |c: Commit| async move {
            self.inner
                .commit_owned(c)
                .await
                .map_err(|r| (r.error, *r.commit))
        };
        retry_passing(&self.policy, &self.rng, &self.retries, commit, attempt)
            .await
            .map_err(|(error, commit)| CommitRejected {
                error,
                commit: Box::new(commit),
            })
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        let start = tokio::time::Instant::now();
        let mut results = self.inner.commit_batch(commits).await;
        results.resize_with(commits.len(), || {
            Err(Error::unexpected(
                "store answered fewer results than commits in the batch",
            ))
        });
        let mut attempts = 1u32;
        loop {
            let retry: Vec<usize> = (0..commits.len())
                .filter(|&i| matches!(&results[i], Err(e) if e.is_retryable()))
                .filter(|&i| {
                    let c = &commits[i];
                    !commits[i + 1..]
                        .iter()
                        .any(|l| l.thread == c.thread && l.run == c.run)
                })
                .collect();
            if retry.is_empty() {
                return results;
            }
            let Some(delay) = next_delay(&self.policy, &self.rng, attempts, start) else {
                return results;
            };
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(delay).await;
            attempts += 1;
            let again: Vec<Commit> = retry.iter().map(|&i| commits[i].clone()).collect();
            let mut answers = self.inner.commit_batch(&again).await.into_iter();
            for &i in &retry {
                results[i] = answers.next().unwrap_or_else(|| {
                    Err(Error::unexpected(
                        "store answered fewer results than commits in the batch",
                    ))
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
