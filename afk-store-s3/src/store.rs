//! [`S3Store`]: the store contract on S3 conditional writes.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use afk_core::store::{
    Capabilities, Commit, Epoch, ListPage, Store, latest_key, run_key, run_of_key, validate_list,
};
use afk_core::{Error, Result, RunId, ThreadId, store::validate_key};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt, stream};

use crate::attention::Pending;
use crate::config::S3Config;
use crate::head::{Head, Layout, Slot, garbage, new_nonce};
use crate::index::SegmentCache;
use crate::log::LogCache;
use crate::open;
use crate::ops::{Cond, Ops, S3Traffic};
use crate::swap::HeadCache;

/// Requests in flight at once within one store call (object PUTs of a commit, head GETs of a
/// listing).
pub(crate) const PARALLEL: usize = 16;

/// Most times a read follows a head that moved under it before giving up (`Unavailable`).
const MAX_REREADS: usize = 16;

/// Largest value the store accepts: 64 MiB. S3 allows 5 GiB in one PUT, but values are held in
/// memory whole, must upload within one 60 s attempt, and this is the size the conformance
/// suite round-trips against the test server.
pub const MAX_VALUE_SIZE: usize = 64 * 1024 * 1024;

/// A [`Store`] on any S3-compatible object store that honors conditional writes.
///
/// See the crate docs for the object layout and the guarantees. Open with [`S3Store::open`] or
/// [`S3Store::from_url`]; cheap to share as `Arc<S3Store>`.
pub struct S3Store {
    pub(crate) ops: Ops,
    pub(crate) layout: Layout,
    pub(crate) segments: SegmentCache,
    pub(crate) heads: HeadCache,
    pub(crate) logs: LogCache,
    pub(crate) pending: Pending,
    prefix: String,
    conditional: bool,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.ops.bucket)
            .field("prefix", &self.prefix)
            .field("conditional_writes", &self.conditional)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// Claim the run (a new epoch in its head), or, with `if_new`, answer `None` without
    /// writing when the head holds the run's latest pointer.
    async fn claim_unless(
        &self,
        thread: &ThreadId,
        run: &RunId,
        unless: Unless,
    ) -> Result<Option<Epoch>> {
        let nonce = new_nonce();
        let latest = latest_key(run);
        let wrote = self
            .swap_head(thread, run, &nonce, None, false, |current| {
                let refused = match unless {
                    Unless::Never => false,
                    Unless::Stored => current.is_some_and(|h| h.keys.contains_key(&latest)),
                    Unless::Moved(seen) => current.map_or(0, |h| h.epoch) != seen.0,
                };
                if refused {
                    return Ok(None);
                }
                let mut new = current.cloned().unwrap_or_else(Head::empty);
                new.epoch = new.epoch.checked_add(1).ok_or_else(|| {
                    Error::corrupt_record(
                        run_key(run),
                        "fence epoch is at u64::MAX and cannot grow",
                    )
                })?;
                Ok(Some(new))
            })
            .await?;
        Ok(wrote.map(|h| h.epoch()))
    }

    /// Open the store: build the client and probe that the service honors `If-None-Match: *`
    /// and `If-Match` (one small object written and deleted under the prefix).
    ///
    /// Errors: `InvalidConfig` for a bad configuration, no region (neither configured nor in
    /// the AWS environment), a missing bucket (unless
    /// `create_bucket`), denied access, or a service that ignores conditional writes (unless
    /// `single_writer`); `Unavailable` when the service cannot be reached.
    pub async fn open(config: S3Config) -> Result<Self> {
        config.validate()?;
        let client = open::client(&config).await?;
        let ops = Ops {
            client,
            bucket: config.bucket.clone(),
            counters: Default::default(),
        };
        let layout = Layout::new(&config.prefix);
        let conditional = open::probe(&ops, &layout, &config).await?;
        if !conditional {
            if !config.single_writer {
                return Err(open::not_honored(&config.bucket));
            }
            tracing::warn!(bucket = %config.bucket, "conditional writes not honored; single_writer mode");
        }
        Ok(S3Store {
            ops,
            layout,
            segments: SegmentCache::default(),
            // Only where If-Match catches a stale entry (see `HeadCache`).
            heads: HeadCache::new(conditional),
            logs: LogCache::default(),
            pending: Pending::default(),
            prefix: config.prefix,
            conditional,
        })
    }

    /// [`S3Store::open`] with a configuration parsed from an `s3://` URL.
    pub async fn from_url(url: &str) -> Result<Self> {
        S3Store::open(S3Config::from_url(url)?).await
    }

    /// Requests this store has sent and bytes it has uploaded so far (heads, records and index
    /// segments), for benchmarks and metrics: what a commit really costs on the wire.
    pub fn traffic(&self) -> S3Traffic {
        self.ops.counters.snapshot()
    }

    /// Whether the service honored conditional writes at open (false only in `single_writer` mode).
    pub fn conditional_writes(&self) -> bool {
        self.conditional
    }

    /// Read one value through a head. `Ok(None)` when the head does not have the key; `Err` with
    /// `NotFound` kind when an object or segment it names is gone (the head moved meanwhile).
    async fn read_slot(
        &self,
        thread: &ThreadId,
        run: &RunId,
        head: &Head,
        key: &str,
    ) -> Result<Option<Vec<u8>>> {
        if key == run_key(run) {
            return Ok(head.fence_value());
        }
        match self.locate(thread, run, head, key).await? {
            None => Ok(None),
            Some(Slot::Inline { inline }) => Ok(Some(inline.into_bytes())),
            Some(Slot::Object(suffix)) => {
                match self
                    .ops
                    .get(&self.layout.object(thread, run, &suffix))
                    .await
                {
                    Ok(Some((bytes, _))) => Ok(Some(bytes)),
                    Ok(None) => {
                        Err(Error::not_found("object named by the head is gone").with_key(key))
                    }
                    Err(f) => Err(f.into_error(&self.ops.bucket, "GetObject")),
                }
            }
            Some(Slot::Packed { r: [_, 0], .. }) => Ok(Some(Vec::new())),
            Some(Slot::Packed { p, r: [start, len] }) => {
                let object = self.layout.object(thread, run, &p);
                match self.ops.get_range(&object, start, len).await {
                    Ok(Some(bytes)) if bytes.len() as u64 == len => Ok(Some(bytes)),
                    Ok(Some(bytes)) => Err(Error::corrupt_record(
                        key,
                        format!(
                            "S3 pack object {object:?} answered {} bytes for the range of {len} \
                             bytes at {start} that holds this value",
                            bytes.len()
                        ),
                    )),
                    Ok(None) => {
                        Err(Error::not_found("pack object named by the head is gone").with_key(key))
                    }
                    Err(f) => {
                        let e = f.into_error(&self.ops.bucket, "GetObject (range of a pack)");
                        Err(if e.is_corrupt() { e.with_key(key) } else { e })
                    }
                }
            }
        }
    }

    /// One answer of `get_many`, from the head read for its run.
    async fn read_for_many(
        &self,
        thread: &ThreadId,
        run: Option<RunId>,
        head: Option<Head>,
        key: String,
    ) -> Result<Option<Vec<u8>>> {
        let (Some(run), Some(head)) = (run, head) else {
            return Ok(None);
        };
        match self.read_slot(thread, &run, &head, &key).await {
            // The head moved since it was read: fall back to a fresh single read.
            Err(e) if e.kind() == afk_core::ErrorKind::NotFound => self.get(thread, &key).await,
            other => other,
        }
    }

    /// Create one record object of a commit attempt.
    pub(crate) async fn put_record(&self, key: String, value: Vec<u8>) -> Result<()> {
        match self.ops.put(&key, value, Cond::Create).await {
            // The path holds this attempt's nonce: a 412 means an earlier try of this very PUT
            // (retried by the SDK) already created it.
            Ok(_) | Err(crate::error::Failure::Precondition) => Ok(()),
            Err(f) => Err(f.into_error(&self.ops.bucket, "PutObject (record)")),
        }
    }

    /// Delete objects best-effort (garbage of a lost race, superseded versions): a failure is
    /// logged, never returned, since `delete_run` removes whatever is left.
    pub(crate) async fn discard(&self, keys: Vec<String>) {
        if keys.is_empty() {
            return;
        }
        if let Err(e) = self.ops.delete_many(&keys).await {
            tracing::warn!(error = %e, count = keys.len(), "could not delete unreferenced S3 objects");
        }
    }
}

