//! Injected time and id generation, so that runs are deterministic under test and fixtures with
//! old timestamps do not trip the wall-time budget.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time. The runner reads time only through this trait.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Seconds since the Unix epoch, as a float (AFK's `started_at_s` unit).
    fn now_s(&self) -> f64 {
        self.now_ms() as f64 / 1000.0
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to ([`ManualClock::advance_ms`]); for tests and for
/// replaying fixtures whose timestamps lie in the past.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `ms` milliseconds since the epoch.
    pub fn new(ms: u64) -> Arc<Self> {
        Arc::new(ManualClock {
            ms: AtomicU64::new(ms),
        })
    }

    /// Move the clock forward.
    pub fn advance_ms(&self, delta: u64) {
        self.ms.fetch_add(delta, Ordering::SeqCst);
    }

    /// Set the clock to an absolute time.
    pub fn set_ms(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// A source of new run ids.
pub trait IdGen: Send + Sync + fmt::Debug {
    /// A fresh id string with the given prefix, e.g. `run_<32 hex>`. Must be a valid
    /// [`RunId`](crate::RunId) when the prefix is.
    fn new_id(&self, prefix: &str) -> String;
}

/// Random ids like AFK's `new_id`: `<prefix>_<32 lowercase hex>`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdGen for RandomIds {
    fn new_id(&self, prefix: &str) -> String {
        let bytes: [u8; 16] = rand::random();
        format!("{prefix}_{}", hex::encode(bytes))
    }
}

/// Sequential ids `<prefix>_<n>` (n = 1, 2, …); deterministic, for tests.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl IdGen for SequentialIds {
    fn new_id(&self, prefix: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        format!("{prefix}_{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance_ms(500);
        assert_eq!(c.now_ms(), 1_500);
        assert!((c.now_s() - 1.5).abs() < 1e-9);
    }

    #[test]
    fn ids_are_valid_run_ids() {
        let r = RandomIds.new_id("run");
        assert!(crate::RunId::new(&r).is_ok(), "{r}");
        assert_eq!(r.len(), 4 + 32);
        let s = SequentialIds::default();
        assert_eq!(s.new_id("run"), "run_1");
        assert_eq!(s.new_id("run"), "run_2");
    }
}
