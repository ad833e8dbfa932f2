//! Reading a run's head and replacing it with a compare-and-swap loop.
//!
//! Every change of a run (claim, commit, delete of keys) is one head replacement under
//! `If-Match: <etag>` (or `If-None-Match: *` for a run without a head). A lost race (412) re-reads
//! the head and recomputes the change; an ambiguous failure (timeout, dropped connection, 5xx)
//! reads the head back and looks for the writer's nonce, so the outcome is known before
//! returning: success if the write landed, else `Unavailable` (not retried here: the SDK has
//! already made its attempts).
//!
//! Every head this store swaps in is remembered with the ETag the service answered
//! ([`HeadCache`]), so the next commit of the run starts from it instead of a GET.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use afk_core::{Error, Result, RunId, ThreadId};

use crate::error::Failure;
use crate::head::Head;
use crate::ops::Cond;
use crate::store::S3Store;

/// Most head replacements one operation attempts before giving up with a retryable `Conflict`.
pub(crate) const MAX_SWAPS: usize = 64;

/// How many times an ambiguous write is read back before reporting the outcome unknown.
const READ_BACK_TRIES: u32 = 4;

/// A head as read: `None` when the run has no head object; the ETag to replace it with.
pub(crate) type Read = (Option<Head>, Option<String>);

/// Most run heads a [`HeadCache`] holds; past that it starts over (each run's next commit then
/// reads its head once).
const HEADS_MAX: usize = 1024;

/// The head this store last swapped in for each run, with the ETag the service answered for it.
///
/// A commit starts from its run's entry instead of reading the head: two requests in a row per
/// commit (the record objects, the head swap) instead of three. An entry is never trusted for
/// anything the swap does not check again: the swap replaces the head under `If-Match` with the
/// entry's ETag, so a head that moved since (another writer's commit or claim) answers 412, and
/// the swap reads the head and decides on it as it always did. A stale entry costs one lost race.
/// Reads (`get`, `get_many`, `list`) never use it: another process may have written since.
///
/// Off in `single_writer` mode, where the service ignores `If-Match` and so cannot catch a stale
/// entry; and turned off for good when a swap from an entry loses a race to a head that did not
/// change (a service whose PUT answers an ETag that its `If-Match` does not accept), since every
/// commit would then pay a lost race.
#[derive(Debug)]
pub(crate) struct HeadCache {
    map: Mutex<HashMap<(ThreadId, RunId), (Head, String)>>,
    on: AtomicBool,
}

impl HeadCache {
    /// A cache that is used (`on`) or never holds anything.
    pub(crate) fn new(on: bool) -> Self {
        HeadCache {
            map: Mutex::default(),
            on: AtomicBool::new(on),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ThreadId, RunId), (Head, String)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run's entry, taken out (the commit that uses it puts back what it swaps in).
    pub(crate) fn take(&self, thread: &ThreadId, run: &RunId) -> Option<(Head, String)> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        self.lock().remove(&(thread.clone(), run.clone()))
    }

    /// Remember `head` as the run's current head, written with `etag`.
    pub(crate) fn put(&self, thread: &ThreadId, run: &RunId, head: &Head, etag: Option<String>) {
        let Some(etag) = etag.filter(|_| self.on.load(Ordering::Relaxed)) else {
            return;
        };
        let mut map = self.lock();
        if map.len() >= HEADS_MAX {
            map.clear();
        }
        map.insert((thread.clone(), run.clone()), (head.clone(), etag));
    }

    /// Drop the run's entry, if any.
    pub(crate) fn forget(&self, thread: &ThreadId, run: &RunId) {
        if self.on.load(Ordering::Relaxed) {
            self.lock().remove(&(thread.clone(), run.clone()));
        }
    }

    /// Stop using entries: their ETags are not what this service's `If-Match` takes.
    fn distrust(&self, bucket: &str) {
        if self.on.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                bucket,
                "the S3 service refused the ETag its own PUT answered for an unchanged run head; \
                 commits read the head again before each swap from now on"
            );
            self.lock().clear();
        }
    }
}

/// Whether `head` is the very version `(seq, nonce)`.
fn is_version(head: Option<&Head>, version: &(u64, String)) -> bool {
    head.is_some_and(|h| h.seq == version.0 && h.nonce == version.1)
}

