//! The runner's settings.

use std::sync::Arc;
use std::time::Duration;

use super::clock::{Clock, IdGen, RandomIds, SystemClock};
use crate::writer::CheckpointConfig;

/// Runner settings: `RunnerConfig::default()` and the `with_*` setters (new settings may be
/// added without a breaking change).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunnerConfig {
    /// Time source (records' timestamps, budgets).
    pub clock: Arc<dyn Clock>,
    /// Run id source for [`Runner::run`](super::Runner::run).
    pub ids: Arc<dyn IdGen>,
    /// Capacity of each run's event channel; slow subscribers miss the oldest events.
    pub event_capacity: usize,
    /// The write-behind writer's settings (async writes, queue size, coalescing, retries, and
    /// `flush_timeout`, the bound of the store's silence while the terminal record is made
    /// durable before the result is returned).
    pub checkpoint: CheckpointConfig,
    /// How long a run waits after its first suspension (every model failed with a retryable
    /// error): the run's [`Suspension::not_before_ms`] is this much later, doubling with each
    /// consecutive suspension up to [`MAX_SUSPENSION_BACKOFF`], or later still if the
    /// provider's error asked to wait longer ([`Error::retry_after`]). Default 30 s.
    ///
    /// [`Suspension::not_before_ms`]: crate::schema::Suspension::not_before_ms
    /// [`Error::retry_after`]: crate::Error::retry_after
    pub suspension_backoff: Duration,
    /// Who this runner is, as the runs it holds name it in their index entry
    /// ([`RunMark::owner`](crate::schema::RunMark::owner)). Default: `runner_<32 hex>`, new for
    /// every runner. A [`Worker`](super::Worker) keeps one id across restarts, so that at start
    /// it takes back the runs its earlier incarnation held without waiting for their leases.
    pub owner: String,
    /// How long a run this runner holds stays its own without a sign of life: every commit
    /// made after a third of it has passed renews it, and so does a timer while a long model
    /// or tool call runs. Once it has expired (plus [`RunnerConfig::lease_skew`]) a worker may
    /// take the run over; the former owner, if alive after all, is fenced and writes nothing.
    /// Default 30 s.
    pub lease: Duration,
    /// How far a writer's clock may run behind a reader's: a lease counts as expired only
    /// this long after its end, by the reader's clock. Expiry is decided by the clocks of the
    /// processes (the stores have no common clock to ask); a clock off by more than this can
    /// take a live run over early, which costs the former owner its unsaved work, never a
    /// saved effect twice (fencing). Default 5 s.
    pub lease_skew: Duration,
}

/// The longest a suspended run's backoff grows to (one hour).
pub const MAX_SUSPENSION_BACKOFF: Duration = Duration::from_secs(3600);

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            event_capacity: 256,
            checkpoint: CheckpointConfig::default(),
            suspension_backoff: Duration::from_secs(30),
            owner: RandomIds.new_id("runner"),
            lease: Duration::from_secs(30),
            lease_skew: Duration::from_secs(5),
        }
    }
}

impl RunnerConfig {
    /// Set the time source ([`RunnerConfig::clock`]).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Set the run id source ([`RunnerConfig::ids`]).
    #[must_use]
    pub fn with_ids(mut self, ids: Arc<dyn IdGen>) -> Self {
        self.ids = ids;
        self
    }

    /// Set the capacity of each run's event channel ([`RunnerConfig::event_capacity`]).
    #[must_use]
    pub fn with_event_capacity(mut self, event_capacity: usize) -> Self {
        self.event_capacity = event_capacity;
        self
    }

    /// Set the first suspension's backoff ([`RunnerConfig::suspension_backoff`]).
    #[must_use]
    pub fn with_suspension_backoff(mut self, backoff: Duration) -> Self {
        self.suspension_backoff = backoff;
        self
    }

    /// Set who this runner is ([`RunnerConfig::owner`]).
    #[must_use]
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Set the lease of the runs this runner holds ([`RunnerConfig::lease`]; at least 1 ms).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(1));
        self
    }

    /// Set the clock skew a lease reader allows ([`RunnerConfig::lease_skew`]).
    #[must_use]
    pub fn with_lease_skew(mut self, skew: Duration) -> Self {
        self.lease_skew = skew;
        self
    }

    /// Set the checkpoint writer's settings ([`RunnerConfig::checkpoint`]).
    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: CheckpointConfig) -> Self {
        self.checkpoint = checkpoint;
        self
    }
}
