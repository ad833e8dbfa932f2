//! The checks every backend makes on a [`Commit`] before writing anything.

use std::collections::HashSet;

use super::{Commit, MAX_LIST_LIMIT, run_of_key};

/// Commits of at most this many keys are checked for a repeated key pairwise.
const SMALL_COMMIT: usize = 16;
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
/// `run:<run>` (only [`Store::claim`](super::Store::claim) writes it), or appears twice, and
/// when an attention entry is over [`MAX_ATTENTION_LEN`](super::MAX_ATTENTION_LEN). It does
/// not check the epoch or value sizes; those depend on the store.
pub fn validate_commit(commit: &Commit) -> Result<()> {
    super::validate_attention(commit.attention.as_ref())?;
    let run = commit.run.as_str();
    // Keys of a larger commit are checked for repeats through a set; a small one (every
    // commit of a step) compares with the keys before it, without allocating.
    let mut seen =
        (commit.puts.len() > SMALL_COMMIT).then(|| HashSet::with_capacity(commit.puts.len()));
    for (i, (key, _)) in commit.puts.iter().enumerate() {
        validate_key(key)?;
        if run_of_key(key) != Some(run) {
            return Err(Error::invalid_input(format!(
                "key {key:?} does not belong to run {}",
                commit.run
            ))
            .with_key(key.clone()));
        }
        // `run_of_key` matched, so these are `latest_key(run)` and `run_key(run)` exactly.
        if key
            .strip_prefix("checkpoint:")
            .and_then(|k| k.strip_prefix(run))
            == Some(":latest")
        {
            return Err(Error::invalid_input(format!(
                "{key:?} is the latest pointer; set Commit::latest instead of putting it"
            ))
            .with_key(key.clone()));
        }
        if key.strip_prefix("run:") == Some(run) {
            return Err(Error::invalid_input(format!(
                "{key:?} is the run's fence; only Store::claim writes it"
            ))
            .with_key(key.clone()));
        }
        let repeated = match &mut seen {
            Some(seen) => !seen.insert(key.as_str()),
            None => commit.puts[..i].iter().any(|(k, _)| k == key),
        };
        if repeated {
            return Err(
                Error::invalid_input(format!("key {key:?} appears twice in one commit"))
                    .with_key(key.clone()),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::ids::{RunId, ThreadId};
    use crate::store::Epoch;

    fn commit_of(run: &str, keys: &[String]) -> Commit {
        Commit {
            thread: ThreadId::new("t").unwrap(),
            run: RunId::new(run).unwrap(),
            epoch: Epoch(1),
            puts: keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect(),
            latest: None,
            attention: None,
        }
    }

    fn kind(c: &Commit) -> Option<ErrorKind> {
        validate_commit(c).err().map(|e| e.kind())
    }

    /// Small commits are checked pairwise and large ones through a set: both must catch a
    /// repeated key wherever it is, and accept distinct keys.
    #[test]
    fn a_repeated_key_is_caught_in_small_and_large_commits() {
        for n in [1, 2, SMALL_COMMIT, SMALL_COMMIT + 1, 3 * SMALL_COMMIT] {
            let keys: Vec<String> = (0..n).map(|i| format!("effect:r:1:c{i}")).collect();
            assert_eq!(kind(&commit_of("r", &keys)), None, "{n} distinct keys");
            if n < 2 {
                continue;
            }
            for (first, second) in [(0, n - 1), (n / 2 - 1, n / 2), (0, 1)] {
                let mut keys = keys.clone();
                keys[second] = keys[first].clone();
                assert_eq!(
                    kind(&commit_of("r", &keys)),
                    Some(ErrorKind::InvalidInput),
                    "{n} keys, key {first} repeated at {second}"
                );
            }
        }
    }

    /// The pointer and the fence of the commit's own run are refused as puts; the same words
    /// in a longer key or another run's keys are not taken for them.
    #[test]
    fn pointer_and_fence_are_refused_only_for_exactly_their_keys() {
        for bad in ["checkpoint:r:latest", "run:r"] {
            let c = commit_of("r", &[bad.to_owned()]);
            assert_eq!(kind(&c), Some(ErrorKind::InvalidInput), "{bad}");
        }
        for good in [
            "checkpoint:r:latest2",
            "checkpoint:r:3:latest",
            "messages:r:latest",
        ] {
            let c = commit_of("r", &[good.to_owned()]);
            assert_eq!(kind(&c), None, "{good}");
        }
        // A run whose id extends another's: `rx`'s keys are not `r`'s pointer or fence.
        let c = commit_of("rx", &["checkpoint:rx:1:pre_llm".to_owned()]);
        assert_eq!(kind(&c), None);
    }
}
