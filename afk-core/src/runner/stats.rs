//! The runner's checkpoint statistics, for metrics.

use crate::writer::WriterStats;

/// Counters of a [`Runner`](super::Runner)'s checkpoint writing, since the runner was built,
/// over all its runs (subagent runs included). Read with [`Runner::stats`](super::Runner::stats);
/// cheap (one lock), so a metrics exporter can poll it.
///
/// A "commit" is one checkpoint commit the runner submitted (a record with its latest pointer,
/// an effect row, …). With async writes on, the writer may merge a run's queued commits into
/// one store write, so `written` counts store writes and `durable` counts submitted commits.
///
/// Invariants: `durable <= submitted`; `queued == submitted - written - coalesced - failed`
/// (saturating); once every run has finished (or passed a barrier, as before each side
/// effect) without a write failure, `durable == submitted` and `queued == 0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunnerStats {
    /// Queue depth: commits submitted and not resolved yet (queued or being written).
    pub queued: u64,
    /// Commits submitted by the runs.
    pub submitted: u64,
    /// The durable watermark: submitted commits known durable in the store (written, or merged
    /// into a written commit). Each run's commits become durable in order, so this counts a
    /// prefix of every run's commits.
    pub durable: u64,
    /// Store writes acknowledged (a merged commit counts once).
    pub written: u64,
    /// Commits merged into a newer commit of their run before being written.
    pub coalesced: u64,
    /// Commits that will never be written: failed after retries, or dropped because their run
    /// had failed.
    pub failed: u64,
    /// Store calls that wrote commits: the background writer's `Store::commit_batch` calls, and
    /// the `Store::commit` calls a run's barrier makes itself (every write in sync mode).
    pub batches: u64,
    /// Most commits handed to the store in one call.
    pub max_batch_len: u64,
    /// Of `batches`, the writes a run's barrier (or terminal flush) made itself, on the run's
    /// own task, because the run had no write in flight (async mode).
    pub inline_writes: u64,
    /// Retries of failed store calls made by the writer's retry policy.
    pub retries: u64,
}

impl From<WriterStats> for RunnerStats {
    fn from(s: WriterStats) -> Self {
        RunnerStats {
            queued: s.pending(),
            submitted: s.submitted,
            durable: s.durable,
            written: s.written,
            coalesced: s.coalesced,
            failed: s.failed,
            batches: s.batches,
            max_batch_len: s.max_batch_len,
            inline_writes: s.inline,
            retries: s.retries,
        }
    }
}
