//! Key rotation: [`SealedStore::rekey`] wraps a thread's data keys again under the active
//! key-encryption key and, on request, moves every value of the thread to a fresh data key.
//!
//! Each step is safe to interrupt (a crash, SIGKILL) and to run again, and the thread stays
//! readable throughout:
//!
//! 1. **Record.** One compare-and-swap of the thread's keyring record
//!    ([`Keyring::replace`](crate::Keyring::replace)) wraps every data key under the active
//!    key-encryption key and, with [`RekeyOptions::new_data_key`], adds a fresh data key and
//!    makes it the active one (new writes seal with it). The old data key stays in the
//!    record, so values sealed with it still open. A record holding more than one data key
//!    *is* a rotation under way: a rerun finishes it rather than starting another one.
//! 2. **Re-seal.** Run by run, the values still naming an old data key are opened and sealed
//!    with the active one, written under a claim of the run (a process still working on it is
//!    fenced off). A run whose owner holds an unexpired lease is skipped, not taken. Values
//!    name their data key, so a thread with some values re-sealed and some not reads fine.
//! 3. **Verify, then retire.** Every value of the thread is read back and opened with the
//!    active data key; only if all of them are, and no run is held by a live owner (whose
//!    process may still seal with the old key it holds in memory), is a last compare-and-swap
//!    made that drops the old data keys from the record. From then on the old data key opens
//!    nothing, even if it leaked.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use afk_core::normalize::normalize_record;
use afk_core::runner::{Clock, SystemClock};
use afk_core::schema::{MarkState, Phase, RunMark};
use afk_core::store::{Attention, Commit, Epoch, Store, StoreExt, latest_key, run_of_key};
use afk_core::{Error, ErrorKind, Result, RunId, ThreadId};
use serde::Serialize;

use crate::format::{looks_sealed, open, parse, seal};
use crate::hashes::seal_hash_key;
use crate::store::{Record, SealedStore, ThreadKeys, store_owned};

/// How [`SealedStore::rekey`] rotates.
#[derive(Debug, Clone)]
pub struct RekeyOptions {
    /// Also create a fresh data key for the thread and re-seal every value under it, then
    /// retire the old one (so a leaked data key stops opening the thread). Without it, only
    /// the data keys are wrapped again under the active key-encryption key.
    pub new_data_key: bool,
    /// The clock leases are read with.
    pub clock: Arc<dyn Clock>,
    /// How far a lease holder's clock may run behind ours: a lease counts as expired only
    /// this long after its end (the runner's default, 5 s).
    pub lease_skew: Duration,
}

impl Default for RekeyOptions {
    fn default() -> Self {
        RekeyOptions {
            new_data_key: false,
            clock: Arc::new(SystemClock),
            lease_skew: Duration::from_secs(5),
        }
    }
}

/// A run [`SealedStore::rekey`] left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedRun {
    /// The run.
    pub run: String,
    /// Its owner, when one holds it.
    pub owner: Option<String>,
    /// Until when the owner's lease holds (ms since the Unix epoch; 0 when none).
    pub lease_until_ms: u64,
    /// Why it was skipped.
    pub reason: String,
}

/// What [`SealedStore::rekey`] did to one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RekeyReport {
    /// The thread.
    pub thread: String,
    /// Whether the thread has data keys (`false`: never sealed, or erased; nothing to do).
    pub had_keys: bool,
    /// The active key-encryption key, which now wraps every data key of the thread.
    pub kek: String,
    /// The thread's active data key.
    pub data_key: String,
    /// Data keys wrapped again under the active key-encryption key by this call.
    pub rewrapped: usize,
    /// Whether this call created the active data key (`false` with `new_data_key` means it
    /// finished a rotation an earlier call started).
    pub created: bool,
    /// Values this call sealed again with the active data key.
    pub resealed: u64,
    /// Values found sealed with the active data key already.
    pub current: u64,
    /// Plaintext values (a store being migrated to encryption), left as they are.
    pub plaintext: u64,
    /// Runs left alone: held by a live owner, or claimed by another process meanwhile.
    pub skipped: Vec<SkippedRun>,
    /// Old data keys dropped from the record by this call: they open nothing any more.
    pub retired: Vec<String>,
    /// Old data keys still in the record (values still name them, or a run was skipped): run
    /// `rekey` again to finish.
    pub pending: Vec<String>,
}

impl RekeyReport {
    /// Whether the thread is done: no old data key left, no run skipped.
    pub fn finished(&self) -> bool {
        self.pending.is_empty() && self.skipped.is_empty()
    }
}

