//! The index of finished runs ([`Store::list_finished`](afk_core::store::Store::list_finished)),
//! in the store's reserved key space ([`RESERVED`](crate::layout::RESERVED)):
//!
//! ```text
//! 0xff "finished" 0x00 <finished ms, 20 ASCII digits> 0x00 <thread id> 0x00 <run id>   ->   (empty)
//! ```
//!
//! The time is zero-padded decimal, so the byte order of the keys is the order of the entries
//! `(finished_ms, thread, run)`: a listing below a cutoff is one bounded iterator from the
//! cursor to the key of the cutoff, reading the entries it lists and nothing else.
//!
//! A closing commit's entry goes into the same `WriteBatch` as its records, pointer and the
//! removal of its entry in the index of runs that need attention (see `attention.rs`), stamped
//! with this process's clock at the commit: a refused commit enters nothing, and no crash
//! leaves the run closed without its entry. `delete_run` leaves the entries (they carry a time
//! the run no longer knows); a sweep forgets them.

use afk_core::store::{
    Commit, FINISHED_MS_DIGITS, FinishedPage, FinishedRun, finished_cursor, finished_list_limit,
    parse_finished_cursor,
};
use afk_core::{Error, Result, RunId, ThreadId};
use rocksdb::{ReadOptions, WriteBatch};

use crate::error::{Op, map};
use crate::layout::{SEP, reserved_prefix, reserved_range};
use crate::ops::Inner;

/// The prefix of every key of the index.
fn prefix() -> Vec<u8> {
    reserved_prefix("finished")
}

/// The index's whole key range, `[start, end)`.
pub(crate) fn range() -> (Vec<u8>, Vec<u8>) {
    reserved_range("finished")
}

/// The key of `ms` alone: every entry stamped before `ms` sorts below it, every other one
/// above.
fn time_key(ms: u64) -> Vec<u8> {
    let mut k = prefix();
    k.extend_from_slice(format!("{ms:0width$}", width = FINISHED_MS_DIGITS).as_bytes());
    k
}

/// The key of an entry.
pub(crate) fn key(entry: &FinishedRun) -> Vec<u8> {
    let mut k = time_key(entry.finished_ms);
    k.push(SEP);
    k.extend_from_slice(entry.thread.as_str().as_bytes());
    k.push(SEP);
    k.extend_from_slice(entry.run.as_str().as_bytes());
    k
}

/// The entry of a key of the index.
fn decode(inner: &Inner, k: &[u8]) -> Result<FinishedRun> {
    let bad = || {
        Error::corrupt(format!(
            "RocksDB finished-runs index key that is not <ms> 0x00 <thread> 0x00 <run> in {}",
            inner.path.display()
        ))
    };
    let rest = k.get(prefix().len()..).ok_or_else(bad)?;
    let mut parts = rest.splitn(3, |b| *b == SEP);
    let (Some(ms), Some(thread), Some(run)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| bad());
    if ms.len() != FINISHED_MS_DIGITS || !ms.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    Ok(FinishedRun {
        finished_ms: text(ms)?.parse().map_err(|_| bad())?,
        thread: ThreadId::new(text(thread)?).map_err(|_| bad())?,
        run: RunId::new(text(run)?).map_err(|_| bad())?,
    })
}

/// Enter the run `commit` closes into the index, stamped `now_ms`, in the commit's batch.
pub(crate) fn stage_closed(batch: &mut WriteBatch, commit: &Commit, now_ms: u64) {
    let entry = FinishedRun {
        finished_ms: now_ms,
        thread: commit.thread.clone(),
        run: commit.run.clone(),
    };
    batch.put(key(&entry), b"");
}

/// The entries before `before_ms` after `cursor` (a [`finished_cursor`]), oldest first, at
/// most `limit`: one iterator over the index, bounded by the cutoff.
pub(crate) fn list(
    inner: &Inner,
    before_ms: u64,
    cursor: Option<&str>,
    limit: usize,
) -> Result<FinishedPage> {
    let limit = finished_list_limit(limit);
    let lower = prefix();
    let upper = time_key(before_ms);
    // The key right after the cursor's entry: no key lies between `k` and `k 0x00`.
    let start = match cursor {
        Some(c) => {
            let mut k = key(&parse_finished_cursor(c)?);
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
    while let Some(k) = it.key() {
        if runs.len() == limit {
            more = true;
            break;
        }
        runs.push(decode(inner, k)?);
        it.next();
    }
    it.status().map_err(|e| map(e, Op::Read, &inner.path))?;
    let next_cursor = match runs.last() {
        Some(last) if more => Some(finished_cursor(last)),
        _ => None,
    };
    Ok(FinishedPage { runs, next_cursor })
}

/// Delete the entries' keys in one batch.
pub(crate) fn forget(inner: &Inner, entries: &[FinishedRun]) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut batch = WriteBatch::default();
    for e in entries {
        batch.delete(key(e));
    }
    inner.write(batch)?;
    inner.count_forgotten(entries.len() as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ms: u64, t: &str, r: &str) -> FinishedRun {
        FinishedRun {
            finished_ms: ms,
            thread: ThreadId::new(t).expect("valid id"),
            run: RunId::new(r).expect("valid id"),
        }
    }

    #[test]
    fn index_keys_sort_as_their_entries_and_below_the_cutoff_key() {
        let entries = [
            entry(9, "t", "r"),
            entry(10, "thread_1", "z"),
            entry(10, "thread_10", "a"),
            entry(10, "thread_10", "a-x"),
            entry(11, "a", "a"),
        ];
        for pair in entries.windows(2) {
            assert!(key(&pair[0]) < key(&pair[1]), "{pair:?}");
        }
        assert!(key(&entry(10, "zzz", "zzz")) < time_key(11));
        assert!(key(&entry(11, "a", "a")) > time_key(11));
        let (start, end) = range();
        assert!(key(&entry(u64::MAX, "z", "z")) < end);
        assert!(key(&entry(0, "a", "a")) > start);
        assert_eq!(
            key(&entry(7, "t", "r")),
            b"\xfffinished\x0000000000000000000007\0t\0r".to_vec()
        );
    }
}