impl S3Store {
    /// Logical keys the run has, as `list` shows them: every live key plus the fence when
    /// claimed. Empty when the run has no head.
    async fn logical_keys(&self, thread: &ThreadId, run: &RunId) -> Result<Vec<String>> {
        let Some((head, slots)) = self.current_slots(thread, run).await? else {
            return Ok(Vec::new());
        };
        let mut keys: Vec<String> = slots.into_keys().collect();
        if head.epoch > 0 {
            keys.push(run_key(run));
        }
        Ok(keys)
    }

    /// Delete `doomed` keys of one run: one head swap that drops them from the recent keys and
    /// hides the ones a segment lists behind tombstones; then their objects go.
    async fn delete_in_run(
        &self,
        thread: &ThreadId,
        run: &RunId,
        doomed: &HashSet<&str>,
    ) -> Result<()> {
        let fence = run_key(run);
        let Some((read, slots)) = self.current_slots(thread, run).await? else {
            return Ok(());
        };
        let mut removed: Vec<String> = Vec::new();
        let nonce = new_nonce();
        let wrote = self
            .swap_head(thread, run, &nonce, None, false, |current| {
                removed.clear();
                let Some(current) = current else {
                    return Ok(None);
                };
                // The segments' view is the one read above if the head still lists the same
                // segments; else every doomed key gets a tombstone (harmless if absent).
                let same_segs = current.segs == read.segs;
                let mut new = current.clone();
                let mut changed = false;
                let mut dropped = Vec::new();
                if doomed.contains(fence.as_str()) && new.epoch > 0 {
                    new.epoch = 0;
                    changed = true;
                }
                for key in doomed.iter().filter(|k| **k != fence) {
                    if let Some(slot) = new.keys.remove(*key) {
                        changed = true;
                        dropped.push(slot);
                    }
                    if new.segs.is_empty() || new.gone.contains(*key) {
                        continue;
                    }
                    if !same_segs {
                        new.gone.insert((*key).to_owned());
                        changed = true;
                    } else if let Some(slot) = slots.get(*key)
                        && !current.keys.contains_key(*key)
                    {
                        new.gone.insert((*key).to_owned());
                        // A pack's other values may be live in that segment: the merge that
                        // drops this entry deletes the pack once none is (see `garbage`).
                        if let Slot::Object(o) = slot {
                            removed.push(o.clone());
                        }
                        changed = true;
                    } else if current.keys.contains_key(*key) {
                        // An older value may sit in a segment under the recent one.
                        new.gone.insert((*key).to_owned());
                    }
                }
                removed.extend(garbage(&dropped, &new.keys));
                Ok(changed.then_some(new))
            })
            .await?;
        if wrote.is_some() {
            let objects = removed
                .iter()
                .map(|s| self.layout.object(thread, run, s))
                .collect();
            self.discard(objects).await;
        }
        Ok(())
    }
}

