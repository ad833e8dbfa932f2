//! The checks every backend makes on a [`Commit`] before writing anything.

use std::collections::HashSet;

use super::{Commit, MAX_LIST_LIMIT, latest_key, run_key, run_of_key};
use crate::error::{Error, Result};
use crate::ids::validate_key;

/// Check the arguments of [`Store::list`](super::Store::list) as every backend must, and return
/// the page size to use.
///
/// A non-empty `prefix` and a `cursor` must be valid logical keys (`InvalidInput` otherwise);
/// `limit` is clamped to `1..=`[`MAX_LIST_LIMIT`].
pub fn validate_list(prefix: &str, cursor: Option<&str>, limit: usize) -> Result<usize> {
    if !prefix.is_empty() {
        validate_key(prefix)?;
    }
    if let Some(c) = cursor {
        validate_key(c).map_err(|e| Error::invalid_input(format!("bad list cursor: {e}")))?;
    }
    Ok(limit.clamp(1, MAX_LIST_LIMIT))
}

/// Check the shape of a commit before anything is written, as every backend must.
///
/// Fails with `InvalidInput` (naming the key) when a key of `commit.puts` is not a valid
/// logical key ([`validate_key`]), belongs to another run than `commit.run` ([`run_of_key`]), is
/// the latest pointer `checkpoint:<run>:latest` (that goes in [`Commit::latest`]), is the fence
/// `run:<run>` (only [`Store::claim`](super::Store::claim) writes it), or appears twice. It does
/// not check the epoch or value sizes; those depend on the store.
pub fn validate_commit(commit: &Commit) -> Result<()> {
    let latest = latest_key(&commit.run);
    let fence = run_key(&commit.run);
    let mut seen = HashSet::with_capacity(commit.puts.len());
    for (key, _) in &commit.puts {
        validate_key(key)?;
        if run_of_key(key) != Some(commit.run.as_str()) {
            return Err(Error::invalid_input(format!(
                "key {key:?} does not belong to run {}",
                commit.run
            ))
            .with_key(key.clone()));
        }
        if *key == latest {
            return Err(Error::invalid_input(format!(
                "{key:?} is the latest pointer; set Commit::latest instead of putting it"
            ))
            .with_key(key.clone()));
        }
        if *key == fence {
            return Err(Error::invalid_input(format!(
                "{key:?} is the run's fence; only Store::claim writes it"
            ))
            .with_key(key.clone()));
        }
        if !seen.insert(key.as_str()) {
            return Err(
                Error::invalid_input(format!("key {key:?} appears twice in one commit"))
                    .with_key(key.clone()),
            );
        }
    }
    Ok(())
}
