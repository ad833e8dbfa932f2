//! Writing a run's records: checkpoint records with the latest pointer, effect rows and the
//! append-only transcript log, all as fenced commits under the run's claim epoch.

use std::sync::Arc;

use std::time::Duration;

use super::clock::Clock;
use super::lease::Lease;
use super::state::RunState;
use crate::error::Result;
use crate::hash::EffectHashes;
use crate::ids::{RunId, ThreadId};
use crate::keys;
use serde::Serialize;

use crate::schema::{
    EffectRowRef, Extra, MarkState, Message, Phase, PhasePayload, ResponseEncodings,
    SubagentExecution, ToolExecution, TranscriptRef, encode_entry, encode_record,
};
use crate::store::{Commit, Epoch, Store};
use crate::writer::Writer;

/// One key and its bytes, part of a commit.
pub(super) type Put = (String, Vec<u8>);

/// The writer of one run (one process's claim on it).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    store: Arc<dyn Store>,
    writer: Writer,
    clock: Arc<dyn Clock>,
    flush_timeout: Duration,
    pub thread: ThreadId,
    pub run: RunId,
    pub epoch: Epoch,
    /// Entries in the transcript log that the current snapshot chain covers.
    log_len: u64,
    /// Messages those entries hold.
    log_messages: u64,
    /// Tool execution records those entries hold.
    log_tools: u64,
    /// Subagent execution records those entries hold.
    log_subagents: u64,
    /// Digest of the last entry.
    log_digest: String,
    /// Steps after this one are begun by this claim, so they hold no effect row this claim
    /// did not write; `None`: any step may (the default, e.g. a run AFK Python wrote).
    fresh_after: Option<u64>,
    /// Number of commits made (for tests and metrics).
    pub commits: u64,
    /// Bytes to reserve for the next record of each phase (by `Phase as usize`): the size of
    /// the last one, so encoding does not grow its buffer several times per record.
    size_hints: [usize; PHASE_COUNT],
    /// Bytes to reserve for the next effect row, from the size of the last one.
    effect_hint: usize,
    /// The encoding of the model answer this run's snapshots share (written once per answer).
    responses: ResponseEncodings,
    /// The run's entry in the index of runs that need attention, and its lease.
    lease: Lease,
    /// How the thread's effect hashes are computed, as the store said at the claim.
    hashes: EffectHashes,
}

/// The number of [`Phase`] variants.
const PHASE_COUNT: usize = 12;

impl Drop for Checkpointer {
    /// A run's task that ends without its terminal flush (aborted, or stopped by an error
    /// before it) leaves its queued commits to the writer: they are written at once rather
    /// than held, as they were before the writer held commits, so a later claim in this
    /// process sees the store as the aborted attempt left it sooner.
    fn drop(&mut self) {
        self.writer.release(&self.thread, &self.run, self.epoch);
    }
}