/// The run of a logical key, or `None` for a key no commit can write (no run, or a run
/// segment that is not a valid run id).
fn key_run(key: &str) -> Result<Option<RunId>> {
    validate_key(key)?;
    Ok(run_of_key(key).and_then(|r| RunId::new(r).ok()))
}

/// The only run whose keys can start with `prefix`, when the prefix names one completely
/// (`checkpoint:<run>:…`); `None` when keys of several runs may match.
fn prefix_run(prefix: &str) -> Option<RunId> {
    let (family, rest) = prefix.split_once(':')?;
    if !matches!(family, "checkpoint" | "effect" | "messages" | "bgtool") {
        return None;
    }
    let (run, _) = rest.split_once(':')?;
    RunId::new(run).ok()
}

#[async_trait]
impl Store for S3Store {
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("s3");
        caps.max_value_size = Some(MAX_VALUE_SIZE);
        caps.durable = true;
        caps.multi_process = self.conditional;
        caps.list_threads = true;
        caps.attention = true;
        caps.claim_if = true;
        caps.finished = true;
        caps
    }

    /// Entries listed by one `ListObjectsV2` page up to the cutoff (see `finished.rs`); the
    /// cursor is the last entry's key.
    async fn list_finished(
        &self,
        before_ms: u64,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::FinishedPage> {
        self.list_finished_page(before_ms, cursor, limit).await
    }

    /// One `DeleteObjects` per 1,000 entries.
    async fn forget_finished(&self, entries: &[afk_core::store::FinishedRun]) -> Result<()> {
        self.forget_finished_entries(entries).await
    }

    /// Markers listed by one `ListObjectsV2` page, each checked against its run's head (one
    /// GET per run, 16 at once); see `attention.rs`. The cursor is the last marker's key.
    async fn list_attention(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::AttentionPage> {
        self.list_attention_page(cursor, limit).await
    }

    /// The entry in the run's head: one GET.
    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        self.attention_entry(thread, run).await
    }

    /// One `ListObjectsV2` with the delimiter `/` per page (see `threads.rs`).
    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::ThreadPage> {
        let root = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        crate::threads::list_threads(&self.ops, &root, cursor, limit).await
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        let Some(run) = key_run(key)? else {
            return Ok(None);
        };
        let mut previous: Option<(u64, String)> = None;
        for _ in 0..MAX_REREADS {
            let (head, _) = self.read_head(thread, &run).await?;
            let Some(head) = head else { return Ok(None) };
            let version = (head.seq, head.nonce.clone());
            match self.read_slot(thread, &run, &head, key).await {
                Err(e) if e.kind() == afk_core::ErrorKind::NotFound => {
                    // Gone under the head just read: the head moved on, or it is broken if it
                    // is still the same head.
                    if previous.as_ref() == Some(&version) {
                        return Err(Error::corrupt_record(
                            key,
                            "the run head names an S3 object that does not exist",
                        )
                        .with_source(e));
                    }
                    previous = Some(version);
                }
                other => return other,
            }
        }
        Err(Error::unavailable(format!(
            "{key:?}: the run head moved {MAX_REREADS} times while reading"
        )))
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut runs: BTreeMap<RunId, Option<Head>> = BTreeMap::new();
        let mut owners = Vec::with_capacity(keys.len());
        for key in keys {
            let run = key_run(key)?;
            if let Some(r) = &run {
                runs.insert(r.clone(), None);
            }
            owners.push(run);
        }
        let heads: Vec<(RunId, Option<Head>)> = stream::iter(runs.into_keys())
            .map(|run| async move { self.read_head(thread, &run).await.map(|(h, _)| (run, h)) })
            .buffered(PARALLEL)
            .try_collect()
            .await?;
        let heads: BTreeMap<RunId, Option<Head>> = heads.into_iter().collect();
        let mut reads = Vec::with_capacity(keys.len());
        for (key, run) in keys.iter().zip(owners) {
            let head = run.as_ref().and_then(|r| heads.get(r).cloned().flatten());
            reads.push(self.read_for_many(thread, run, head, key.clone()));
        }
        stream::iter(reads).buffered(PARALLEL).try_collect().await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = validate_list(prefix, cursor, limit)?;
        let runs: Vec<RunId> = match prefix_run(prefix) {
            Some(run) => vec![run],
            None => {
                let dir = self.layout.thread_dir(thread);
                let folders = self.ops.list(&dir, true).await?;
                folders
                    .iter()
                    .filter_map(|f| f.strip_prefix(&dir)?.strip_suffix('/'))
                    .filter_map(|r| RunId::new(r).ok())
                    .collect()
            }
        };
        let per_run: Vec<Vec<String>> = stream::iter(runs)
            .map(|run| async move { self.logical_keys(thread, &run).await })
            .buffered(PARALLEL)
            .try_collect()
            .await?;
        let mut keys: Vec<String> = per_run
            .into_iter()
            .flatten()
            .filter(|k| k.starts_with(prefix) && cursor.is_none_or(|c| k.as_str() > c))
            .collect();
        keys.sort_unstable();
        let more = keys.len() > limit;
        keys.truncate(limit);
        let next_cursor = if more { keys.last().cloned() } else { None };
        Ok(ListPage { keys, next_cursor })
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        let mut by_run: BTreeMap<RunId, HashSet<&str>> = BTreeMap::new();
        for key in keys {
            if let Some(run) = key_run(key)? {
                by_run.entry(run).or_default().insert(key);
            }
        }
        for (run, doomed) in by_run {
            self.delete_in_run(thread, &run, &doomed).await?;
        }
        Ok(())
    }

    /// Delete the head (the run is gone for readers), then every object of the run's folder
    /// and the marker the head named, if any (one `DeleteObjects`). Other markers of the run
    /// (left by crashes) are stale from then on: the next listing deletes them.
    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let (count, marker) = match self.current_slots(thread, run).await? {
            None => (0, None),
            Some((head, slots)) => {
                let fence = u64::from(head.epoch > 0);
                (slots.len() as u64 + fence, head.attn.map(|a| a.marker))
            }
        };
        self.heads.forget(thread, run);
        self.logs.forget(thread, run);
        self.ops.delete_one(&self.layout.head(thread, run)).await?;
        let mut objects = self
            .ops
            .list(&self.layout.run_dir(thread, run), false)
            .await?;
        objects.extend(marker.map(|id| self.layout.marker(thread, run, &id)));
        self.ops.delete_many(&objects).await?;
        Ok(count)
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.claim_unless(thread, run, Unless::Never)
            .await?
            .ok_or_else(|| Error::unexpected("claim wrote no head"))
    }

    /// The head holds the latest pointer: one read of it decides, and the claim is the swap
    /// of that same head (one GET and one conditional PUT, not the pointer's GET first).
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        self.claim_unless(thread, run, Unless::Stored).await
    }

    /// The epoch is the head's: one read of it decides, and the claim is the swap of that
    /// same head, so a claim that came in between makes the swap fail and the look repeat.
    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        self.claim_unless(thread, run, Unless::Moved(seen)).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.commit_one(commit).await
    }
}

/// When a claim claims nothing.
#[derive(Debug, Clone, Copy)]
enum Unless {
    /// Always claims.
    Never,
    /// Not when the run has a latest pointer (`claim_if_new`).
    Stored,
    /// Not when the run's epoch is no longer this one (`claim_if`).
    Moved(Epoch),
}
