//! The index of runs that need attention ([`Store::list_attention`](afk_core::store::Store::list_attention)),
//! in the store's reserved key space ([`RESERVED`](crate::layout::RESERVED)):
//!
//! ```text
//! 0xff "attention" 0x00 <thread id> 0x00 <run id>   ->   the entry of the run's last Open
//! ```
//!
//! Ids never hold 0x00, so the byte order of these keys is the order of the pairs
//! `(thread, run)` (`thread_1`'s runs before `thread_10`'s), and a listing is one bounded
//! iterator that seeks to the cursor's pair: it reads the runs it lists and nothing else,
//! whatever the number of finished runs (they have no key here).
//!
//! A commit's entry goes into the same `WriteBatch` as its records and pointer, after the fence
//! check under the run's lock ([`stage`]): a refused commit writes no entry, and no crash or
//! reader sees the entry without its commit or the commit without its entry (RocksDB applies a
//! batch atomically, and recovers it from the write-ahead log whole or not at all).
//! [`Attention::Closed`] deletes the key, `delete_run` deletes it in the run's batch.
//! A database written before the index existed simply has no such keys: nothing to migrate.

use afk_core::store::{
    Attention, AttentionPage, AttentionRun, Commit, attention_cursor, attention_list_limit,
    parse_attention_cursor,
};
use afk_core::{Error, Result, RunId, ThreadId};
use rocksdb::{ReadOptions, WriteBatch};

use crate::error::{Op, map};
use crate::layout::{SEP, prefix_end, reserved_prefix, reserved_range};
use crate::ops::Inner;

/// The prefix of every key of the index.
fn prefix() -> Vec<u8> {
    reserved_prefix("attention")
}

/// The index's whole key range, `[start, end)`.
pub(crate) fn range() -> (Vec<u8>, Vec<u8>) {
    reserved_range("attention")
}

/// The key of `(thread, run)` in the index.
pub(crate) fn key(thread: &ThreadId, run: &RunId) -> Vec<u8> {
    let mut k = prefix();
    k.reserve(thread.as_str().len() + 1 + run.as_str().len());
    k.extend_from_slice(thread.as_str().as_bytes());
    k.push(SEP);
    k.extend_from_slice(run.as_str().as_bytes());
    k
}

/// The `(thread, run)` of a key of the index.
fn decode(inner: &Inner, k: &[u8]) -> Result<(ThreadId, RunId)> {
    let bad = || {
        Error::corrupt(format!(
            "RocksDB attention index key that is not <thread> 0x00 <run> in {}",
            inner.path.display()
        ))
    };
    let rest = k.get(prefix().len()..).ok_or_else(bad)?;
    let sep = rest.iter().position(|b| *b == SEP).ok_or_else(bad)?;
    let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| bad());
    let thread = ThreadId::new(text(&rest[..sep])?).map_err(|_| bad())?;
    let run = RunId::new(text(&rest[sep + 1..])?).map_err(|_| bad())?;
    Ok((thread, run))
}

/// Add the index change `commit` carries to `batch`, which holds the commit's records. Called
/// only for a commit that passed its checks and its fence, under the run's lock.
/// A closing commit also enters its run into the index of finished runs (`finished.rs`).
pub(crate) fn stage(batch: &mut WriteBatch, commit: &Commit) {
    match &commit.attention {
        Some(Attention::Open(entry)) => batch.put(key(&commit.thread, &commit.run), entry),
        Some(Attention::Closed) => {
            batch.delete(key(&commit.thread, &commit.run));
            crate::finished::stage_closed(batch, commit, afk_core::store::store_now_ms());
        }
        None => {}
    }
}

/// The entry of one run: a point read.
pub(crate) fn get(inner: &Inner, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
    inner
        .db
        .get(key(thread, run))
        .map_err(|e| map(e, Op::Read, &inner.path))
}

/// The runs after `cursor` (an [`attention_cursor`]), in `(thread, run)` order, at most
/// `limit`: one iterator over the index, from the cursor's pair on.
pub(crate) fn list(inner: &Inner, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
    let limit = attention_list_limit(limit);
    let lower = prefix();
    let upper =
        prefix_end(&lower).ok_or_else(|| Error::unexpected("index prefix has no upper bound"))?;
    // The key right after the cursor's pair: no key lies between `k` and `k 0x00`.
    let start = match cursor {
        Some(c) => {
            let (thread, run) = parse_attention_cursor(c)?;
            let mut k = key(&thread, &run);
            k.push(0);
            k
        }
        None => lower.clone(),
    };
    let mut opts = ReadOptions::default();
    opts.set_iterate_lower_bound(lower);
    opts.set_iterate_upper_bound(upper);
    let mut it = inner.db.raw_iterator_opt(opts);
    it.seek(&start);
    let mut runs = Vec::with_capacity(limit.min(64));
    let mut more = false;
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        if runs.len() == limit {
            more = true;
            break;
        }
        let (thread, run) = decode(inner, k)?;
        runs.push(AttentionRun {
            thread,
            run,
            entry: v.to_vec(),
        });
        it.next();
    }
    it.status().map_err(|e| map(e, Op::Read, &inner.path))?;
    let next_cursor = match runs.last() {
        Some(last) if more => Some(attention_cursor(&last.thread, &last.run)),
        _ => None,
    };
    Ok(AttentionPage { runs, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_sort_as_their_pairs_and_outside_every_thread() {
        let id = |t: &str, r: &str| {
            key(
                &ThreadId::new(t).expect("valid id"),
                &RunId::new(r).expect("valid id"),
            )
        };
        assert!(id("thread_1", "z") < id("thread_10", "a"));
        assert!(id("t", "run_1") < id("t", "run_10"));
        assert!(id("t", "run_1") < id("t", "run_1-x"));
        // After every thread's keys: a thread id is ASCII.
        let last_thread = ThreadId::new("z".repeat(128)).expect("valid id");
        assert!(id("a", "b") > crate::layout::physical(&last_thread, "~~~"));
        assert_eq!(id("t", "r"), b"\xffattention\0t\0r".to_vec());
    }
}