impl Checkpointer {
    #[allow(clippy::too_many_arguments)] // one call site, in `start`, naming each
    pub(super) fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        clock: Arc<dyn Clock>,
        flush_timeout: Duration,
        thread: ThreadId,
        run: RunId,
        epoch: Epoch,
        lease: Lease,
        hashes: EffectHashes,
    ) -> Self {
        Checkpointer {
            lease,
            hashes,
            store,
            writer,
            clock,
            flush_timeout,
            thread,
            run,
            epoch,
            log_len: 0,
            log_messages: 0,
            log_tools: 0,
            log_subagents: 0,
            log_digest: String::new(),
            fresh_after: None,
            commits: 0,
            size_hints: [256; PHASE_COUNT],
            effect_hint: 384,
            responses: ResponseEncodings::default(),
        }
    }

    /// Declare that the steps after `step` are begun by this claim: a fresh run (`step` 0), or
    /// a v2 run resumed from its newest snapshot at `step`. Sound because of per-run order: an
    /// effect row of step n is committed after step n's snapshot, so the newest snapshot of a
    /// v2 run is at or past every step with a row, and a fresh run has none.
    pub(super) fn steps_fresh_after(&mut self, step: u64) {
        self.fresh_after = Some(step);
    }

    /// Whether effect rows of `step` may exist that this claim did not write (then the batch
    /// reads the journal before running anything).
    pub(super) fn journal_may_hold(&self, step: u64) -> bool {
        self.fresh_after.is_none_or(|fresh| step <= fresh)
    }

    /// Whether the run's snapshots reference the transcript log (a v2 run of this version).
    pub(super) fn logged(&self) -> bool {
        self.log_len > 0
    }

    /// Continue the log after a restore from a snapshot that referenced `tref`.
    pub(super) fn continue_log(&mut self, tref: Option<&TranscriptRef>) {
        if let Some(t) = tref {
            self.log_len = t.len;
            self.log_messages = t.message_count;
            self.log_tools = t.tool_count;
            self.log_subagents = t.subagent_count;
            self.log_digest = t.digest.clone();
        }
    }

    /// How the thread's effect hashes are computed (keyed in a sealed store).
    pub(super) fn hashes(&self) -> &EffectHashes {
        &self.hashes
    }

    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A commit of this run's claim, carrying the run's index entry when it changed or its
    /// lease is due for renewal, or `Closed` when it ends the run (`closing`).
    async fn new_commit(&self, puts: Vec<Put>, latest: Option<Vec<u8>>, closing: bool) -> Commit {
        Commit {
            thread: self.thread.clone(),
            run: self.run.clone(),
            epoch: self.epoch,
            puts,
            latest,
            attention: self.lease.attach(closing).await,
        }
    }

    /// Name the agent, the run's nesting depth and its parent in the run's index entry (the
    /// fields of `like`).
    pub(super) async fn describe(&self, like: &crate::schema::RunMark) {
        self.lease.describe(like).await;
    }

    /// Name in the run's index entry what its current entry names (for a writer that does not
    /// run the agent: the operator's answers). A store without the index, or without an entry
    /// for the run, leaves the entry as it is.
    pub(super) async fn describe_as_stored(&self) -> Option<crate::schema::RunMark> {
        let Ok(Some(bytes)) = self.store.attention(&self.thread, &self.run).await else {
            return None;
        };
        let m = crate::schema::RunMark::decode(&bytes)?;
        self.describe(&m).await;
        Some(m)
    }

    /// Hold the run: its entry says `running` under this runner's lease from the next commit
    /// on, renewed by commits and by a timer until the run stops or ends.
    pub(super) async fn hold(&mut self) {
        self.lease.set(MarkState::Running, 0).await;
        let (thread, run) = (self.thread.clone(), self.run.clone());
        self.lease
            .start_timer(self.writer.clone(), thread, run, self.epoch);
    }

    /// Record that a resume by the agent of fingerprint `refused` was refused: the entry
    /// waits for a human and names the run's own agent. Only the entry changes (an empty
    /// commit), flushed.
    pub(super) async fn refused(
        &mut self,
        stored: &crate::schema::AgentIdentity,
        refused: &str,
    ) -> Result<()> {
        self.lease
            .refuse(&stored.name, &stored.version, refused)
            .await;
        self.commit(Vec::new(), None, false).await?;
        self.flush().await
    }

    /// Record that the run now stands in `state` (letting go of it unless `running`): an
    /// empty commit carrying the new entry, queued after everything before it.
    pub(super) async fn mark(&mut self, state: MarkState, not_before_ms: u64) -> Result<()> {
        self.lease.set(state, not_before_ms).await;
        self.commit(Vec::new(), None, false).await
    }

    async fn commit(
        &mut self,
        puts: Vec<Put>,
        latest: Option<Vec<u8>>,
        coalescible: bool,
    ) -> Result<()> {
        let c = self.new_commit(puts, latest, false).await;
        self.writer.submit(c, coalescible).await?;
        self.commits += 1;
        Ok(())
    }

    /// The bytes of this run's record at `step` for `phase` with `payload` (borrowed: written
    /// as it is, not copied into a record first).
    pub(super) fn encode<P: Serialize>(
        &mut self,
        step: u64,
        phase: Phase,
        payload: &P,
    ) -> Result<Vec<u8>> {
        let hint = self.size_hints.get(phase as usize).copied().unwrap_or(256);
        let now = self.clock.now_ms();
        let (run, thread) = (&self.run, &self.thread);
        let bytes = self
            .responses
            .scope(|| encode_record(run, thread, step, phase, now, payload, hint))?;
        // Room for the counters and texts of the next record of this phase to grow a little.
        // Records of one phase alternate in size (a mid-step snapshot carries the pending
        // answer, the end-of-step one does not): the room of the larger is kept, or every
        // larger one would outgrow its buffer and be copied into one twice its size. It
        // shrinks when the records got much smaller.
        if let Some(h) = self.size_hints.get_mut(phase as usize) {
            let next = bytes.len() + bytes.len() / 8;
            if next > *h || next < *h / 2 {
                *h = next;
            }
        }
        Ok(bytes)
    }

    /// Commit a checkpoint record at `checkpoint:<run>:<step>:<phase>` and move the latest
    /// pointer to it, atomically.
    pub(super) async fn checkpoint(&mut self, step: u64, payload: PhasePayload) -> Result<()> {
        self.checkpoint_with(step, &payload, true).await
    }

    /// Commit a checkpoint record (written from the caller's payload as it is); move the
    /// latest pointer only if `move_latest`.
    pub(super) async fn checkpoint_with(
        &mut self,
        step: u64,
        payload: &PhasePayload,
        move_latest: bool,
    ) -> Result<()> {
        let phase = payload.phase();
        let bytes = self.encode(step, phase, payload)?;
        self.put_record(step, phase, bytes, move_latest).await
    }

    /// Commit a runtime snapshot record (bytes from [`Checkpointer::encode`]) and move the
    /// latest pointer to it.
    pub(super) async fn put_snapshot(&mut self, step: u64, bytes: Vec<u8>) -> Result<()> {
        self.put_record(step, Phase::RuntimeState, bytes, true)
            .await
    }

    async fn put_record(
        &mut self,
        step: u64,
        phase: Phase,
        bytes: Vec<u8>,
        move_latest: bool,
    ) -> Result<()> {
        let key = keys::checkpoint_key(&self.run, step, phase);
        tracing::trace!(run = %self.run, step, phase = %phase, "checkpoint");
        if !move_latest {
            return self
                .commit(vec![(key, bytes)], None, phase == Phase::RuntimeState)
                .await;
        }
        // The pointer's copy of the record is made by the writer, only for a record that is
        // still the newest when its commit is written.
        let closing = phase == Phase::RunTerminal;
        let c = self.new_commit(vec![(key, bytes)], None, closing).await;
        self.writer.submit_record(c).await?;
        self.commits += 1;
        Ok(())
    }

    /// Commit a runtime snapshot of `st` (transcript log first, then the record with the
    /// pointer). The log entry carries the messages and records the step added; the snapshot
    /// carries neither.
    pub(super) async fn snapshot(&mut self, st: &mut RunState, active_ms: u64) -> Result<()> {
        let step = st.snap.step;
        let tref = self
            .sync_transcript(
                step,
                &st.messages,
                &st.tool_executions,
                &st.subagent_executions,
            )
            .await?;
        let bytes = self.snapshot_record(st, tref, active_ms)?;
        self.put_snapshot(step, bytes).await
    }

    /// The bytes of the `runtime_state` record of `st` at its step, referencing the log
    /// `tref`.
    pub(super) fn snapshot_record(
        &mut self,
        st: &mut RunState,
        tref: TranscriptRef,
        active_ms: u64,
    ) -> Result<Vec<u8>> {
        let step = st.snap.step;
        let snap = st.snapshot(self.thread.as_str(), active_ms, tref);
        self.encode(step, Phase::RuntimeState, snap)
    }

    /// Append the messages and records not yet in the log as one entry (if there are any) and
    /// return the reference a snapshot must carry.
    ///
    /// `messages`, `tools` and `subagents` are the run's whole lists; they only ever grow, so
    /// what is new is their tail past the counts the log already holds. Records restored
    /// inline from an older snapshot (AFK v1, or v2 before records moved into the log) are not
    /// in the log yet and go into the next entry, so from then on the log holds them all.
    pub(super) async fn sync_transcript(
        &mut self,
        step: u64,
        messages: &[Message],
        tools: &[ToolExecution],
        subagents: &[SubagentExecution],
    ) -> Result<TranscriptRef> {
        let (entry, tref) = self.log_entry(step, messages, tools, subagents)?;
        if let Some(put) = entry {
            self.commit(vec![put], None, false).await?;
        }
        Ok(tref)
    }

    /// The log entry (key and bytes) holding what is not in the log yet, if anything is new,
    /// and the reference a snapshot must carry once that entry is committed. Counts the entry
    /// as part of the log: the caller commits it (alone, or with the run's first records).
    pub(super) fn log_entry(
        &mut self,
        step: u64,
        messages: &[Message],
        tools: &[ToolExecution],
        subagents: &[SubagentExecution],
    ) -> Result<(Option<Put>, TranscriptRef)> {
        let tail = |have: u64, len: usize| usize::try_from(have).unwrap_or(usize::MAX).min(len);
        let new_messages = &messages[tail(self.log_messages, messages.len())..];
        let new_tools = &tools[tail(self.log_tools, tools.len())..];
        let new_subagents = &subagents[tail(self.log_subagents, subagents.len())..];
        let mut put = None;
        if !(new_messages.is_empty() && new_tools.is_empty() && new_subagents.is_empty()) {
            let (bytes, digest) = encode_entry(
                self.log_len,
                step,
                new_messages,
                new_tools,
                new_subagents,
                &self.log_digest,
            )?;
            put = Some((keys::messages_key(&self.run, self.log_len), bytes));
            self.log_len += 1;
            self.log_messages += new_messages.len() as u64;
            self.log_tools += new_tools.len() as u64;
            self.log_subagents += new_subagents.len() as u64;
            self.log_digest = digest;
        }
        let tref = TranscriptRef {
            len: self.log_len,
            message_count: self.log_messages,
            tool_count: self.log_tools,
            subagent_count: self.log_subagents,
            skill_read_count: 0,
            skill_command_count: 0,
            digest: self.log_digest.clone(),
            extra: Extra::new(),
        };
        Ok((put, tref))
    }

    /// The first commit of a fresh v2 run, one atomic commit: its `run_started` record, the
    /// transcript log's first entry (`entry`, from [`Checkpointer::log_entry`]: the system and
    /// user messages, the run's input) and the step-0 snapshot that references it (`snapshot`,
    /// its record's bytes), with the latest pointer on the snapshot. From this commit on the
    /// run is resumable: a resume restores the step-0 snapshot and runs step 1 exactly as the
    /// fresh run would have (there is no commit of a v2 run after which `resume` finds no
    /// snapshot).
    pub(super) async fn first_commit(
        &mut self,
        started: PhasePayload,
        entry: Option<Put>,
        snapshot: Vec<u8>,
    ) -> Result<()> {
        self.first_commit_at(0, started, entry, snapshot).await
    }

    /// [`Checkpointer::first_commit`] with the snapshot of step `step` (a fork's: the step
    /// before its first).
    pub(super) async fn first_commit_at(
        &mut self,
        step: u64,
        started: PhasePayload,
        entry: Option<Put>,
        snapshot: Vec<u8>,
    ) -> Result<()> {
        let phase = started.phase();
        let mut puts = vec![(
            keys::checkpoint_key(&self.run, 0, phase),
            self.encode(0, phase, &started)?,
        )];
        puts.extend(entry);
        puts.push((
            keys::checkpoint_key(&self.run, step, Phase::RuntimeState),
            snapshot.clone(),
        ));
        tracing::trace!(run = %self.run, "first commit");
        self.commit(puts, Some(snapshot), false).await
    }

    /// Commit an effect row under its key (`keys::effect_key`; no pointer move).
    pub(super) async fn effect(&mut self, key: String, row: EffectRowRef<'_>) -> Result<()> {
        let mut bytes = Vec::with_capacity(self.effect_hint);
        serde_json::to_writer(&mut bytes, &row)
            .map_err(|e| crate::Error::unexpected(format!("cannot encode effect row: {e}")))?;
        // Room for the next row (a result row is larger than its intent) to fit at once.
        self.effect_hint = bytes.len() + bytes.len() / 2;
        self.commit(vec![(key, bytes)], None, false).await
    }

    /// Tell the store the run has ended (its terminal record is durable), so that its
    /// retention applies from now on (see `Store::finish_run`). A failure is logged, not
    /// returned: the result is durable, and a later resume of the ended run tells the store
    /// again.
    pub(super) async fn finished(&self) {
        if let Err(e) = self
            .store
            .finish_run(&self.thread, &self.run, self.epoch)
            .await
        {
            tracing::warn!(run = %self.run, error = %e, "could not mark the run finished in the store");
        }
    }

    /// Wait until everything submitted for the run is durable (before a side effect).
    pub(super) async fn barrier(&mut self) -> Result<()> {
        self.writer
            .barrier(&self.thread, &self.run, self.epoch)
            .await
    }

    /// The terminal flush: [`Checkpointer::barrier`] bounded by the flush timeout.
    pub(super) async fn flush(&mut self) -> Result<()> {
        self.writer
            .flush(&self.thread, &self.run, self.epoch, self.flush_timeout)
            .await
    }
}