impl S3Store {
    /// Read a run's head.
    pub(crate) async fn read_head(&self, thread: &ThreadId, run: &RunId) -> Result<Read> {
        let key = self.layout.head(thread, run);
        match self.ops.get(&key).await {
            Ok(None) => Ok((None, None)),
            Ok(Some((bytes, etag))) => {
                let etag = etag.ok_or_else(|| {
                    Error::unexpected(format!(
                        "bucket {:?}: head object returned without an ETag",
                        self.ops.bucket
                    ))
                })?;
                Ok((Some(Head::decode(run, &bytes)?), Some(etag)))
            }
            Err(f) => Err(f.into_error(&self.ops.bucket, "GetObject (run head)")),
        }
    }

    /// Read the head back after an ambiguous write, retrying while the service is unavailable.
    /// Gives `cause` back with the head, for the caller's error when the write did not land.
    async fn read_back(
        &self,
        thread: &ThreadId,
        run: &RunId,
        cause: Error,
    ) -> Result<(Read, Error)> {
        let mut last = None;
        for i in 0..READ_BACK_TRIES {
            match self.read_head(thread, run).await {
                Ok(read) => return Ok((read, cause)),
                Err(e) if e.is_retryable() => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(100 << i)).await;
                }
                Err(e) => return Err(e),
            }
        }
        tracing::debug!(%thread, %run, error = ?last, "head read-back failed");
        Err(Error::unavailable(format!(
            "run {run} of thread {thread}: a head write may or may not have been applied and the head \
             could not be read back"
        ))
        .with_source(cause))
    }

    /// Replace the run's head. `change` gets the current head (or `None`) and returns the new
    /// head (its `seq` and `nonce` are set here), `Ok(None)` when there is nothing to do, or an
    /// error that ends the operation (for example `Fenced`). It may be called several times,
    /// once per attempt, always on a freshly read head.
    ///
    /// Returns the head this operation wrote, or `None` when `change` declined. `nonce` must be
    /// fresh for this operation; it identifies its write when reading back. `first` is a head
    /// the caller has just read, or took from the [`HeadCache`] (`cached`): the first attempt
    /// uses it instead of reading again (a stale one only costs a lost race, 412, and a re-read).
    /// The head written is remembered in the cache.
    pub(crate) async fn swap_head<F>(
        &self,
        thread: &ThreadId,
        run: &RunId,
        nonce: &str,
        first: Option<Read>,
        cached: bool,
        mut change: F,
    ) -> Result<Option<Head>>
    where
        F: FnMut(Option<&Head>) -> Result<Option<Head>>,
    {
        let key = self.layout.head(thread, run);
        // The version a cached head claims to be, until the first re-read checks it.
        let mut cached_version = match (&first, cached) {
            (Some((Some(h), _)), true) => Some((h.seq, h.nonce.clone())),
            _ => None,
        };
        let mut first = first;
        for attempt in 0..MAX_SWAPS {
            let (current, etag) = match first.take() {
                Some(read) => read,
                None => self.reread_head(thread, run, &mut cached_version).await?,
            };
            if let Some(h) = &current
                && h.shows(nonce)
            {
                self.heads.put(thread, run, h, etag);
                return Ok(Some(h.clone()));
            }
            let Some(mut new) = change(current.as_ref())? else {
                return Ok(None);
            };
            new.seq = current.as_ref().map_or(0, |h| h.seq) + 1;
            new.nonce = nonce.to_owned();
            let cond = match etag {
                Some(etag) => Cond::Match(etag),
                None => Cond::Create,
            };
            match self.ops.put(&key, new.encode(), cond).await {
                Ok(etag) => {
                    self.heads.put(thread, run, &new, etag);
                    return Ok(Some(new));
                }
                // Lost the race (or the head vanished under If-Match): re-read and recompute.
                Err(Failure::Precondition | Failure::Missing) => {
                    self.heads.forget(thread, run);
                    let jitter = rand::random::<u64>() % (5 + 5 * attempt as u64).min(50);
                    tokio::time::sleep(Duration::from_millis(jitter)).await;
                }
                Err(Failure::Other {
                    error,
                    ambiguous: true,
                }) => {
                    self.heads.forget(thread, run);
                    return self.landed_after_all(thread, run, nonce, error).await;
                }
                Err(Failure::Other {
                    error,
                    ambiguous: false,
                }) => {
                    self.heads.forget(thread, run);
                    return Err(error);
                }
            }
        }
        self.after_lost_races(thread, run, nonce).await
    }

    /// Read the head again for the next attempt of a swap. The first re-read after starting
    /// from a cached head checks the cache: `cached_version` (taken here) is the version the
    /// cached head claimed to be.
    async fn reread_head(
        &self,
        thread: &ThreadId,
        run: &RunId,
        cached_version: &mut Option<(u64, String)>,
    ) -> Result<Read> {
        let read = self.read_head(thread, run).await?;
        if let Some(v) = cached_version.take()
            && is_version(read.0.as_ref(), &v)
        {
            // 412 for the very head the cache named: its ETag is not one this
            // service's If-Match takes.
            self.heads.distrust(&self.ops.bucket);
        }
        Ok(read)
    }

    /// Read the head back after an ambiguous write of the head with `nonce` (it failed with
    /// `error`): that head when it shows the write landed, else `Unavailable`.
    async fn landed_after_all(
        &self,
        thread: &ThreadId,
        run: &RunId,
        nonce: &str,
        error: Error,
    ) -> Result<Option<Head>> {
        tracing::debug!(%thread, %run, error = %error, "ambiguous head write; reading back");
        let ((current, _), error) = self.read_back(thread, run, error).await?;
        if let Some(h) = current
            && h.shows(nonce)
        {
            return Ok(Some(h));
        }
        // Not applied. The SDK already retried the request; another round here
        // would multiply its attempts (and time) for a service that keeps failing.
        Err(Error::unavailable(format!(
            "run {run} of thread {thread}: the head write failed and reading the head \
             back shows it was not applied"
        ))
        .with_source(error))
    }

    /// After [`MAX_SWAPS`] lost races of the swap writing `nonce`: the head, if it shows the
    /// write landed after all, else a retryable `Conflict`.
    async fn after_lost_races(
        &self,
        thread: &ThreadId,
        run: &RunId,
        nonce: &str,
    ) -> Result<Option<Head>> {
        // The last attempt's 412 may have answered an SDK retry of a write that landed.
        if let (Some(h), _) = self.read_head(thread, run).await?
            && h.shows(nonce)
        {
            return Ok(Some(h));
        }
        Err(Error::conflict(format!(
            "run {run} of thread {thread}: head replaced by others {MAX_SWAPS} times in a row"
        ))
        .with_retryable(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(i: usize) -> (ThreadId, RunId) {
        (
            ThreadId::new("t").unwrap(),
            RunId::new(format!("r{i}")).unwrap(),
        )
    }

    fn head(seq: u64) -> Head {
        let mut h = Head::empty();
        h.seq = seq;
        h
    }

    #[test]
    fn an_entry_is_taken_once_and_forgotten_on_request() {
        let cache = HeadCache::new(true);
        let (t, r) = ids(0);
        cache.put(&t, &r, &head(3), Some("\"e3\"".into()));
        let (h, etag) = cache.take(&t, &r).unwrap();
        assert_eq!((h.seq, etag.as_str()), (3, "\"e3\""));
        assert!(cache.take(&t, &r).is_none(), "taken out, not copied");
        cache.put(&t, &r, &head(4), Some("\"e4\"".into()));
        cache.forget(&t, &r);
        assert!(cache.take(&t, &r).is_none());
        // A PUT answered without an ETag leaves nothing to swap against.
        cache.put(&t, &r, &head(5), None);
        assert!(cache.take(&t, &r).is_none());
    }

    #[test]
    fn it_starts_over_past_its_bound() {
        let cache = HeadCache::new(true);
        for i in 0..HEADS_MAX {
            let (t, r) = ids(i);
            cache.put(&t, &r, &head(1), Some(format!("e{i}")));
        }
        assert_eq!(cache.lock().len(), HEADS_MAX);
        let (t, r) = ids(HEADS_MAX);
        cache.put(&t, &r, &head(1), Some("last".into()));
        assert_eq!(cache.lock().len(), 1, "cleared, then the newest entry");
        assert!(cache.take(&t, &r).is_some());
    }

    #[test]
    fn an_off_or_distrusted_cache_holds_nothing() {
        let (t, r) = ids(0);
        let off = HeadCache::new(false);
        off.put(&t, &r, &head(1), Some("e".into()));
        assert!(off.take(&t, &r).is_none());
        let cache = HeadCache::new(true);
        cache.put(&t, &r, &head(1), Some("e".into()));
        cache.distrust("bucket");
        assert!(cache.lock().is_empty(), "entries dropped");
        cache.put(&t, &r, &head(2), Some("e2".into()));
        assert!(cache.take(&t, &r).is_none(), "and none kept from then on");
    }

    #[test]
    fn a_version_is_its_seq_and_nonce() {
        let mut h = head(7);
        h.nonce = "n".into();
        assert!(is_version(Some(&h), &(7, "n".into())));
        assert!(!is_version(Some(&h), &(7, "m".into())));
        assert!(!is_version(Some(&h), &(6, "n".into())));
        assert!(!is_version(None, &(7, "n".into())));
    }
}
