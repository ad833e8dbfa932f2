//! Reading a thread's runs and records through the [`Store`] trait only: what the verifier and
//! the CLI's inspection commands share.

use crate::keys::{ParsedKey, checkpoint_prefix, parse_key};
use crate::normalize::normalize_record;
use crate::schema::CheckpointRecord;
use crate::store::{StoreExt, latest_key};
use crate::{Result, RunId, ThreadId, store::Store};

/// The run's latest record, normalized; `None` when there is no pointer. A pointer that does
/// not normalize is an error of kind `Corrupt`.
pub async fn latest_record(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Option<CheckpointRecord>> {
    let key = latest_key(run);
    match store.get(thread, &key).await? {
        Some(bytes) => normalize_record(&bytes, thread, &key).map(Some),
        None => Ok(None),
    }
}

/// The newest snapshot of the run: `latest` if it is a `runtime_state`, else the
/// `runtime_state` record with the highest step (the one resume would use); `None` when the
/// run has none.
pub async fn newest_snapshot(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    latest: Option<&CheckpointRecord>,
) -> Result<Option<CheckpointRecord>> {
    if let Some(l) = latest.filter(|l| l.snapshot().is_some()) {
        return Ok(Some(l.clone()));
    }
    let mut best: Option<(u64, String)> = None;
    for key in store.list_all(thread, &checkpoint_prefix(run)).await? {
        if let Ok(ParsedKey::Checkpoint { step, phase, .. }) = parse_key(&key)
            && phase == crate::schema::Phase::RuntimeState
            && best.as_ref().is_none_or(|(s, _)| step >= *s)
        {
            best = Some((step, key));
        }
    }
    let Some((_, key)) = best else {
        return Ok(None);
    };
    match store.get(thread, &key).await? {
        Some(bytes) => normalize_record(&bytes, thread, &key).map(Some),
        None => Ok(None),
    }
}