/// A thread [`SealedStore::rekey_each`] could not rotate.
#[derive(Debug)]
pub struct RekeyFailure {
    /// The thread.
    pub thread: ThreadId,
    /// Why: a key the key source lacks (`InvalidConfig` naming it), a value that does not open
    /// (`Corrupt` naming its store key), an unreadable keyring record, a store error.
    pub error: Error,
}

/// What [`SealedStore::rekey_all`] or [`SealedStore::rekey_each`] did: one report per thread
/// rotated, one failure per thread that could not be.
#[derive(Debug, Default)]
pub struct RekeyAll {
    /// The threads rotated (each [`RekeyReport::finished`], or with runs skipped or old data
    /// keys still pending).
    pub threads: Vec<RekeyReport>,
    /// The threads that failed, in the order they were tried.
    pub failed: Vec<RekeyFailure>,
}

impl RekeyAll {
    /// Whether every thread is done: none failed, and each report is finished.
    pub fn finished(&self) -> bool {
        self.failed.is_empty() && self.threads.iter().all(RekeyReport::finished)
    }
}

/// What one look at a run's values found.
#[derive(Debug, Default)]
struct Scan {
    /// Values naming another data key than the active one, as stored.
    stale: Vec<(String, Vec<u8>)>,
    current: u64,
    plaintext: u64,
}

/// How many times a record that changes under us is read again before giving up.
pub(crate) const RECORD_ATTEMPTS: usize = 16;

