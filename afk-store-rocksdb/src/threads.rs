//! Enumerating threads: one seek per thread. A thread's keys are the physical keys starting with
//! `<thread> 0x00` ([`crate::layout`]); after reading the first key of a thread, the iterator
//! seeks to `<thread> 0x01`, past every other key of that thread, so a listing costs one seek
//! per thread however many keys each holds. The iterator ends before the store's reserved keys
//! ([`RESERVED`]), which belong to no thread.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};
use rocksdb::ReadOptions;

use crate::error::{Op, map};
use crate::layout::{RESERVED, SEP};
use crate::ops::Inner;

/// The threads after `cursor` (a thread id, exclusive), sorted by id, at most `limit`.
pub(crate) fn list_threads(
    inner: &Inner,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ThreadPage> {
    let limit = thread_list_limit(limit);
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(vec![RESERVED]);
    let mut it = inner.db.raw_iterator_opt(opts);
    match cursor {
        Some(c) => {
            let c = ThreadId::new(c)
                .map_err(|e| Error::invalid_input(format!("bad thread cursor: {e}")))?;
            it.seek(past(&c));
        }
        None => it.seek_to_first(),
    }
    let mut threads = Vec::with_capacity(limit.min(64));
    let mut more = false;
    while let Some(k) = it.key() {
        let Some(end) = k.iter().position(|b| *b == SEP) else {
            return Err(Error::corrupt(format!(
                "RocksDB key without a thread separator in {}",
                inner.path.display()
            )));
        };
        let id = std::str::from_utf8(&k[..end])
            .ok()
            .and_then(|s| ThreadId::new(s).ok())
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "RocksDB key with an invalid thread id in {}",
                    inner.path.display()
                ))
            })?;
        if threads.len() == limit {
            more = true;
            break;
        }
        it.seek(past(&id));
        threads.push(id);
    }
    it.status().map_err(|e| map(e, Op::Read, &inner.path))?;
    let next_cursor = if more {
        threads.last().map(|t| t.as_str().to_owned())
    } else {
        None
    };
    Ok(ThreadPage {
        threads,
        next_cursor,
    })
}

/// The smallest physical key after every key of `thread`: `<thread> 0x01`.
fn past(thread: &ThreadId) -> Vec<u8> {
    let mut k = thread.as_str().as_bytes().to_vec();
    k.push(SEP + 1);
    k
}
