//! Preparing a commit: size and fence checks, and the objects and head slots it writes.

use afk_core::store::latest_key;
use afk_core::{Commit, Error, Result};

use crate::head::{Head, INLINE_LATEST_MAX, Slot, object_suffix};
use crate::store::MAX_VALUE_SIZE;

/// `InvalidInput` for a value over [`MAX_VALUE_SIZE`].
pub(crate) fn check_sizes(commit: &Commit) -> Result<()> {
    let latest = commit.latest.as_ref().map(|v| (latest_key(&commit.run), v));
    for (key, value) in commit
        .puts
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .chain(latest)
    {
        if value.len() > MAX_VALUE_SIZE {
            return Err(Error::invalid_input(format!(
                "value of {key:?} is {} bytes; an S3 object holds at most {MAX_VALUE_SIZE}",
                value.len()
            ))
            .with_key(key));
        }
    }
    Ok(())
}

/// `Fenced` unless the commit's epoch is the run's current, claimed epoch.
pub(crate) fn check_epoch(commit: &Commit, head: &Head) -> Result<()> {
    if head.epoch == 0 {
        return Err(Error::fenced(format!(
            "run {} of thread {} was never claimed; claim it before committing",
            commit.run, commit.thread
        )));
    }
    if head.epoch() != commit.epoch {
        return Err(Error::fenced(format!(
            "run {} of thread {} is claimed at epoch {}; this commit carries epoch {}",
            commit.run, commit.thread, head.epoch, commit.epoch
        )));
    }
    Ok(())
}

/// What one commit attempt writes: record objects (suffix, value) and the head slots.
#[derive(Debug)]
pub(crate) struct Staged<'a> {
    pub objects: Vec<(String, &'a [u8])>,
    pub slots: Vec<(String, Slot)>,
}

/// Name the objects of a commit attempt `(seq, nonce)`: one per put, plus one for a latest
/// pointer too large (or not UTF-8) to live inside the head.
pub(crate) fn stage<'a>(commit: &'a Commit, seq: u64, nonce: &str) -> Staged<'a> {
    let mut objects = Vec::with_capacity(commit.puts.len() + 1);
    let mut slots = Vec::with_capacity(commit.puts.len() + 1);
    for (i, (key, value)) in commit.puts.iter().enumerate() {
        let suffix = object_suffix(seq, nonce, i);
        objects.push((suffix.clone(), value.as_slice()));
        slots.push((key.clone(), Slot::Object(suffix)));
    }
    if let Some(latest) = &commit.latest {
        let slot = match std::str::from_utf8(latest) {
            Ok(text) if latest.len() <= INLINE_LATEST_MAX => Slot::Inline {
                inline: text.to_owned(),
            },
            _ => {
                let suffix = object_suffix(seq, nonce, commit.puts.len());
                objects.push((suffix.clone(), latest.as_slice()));
                Slot::Object(suffix)
            }
        };
        slots.push((latest_key(&commit.run), slot));
    }
    Staged { objects, slots }
}
