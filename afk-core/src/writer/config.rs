//! Checkpoint writer settings: AFK's four, with its defaults, plus ours.

use std::time::Duration;

use crate::store::RetryPolicy;

/// Settings of the runner's checkpoint writer (write-behind), in
/// [`RunnerConfig::checkpoint`](crate::runner::RunnerConfig::checkpoint).
///
/// The first four are AFK's (`checkpoint_async_writes`, `checkpoint_queue_maxsize`,
/// `checkpoint_flush_timeout_s`, `checkpoint_coalesce_runtime_state`) with AFK's defaults; the
/// rest are ours. Out-of-range values are clamped as AFK does (see [`CheckpointConfig::clamped`]).
///
/// Build it from `CheckpointConfig::default()` with the `with_*` setters (new settings may be
/// added without a breaking change).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// Queue commits (`true`, AFK's default: a background task writes them, and a run's barrier
    /// before a side effect writes its own queued commit when nothing of the run is in flight)
    /// or write each one inline before the run goes on (`false`, "sync mode").
    pub async_writes: bool,
    /// Most entries waiting in the queue; a full queue makes a run whose commit needs an entry
    /// of its own wait (backpressure; a commit that merges into its run's queued entry takes
    /// none). Default 1024; clamped to at least 1.
    pub queue_maxsize: usize,
    /// Bound of the terminal flush (AFK's `checkpoint_flush_timeout_s`, default 10 s): the
    /// run's result is returned once its terminal record is durable, or fails with `Timeout`
    /// once the flush has waited this long *and* the store has answered no checkpoint write
    /// (of any run) for this long. AFK bounds the wait alone; here a flush that waits its turn
    /// behind thousands of other runs' writes on a busy process goes on waiting while the
    /// store keeps answering (overload slows runs down, it does not fail them), and a store
    /// that stopped answering fails every flush within this bound of its last answer.
    pub flush_timeout: Duration,
    /// Merge a run's consecutive queued commits that have not been written yet into one atomic
    /// commit (default `true`). AFK's flag merged only snapshots; here every commit merges, as
    /// the merged commit is applied all or nothing. Off, every commit is written as submitted.
    pub coalesce_runtime_state: bool,
    /// Retries of failed writes (retryable errors only). Keep its `max_elapsed` below
    /// `flush_timeout` so a failing store fails the run with its own error, not a timeout.
    pub retry: RetryPolicy,
    /// Most commits handed to [`Store::commit_batch`](crate::store::Store::commit_batch) in one call
    /// (default 64; clamped to at least 1).
    pub max_batch_size: usize,
    /// How long the background writer may hold a run's commits, merging what the run queues
    /// meanwhile, before writing them unasked (default 5 ms). A barrier, a flush or a caller
    /// waiting for one of them writes them at once, so a step costs one commit (its barrier's)
    /// while a commit nobody waits for is still written within this bound. `Duration::ZERO`
    /// writes every commit as soon as the run has none in flight; so does
    /// `coalesce_runtime_state: false`.
    pub hold: Duration,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            async_writes: true,
            queue_maxsize: 1024,
            flush_timeout: Duration::from_secs(10),
            coalesce_runtime_state: true,
            retry: RetryPolicy::default(),
            max_batch_size: 64,
            hold: Duration::from_millis(5),
        }
    }
}

impl CheckpointConfig {
    /// Write behind (`true`) or inline (`false`) ([`CheckpointConfig::async_writes`]).
    #[must_use]
    pub fn with_async_writes(mut self, async_writes: bool) -> Self {
        self.async_writes = async_writes;
        self
    }

    /// Set the queue bound ([`CheckpointConfig::queue_maxsize`]).
    #[must_use]
    pub fn with_queue_maxsize(mut self, queue_maxsize: usize) -> Self {
        self.queue_maxsize = queue_maxsize;
        self
    }

    /// Set the terminal flush bound ([`CheckpointConfig::flush_timeout`]).
    #[must_use]
    pub fn with_flush_timeout(mut self, flush_timeout: Duration) -> Self {
        self.flush_timeout = flush_timeout;
        self
    }

    /// Merge queued commits of a run or not ([`CheckpointConfig::coalesce_runtime_state`]).
    #[must_use]
    pub fn with_coalesce_runtime_state(mut self, coalesce_runtime_state: bool) -> Self {
        self.coalesce_runtime_state = coalesce_runtime_state;
        self
    }

    /// Set the retry policy of failed writes ([`CheckpointConfig::retry`]).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Set how long a run's commits may be held unasked ([`CheckpointConfig::hold`]).
    #[must_use]
    pub fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Set the most commits per store call ([`CheckpointConfig::max_batch_size`]).
    #[must_use]
    pub fn with_max_batch_size(mut self, max_batch_size: usize) -> Self {
        self.max_batch_size = max_batch_size;
        self
    }

    /// Set the flush timeout from AFK's `checkpoint_flush_timeout_s` (seconds; negative and
    /// NaN are clamped to 0 as AFK does, huge values to one day).
    pub fn with_flush_timeout_s(mut self, seconds: f64) -> Self {
        let s = if seconds.is_nan() {
            0.0
        } else {
            seconds.clamp(0.0, 86_400.0)
        };
        self.flush_timeout = Duration::from_secs_f64(s);
        self
    }

    /// The same settings with sizes clamped to their minimum of 1 and at least one attempt.
    pub fn clamped(mut self) -> Self {
        self.queue_maxsize = self.queue_maxsize.max(1);
        self.max_batch_size = self.max_batch_size.max(1);
        self.retry.max_attempts = self.retry.max_attempts.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_afks() {
        let c = CheckpointConfig::default();
        assert!(c.async_writes);
        assert_eq!(c.queue_maxsize, 1024);
        assert_eq!(c.flush_timeout, Duration::from_secs(10));
        assert!(c.coalesce_runtime_state);
        assert!(c.retry.max_elapsed < c.flush_timeout);
    }

    #[test]
    fn clamps_like_afk() {
        let c = CheckpointConfig {
            queue_maxsize: 0,
            max_batch_size: 0,
            ..Default::default()
        }
        .with_flush_timeout_s(-3.0)
        .clamped();
        assert_eq!(c.queue_maxsize, 1);
        assert_eq!(c.max_batch_size, 1);
        assert_eq!(c.flush_timeout, Duration::ZERO);
    }
}
