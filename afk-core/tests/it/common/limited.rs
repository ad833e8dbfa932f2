//! A memory store with the limits a real backend reports: most keys per commit (the pointer
//! counts) and the largest value, refusing what exceeds them with `InvalidInput`, as Redis
//! (32 MiB values) and S3 (64 MiB) do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use afk_core::store::{Call, Capabilities, HookStore, Hooks};
use afk_core::{Error, MemoryStore, Result};
use async_trait::async_trait;

/// A [`MemoryStore`] behind [`Limits`].
pub type LimitedStore = HookStore<Limits, MemoryStore>;

/// The limits of a [`LimitedStore`], and the commits it let through.
#[derive(Debug, Default)]
pub struct Limits {
    max_keys: Option<usize>,
    max_value: Option<usize>,
    commits: AtomicU64,
}

impl Limits {
    /// Commits let through the limits so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }
}

/// Commits of at most `max` keys.
pub fn keys(max: usize) -> LimitedStore {
    limited(Limits {
        max_keys: Some(max),
        ..Limits::default()
    })
}

/// Values of at most `max` bytes.
pub fn values(max: usize) -> LimitedStore {
    limited(Limits {
        max_value: Some(max),
        ..Limits::default()
    })
}

fn limited(limits: Limits) -> LimitedStore {
    HookStore::new(Arc::new(MemoryStore::new()), limits)
}

#[async_trait]
impl Hooks for Limits {
    type Note = ();

    fn capabilities(&self, mut inner: Capabilities) -> Capabilities {
        inner.max_commit_keys = self.max_keys;
        inner.max_value_size = self.max_value;
        inner
    }

    /// Each commit of a batch or an owned commit through the limits of `commit`.
    fn through_primitives(&self) -> bool {
        true
    }

    async fn before(&self, call: Call<'_>) -> Result<()> {
        let Call::Commit(c) = call else {
            return Ok(());
        };
        let keys = c.puts.len() + usize::from(c.latest.is_some());
        if self.max_keys.is_some_and(|m| keys > m) {
            return Err(Error::invalid_input("commit too large"));
        }
        if let Some(max) = self.max_value {
            let latest = c.latest.iter().map(|v| ("latest", v));
            for (k, v) in c.puts.iter().map(|(k, v)| (k.as_str(), v)).chain(latest) {
                if v.len() > max {
                    return Err(Error::invalid_input(format!(
                        "the value of {k} is {} bytes, over {max}",
                        v.len()
                    )));
                }
            }
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