/// The next unused data key id of a record: `d<n+1>` for the highest `d<n>` it holds.
fn next_key_id(record: &Record) -> String {
    let top = record
        .keys
        .keys()
        .filter_map(|id| id.strip_prefix('d')?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    format!("d{}", top + 1)
}

pub(crate) fn encode(record: &Record) -> Result<Vec<u8>> {
    serde_json::to_vec(record).map_err(|e| Error::unexpected(format!("keyring record: {e}")))
}

impl SealedStore {
    /// Rotate the keys of `thread`: wrap its data keys under the active key-encryption key;
    /// with [`RekeyOptions::new_data_key`], re-seal every value under a fresh data key and
    /// retire the old one once every value opens with the new one. Safe to interrupt at any
    /// point and to run again, which finishes the job; the thread stays readable throughout.
    ///
    /// 1. One compare-and-swap of the keyring record
    ///    ([`Keyring::replace`](crate::Keyring::replace)) wraps every data
    ///    key under the active key-encryption key and, if asked, adds a fresh data key and
    ///    makes it active. The old one stays in the record; a record holding more than one data
    ///    key is a rotation under way, which a rerun finishes rather than starting another.
    /// 2. Run by run, values naming an old data key are sealed with the active one and written
    ///    under a claim of the run. A run whose owner holds an unexpired lease is skipped (and
    ///    reported), never taken.
    /// 3. Every value of the thread is read back and opened with the active data key; only if
    ///    all open and no run was skipped are the old data keys dropped from the record.
    ///
    /// Errors: `InvalidConfig` naming the key id when the key source lacks the key a data key
    /// was wrapped with, or a value names a data key the record lacks; `Corrupt` for a value
    /// that names the active data key and does not open; `Unsupported` for a keyring that
    /// cannot replace records; `Conflict` when the record keeps changing under us; store
    /// errors. Runs held by a live owner are skipped and reported, never taken.
    pub async fn rekey(&self, thread: &ThreadId, opts: &RekeyOptions) -> Result<RekeyReport> {
        let mut report = RekeyReport {
            thread: thread.to_string(),
            kek: self.source.active().to_owned(),
            ..RekeyReport::default()
        };
        let Some(record) = self.settle_record(thread, opts, &mut report).await? else {
            return Ok(report);
        };
        report.had_keys = true;
        let bytes = encode(&record)?;
        let tk = self.unwrap_record(thread, &bytes).await?;
        report.data_key = tk.active.clone();
        let rotating = record.keys.len() > 1;
        for run in self.runs_of(thread).await? {
            self.reseal_run(thread, &run, &tk, rotating, opts, &mut report)
                .await?;
        }
        if rotating {
            self.retire(thread, &mut report).await?;
        }
        Ok(report)
    }

    /// [`SealedStore::rekey`] of every thread of the store, in the order the store lists
    /// them: a thread that fails is reported in [`RekeyAll::failed`] and the next one is
    /// rotated ([`SealedStore::rekey_each`]). Errors: only those of listing the threads
    /// (`Unsupported` for a store that does not list them); every error of a thread is in the
    /// result.
    pub async fn rekey_all(&self, opts: &RekeyOptions) -> Result<RekeyAll> {
        let threads = self.inner.list_all_threads().await?;
        Ok(self.rekey_each(&threads, opts, &mut |_| {}).await)
    }

    /// [`SealedStore::rekey`] of each of `threads` in turn, going on past a thread that fails:
    /// every thread ends up in [`RekeyAll::threads`] or in [`RekeyAll::failed`] with its
    /// error. `before` is told the index of each thread before it is rotated (for progress).
    pub async fn rekey_each(
        &self,
        threads: &[ThreadId],
        opts: &RekeyOptions,
        before: &mut (dyn FnMut(usize) + Send),
    ) -> RekeyAll {
        let mut all = RekeyAll::default();
        for (i, thread) in threads.iter().enumerate() {
            before(i);
            match self.rekey(thread, opts).await {
                Ok(report) => all.threads.push(report),
                Err(error) => all.failed.push(RekeyFailure {
                    thread: thread.clone(),
                    error,
                }),
            }
        }
        all
    }

    /// Every run that has a key in the thread (also a run whose fence was deleted).
    async fn runs_of(&self, thread: &ThreadId) -> Result<Vec<RunId>> {
        let mut runs = BTreeSet::new();
        for key in self.inner.list_all(thread, "").await? {
            if let Some(run) = run_of_key(&key) {
                runs.insert(run.to_owned());
            }
        }
        runs.into_iter().map(RunId::new).collect()
    }

    /// Step 1: bring the thread's record to its rotated form (every data key wrapped under
    /// the active key-encryption key; a fresh active data key if asked and no rotation is
    /// under way) with a compare-and-swap, and return it; `None` when the thread has none.
    async fn settle_record(
        &self,
        thread: &ThreadId,
        opts: &RekeyOptions,
        report: &mut RekeyReport,
    ) -> Result<Option<Record>> {
        let kek = self.source.active().to_owned();
        for _ in 0..RECORD_ATTEMPTS {
            let Some(bytes) = self.ring.load(thread).await? else {
                return Ok(None);
            };
            let record = Self::parse_record(thread, &bytes)?;
            // Unwrapping checks that the source holds every key the record needs.
            let tk = self.unwrap_record(thread, &bytes).await?;
            let mut next = record.clone();
            let create = opts.new_data_key && record.keys.len() == 1 && !report.created;
            if create {
                let id = next_key_id(&record);
                let dek = crate::format::Key::generate();
                let wrapped = self.source.wrap(thread, &id, &dek).await?;
                next.keys.insert(id.clone(), hex::encode(wrapped));
                if let Some(h) = &tk.hash {
                    // The hash key moves to the new data key, so the old one can retire.
                    next.hash = Some(seal_hash_key(thread, &id, &dek, h)?);
                }
                next.active = id;
            }
            let mut rewrapped = 0;
            for (id, wrapped) in &mut next.keys {
                let by = hex::decode(&*wrapped)
                    .ok()
                    .and_then(|w| self.source.wrapped_with(&w));
                if by.is_some_and(|by| by != kek) {
                    let dek = tk.keys.get(id).ok_or_else(|| {
                        Error::unexpected(format!("data key {id} of thread {thread} vanished"))
                    })?;
                    *wrapped = hex::encode(self.source.wrap(thread, id, dek).await?);
                    rewrapped += 1;
                }
            }
            if !create && rewrapped == 0 {
                return Ok(Some(record));
            }
            if self.ring.replace(thread, &bytes, &encode(&next)?).await? {
                self.forget(thread);
                report.rewrapped += rewrapped;
                report.created |= create;
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!("the keyring record of thread {thread} kept changing while being rotated"),
        ))
    }

    /// The values of `run` (fence aside), sorted into current, stale and plaintext.
    async fn scan_run(&self, thread: &ThreadId, run: &RunId, active: &str) -> Result<Scan> {
        let mut keys = Vec::new();
        for prefix in afk_core::keys::run_prefixes(run) {
            keys.extend(self.inner.list_all(thread, &prefix).await?);
        }
        keys.retain(|k| !store_owned(k));
        let mut scan = Scan::default();
        for chunk in keys.chunks(256) {
            let values = self.inner.get_many(thread, chunk).await?;
            for (key, value) in chunk.iter().zip(values) {
                let Some(value) = value else { continue };
                if !looks_sealed(&value) {
                    scan.plaintext += 1;
                } else if parse(&value, key)?.key_id == active {
                    scan.current += 1;
                } else {
                    scan.stale.push((key.clone(), value));
                }
            }
        }
        Ok(scan)
    }

    /// The run's entry in the index of runs that need attention, if the store keeps one.
    async fn mark_of(&self, thread: &ThreadId, run: &RunId) -> Result<Option<RunMark>> {
        if !self.inner.capabilities().attention {
            return Ok(None);
        }
        Ok(self
            .inner
            .attention(thread, run)
            .await?
            .and_then(|b| RunMark::decode(&b)))
    }

    /// Step 2 for one run: re-seal its stale values under a claim, unless a live owner holds
    /// it (then, or when another process claims it first, it is reported as skipped).
    async fn reseal_run(
        &self,
        thread: &ThreadId,
        run: &RunId,
        tk: &ThreadKeys,
        rotating: bool,
        opts: &RekeyOptions,
        report: &mut RekeyReport,
    ) -> Result<()> {
        let scan = self.scan_run(thread, run, &tk.active).await?;
        let mark = if rotating || !scan.stale.is_empty() {
            self.mark_of(thread, run).await?
        } else {
            None
        };
        let now = opts.clock.now_ms();
        let skew = u64::try_from(opts.lease_skew.as_millis()).unwrap_or(u64::MAX);
        if let Some(m) = mark
            .as_ref()
            .filter(|m| m.state == MarkState::Running && !m.lease_expired(now, skew))
        {
            report.current += scan.current;
            report.plaintext += scan.plaintext;
            report.skipped.push(SkippedRun {
                run: run.to_string(),
                owner: m.owner.clone(),
                lease_until_ms: m.lease_until_ms,
                reason: "held by a live owner (its lease has not expired)".into(),
            });
            return Ok(());
        }
        if scan.stale.is_empty() {
            report.current += scan.current;
            report.plaintext += scan.plaintext;
            return Ok(());
        }
        let Some(epoch) = self.claim_for_rekey(thread, run, mark.as_ref()).await? else {
            report.skipped.push(SkippedRun {
                run: run.to_string(),
                owner: None,
                lease_until_ms: 0,
                reason: "claimed by another process meanwhile".into(),
            });
            return Ok(());
        };
        // What is written comes from what is stored under the claim.
        let scan = self.scan_run(thread, run, &tk.active).await?;
        report.current += scan.current;
        report.plaintext += scan.plaintext;
        report.resealed += self.write_resealed(thread, run, epoch, tk, scan).await?;
        self.finish_if_ended(thread, run, epoch).await
    }

    /// On a store whose finished runs expire (Redis with a time to live), claiming a run and
    /// writing to it make it live again: if its latest record ends it, tell the store it has
    /// ended, so that it expires again (its time to live counted from now).
    async fn finish_if_ended(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        if !self.inner.capabilities().ttl {
            return Ok(());
        }
        let lk = latest_key(run);
        let Some(latest) = self.get(thread, &lk).await? else {
            return Ok(());
        };
        match normalize_record(&latest, thread, &lk) {
            Ok(r) if r.phase == Phase::RunTerminal => {
                self.inner.finish_run(thread, run, epoch).await
            }
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(%thread, %run, error = %e, "latest record unreadable: the run is left live");
                Ok(())
            }
        }
    }

    /// Claim the run: on condition of its index entry's epoch when the store can (a worker
    /// taking it over at the same moment wins, and the run is skipped), plainly otherwise. An
    /// entry older than the run's last claim (a tool that claimed the run without writing an
    /// entry, such as `migrate`) stays as it was after the refused claim: then the run is
    /// claimed plainly, or it could never be re-sealed.
    async fn claim_for_rekey(
        &self,
        thread: &ThreadId,
        run: &RunId,
        mark: Option<&RunMark>,
    ) -> Result<Option<Epoch>> {
        let Some(m) = mark.filter(|m| m.epoch > 0 && self.inner.capabilities().claim_if) else {
            return self.inner.claim(thread, run).await.map(Some);
        };
        if let Some(epoch) = self.inner.claim_if(thread, run, Epoch(m.epoch)).await? {
            return Ok(Some(epoch));
        }
        match self.mark_of(thread, run).await? {
            Some(now) if now == *m => self.inner.claim(thread, run).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Seal the stale values of `scan` with the active data key and commit them under
    /// `epoch`, in commits the store accepts; the run's index entry is written again under
    /// the new epoch (so a worker can still take the run over). Returns how many were
    /// written.
    async fn write_resealed(
        &self,
        thread: &ThreadId,
        run: &RunId,
        epoch: Epoch,
        tk: &ThreadKeys,
        scan: Scan,
    ) -> Result<u64> {
        let active = tk.keys.get(&tk.active).ok_or_else(|| {
            Error::unexpected(format!("thread {thread} has no active data key in memory"))
        })?;
        let lk = latest_key(run);
        let (mut puts, mut latest) = (Vec::new(), None);
        for (key, value) in scan.stale {
            let parsed = parse(&value, &key)?;
            let dek = tk.keys.get(parsed.key_id).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "{key} of thread {thread} was sealed with data key {}, which the \
                         thread's keyring record does not hold",
                        parsed.key_id
                    ),
                )
                .with_key(key.clone())
            })?;
            let plain = open(thread, &key, dek, &parsed)?;
            let sealed = seal(thread, &key, &tk.active, active, &plain)?;
            if key == lk {
                latest = Some(sealed);
            } else {
                puts.push((key, sealed));
            }
        }
        let written = puts.len() as u64 + u64::from(latest.is_some());
        let attention = self.mark_of(thread, run).await?.map(|mut m| {
            m.epoch = epoch.0;
            Attention::Open(m.encode())
        });
        let max = self.inner.capabilities().max_commit_keys.unwrap_or(256);
        let mut chunks: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
        while puts.len() > max.max(1) {
            let rest = puts.split_off(max.max(1));
            chunks.push(std::mem::replace(&mut puts, rest));
        }
        chunks.push(puts);
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let end = i == last;
            let commit = Commit {
                thread: thread.clone(),
                run: run.clone(),
                epoch,
                puts: chunk,
                latest: if end { latest.take() } else { None },
                attention: if end { attention.clone() } else { None },
            };
            self.inner.commit(&commit).await?;
        }
        Ok(written)
    }

    /// Step 3: read every value of the thread back; if each opens with the active data key
    /// and no run was skipped, drop the old data keys from the record.
    async fn retire(&self, thread: &ThreadId, report: &mut RekeyReport) -> Result<()> {
        let Some(bytes) = self.ring.load(thread).await? else {
            return Ok(()); // erased meanwhile: nothing left to retire
        };
        let record = Self::parse_record(thread, &bytes)?;
        let old: Vec<String> = (record.keys.keys())
            .filter(|id| **id != record.active)
            .cloned()
            .collect();
        let tk = self.unwrap_record(thread, &bytes).await?;
        let still = self.verify_thread(thread, &tk).await?;
        if !still.is_empty() || !report.skipped.is_empty() {
            report.pending = old;
            return Ok(());
        }
        let mut next = record.clone();
        next.keys.retain(|id, _| *id == record.active);
        if let (Some(h), Some(dek)) = (&tk.hash, tk.keys.get(&tk.active)) {
            // Under the active data key, whichever key sealed it before.
            next.hash = Some(seal_hash_key(thread, &tk.active, dek, h)?);
        }
        if self.ring.replace(thread, &bytes, &encode(&next)?).await? {
            self.forget(thread);
            report.retired = old;
        } else {
            report.pending = old; // changed meanwhile: a rerun looks again
        }
        Ok(())
    }

    /// Open every sealed value of the thread (fences aside): the old data keys values still
    /// name. A value naming the active key that does not open is `Corrupt`.
    async fn verify_thread(&self, thread: &ThreadId, tk: &ThreadKeys) -> Result<BTreeSet<String>> {
        let active = tk.keys.get(&tk.active).ok_or_else(|| {
            Error::unexpected(format!("thread {thread} has no active data key in memory"))
        })?;
        let mut keys = self.inner.list_all(thread, "").await?;
        keys.retain(|k| !store_owned(k));
        let mut still = BTreeSet::new();
        for chunk in keys.chunks(256) {
            let values = self.inner.get_many(thread, chunk).await?;
            for (key, value) in chunk.iter().zip(values) {
                let Some(value) = value.filter(|v| looks_sealed(v)) else {
                    continue;
                };
                let parsed = parse(&value, key)?;
                if parsed.key_id == tk.active {
                    open(thread, key, active, &parsed)?;
                } else {
                    still.insert(parsed.key_id.to_owned());
                }
            }
        }
        Ok(still)
    }
}
