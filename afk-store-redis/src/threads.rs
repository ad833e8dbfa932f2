//! Enumerating threads: the store's thread index `{<prefix>}#threads`, a sorted set of thread
//! ids (all with score 0, so ordered by id), listed with `ZRANGEBYLEX` one page per call.
//!
//! The index is kept by the stamped membership protocol of `stamped.rs` ([`Set::Threads`]),
//! whose proof covers it: the held key is the thread's key index `{<prefix>:T}#index`, which
//! exists exactly while the thread holds a key.
//!
//! **Adding.** `claim` adds the thread (`ZADD NX`, in [`ADD`](crate::stamped::ADD)) *before*
//! its claim script runs, and every key of a thread is written by a claim or by a commit that
//! needs one, so every thread that holds a key is in the index. The claim script is the
//! filling: it answers the thread's generation `g`, and when the claim's `ZADD` saw a stamp
//! below `2g` the claim sends the add stamped `2g + 1` (`store::must_add_again`).
//!
//! **Removing.** When `delete_run` or `delete` leaves a thread with no key (its key index is
//! gone), the deleting script raises the generation and the deleter sends the stamped removal,
//! then adds the thread back if a claim made it hold keys meanwhile
//! ([`forget`]).
//!
//! Every claim fills the thread (its script writes the fence), so no claim leaves an empty
//! thread indexed, with one leftover: a claim that fails between its `ZADD` and its script;
//! `list_threads` hides it and [`rebuild`] removes it. Cost: a claim's round trips are
//! unchanged (a third only right after a racing emptying); a delete that empties a thread
//! takes two more.
//!
//! Data written before the index existed, or left behind by an index edited by hand, is brought
//! back in line by [`rebuild`] (`SCAN` of every primary for thread key indexes, then removal of
//! members whose thread holds nothing). Listing still checks each listed thread's key index
//! (one `EXISTS` per thread, sent concurrently), so a thread whose keys all expired (TTL) is not
//! listed before a rebuild removes it.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};

use crate::config::RedisConfig;
use crate::conn::Client;
use crate::scripts::Scripts;
use crate::stamped::{Set, Update, forget, held, mark_empty, update};

pub use crate::stamped::FORGOTTEN_TTL_MS;

/// The physical key of the thread index.
fn threads_key(cfg: &RedisConfig) -> Vec<u8> {
    Set::Threads.key(cfg)
}

/// The thread's own key index (as `store.rs` names it).
fn thread_index(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    Set::Threads.held_key(cfg, thread)
}

/// What [`RedisStore::rebuild_thread_index`](crate::RedisStore::rebuild_thread_index) changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexRebuild {
    /// Threads holding keys that were missing from the index (written before it existed).
    pub added: u64,
    /// Index members whose thread held nothing, removed.
    pub removed: u64,
}

/// Bring the thread index in line with the data: add every thread that has a key index (found
/// with `SCAN` on every primary), remove every member whose thread holds nothing.
pub(crate) async fn rebuild(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
) -> Result<IndexRebuild> {
    let head = format!("{{{}:", cfg.prefix);
    let pattern = format!("{}*}}#index", glob_escape(&head));
    let mut found = Vec::new();
    for key in client.scan_primaries(&pattern).await? {
        let Some(id) = key
            .strip_prefix(head.as_str())
            .and_then(|k| k.strip_suffix("}#index"))
        else {
            continue;
        };
        if ThreadId::new(id).is_ok() {
            found.push(id.to_owned());
        }
    }
    let mut out = IndexRebuild::default();
    for id in &found {
        // Stamped like a remover's add back, so an emptying racing the rebuild wins.
        if let Some(h) = held(client, scripts, cfg, Set::Threads, id).await?
            && update(client, scripts, cfg, Set::Threads, id, Update::Add(h)).await? == Some(true)
        {
            out.added += 1;
        }
    }
    let mut cursor: Option<String> = None;
    loop {
        let min = cursor.as_ref().map_or("-".to_owned(), |c| format!("({c}"));
        let mut cmd = redis::cmd("ZRANGEBYLEX");
        cmd.arg(threads_key(cfg))
            .arg(min)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(500);
        let ids: Vec<String> = client.query(&cmd, "read the thread index").await?;
        let Some(last) = ids.last().cloned() else {
            break;
        };
        for id in ids {
            let g = mark_empty(client, scripts, cfg, Set::Threads, &id).await?;
            if g > 0 && forget(client, scripts, cfg, Set::Threads, &id, g).await? {
                out.removed += 1;
            }
        }
        cursor = Some(last);
    }
    Ok(out)
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The threads after `cursor` (a thread id, exclusive), sorted by id, at most `limit`, without
/// those that hold no key any more.
pub(crate) async fn list_threads(
    client: &Client,
    cfg: &RedisConfig,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ThreadPage> {
    let limit = thread_list_limit(limit);
    let min = match cursor {
        Some(c) => {
            let c = ThreadId::new(c)
                .map_err(|e| Error::invalid_input(format!("bad thread cursor: {e}")))?;
            format!("({c}")
        }
        None => "-".to_owned(),
    };
    let mut cmd = redis::cmd("ZRANGEBYLEX");
    cmd.arg(threads_key(cfg))
        .arg(min)
        .arg("+")
        .arg("LIMIT")
        .arg(0)
        .arg(limit + 1);
    let mut ids: Vec<String> = client.query(&cmd, "list the thread index").await?;
    let more = ids.len() > limit;
    ids.truncate(limit);
    let next_cursor = if more { ids.last().cloned() } else { None };
    let checks = ids.iter().map(|id| async move {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(thread_index(cfg, id));
        client.query::<i64>(&cmd, "check a listed thread").await
    });
    let live = futures::future::try_join_all(checks).await?;
    let mut threads = Vec::with_capacity(ids.len());
    for (id, n) in ids.iter().zip(live) {
        if n == 0 {
            continue;
        }
        match ThreadId::new(id.as_str()) {
            Ok(t) => threads.push(t),
            Err(_) => tracing::warn!(member = %id, "redis: thread index member is no thread id"),
        }
    }
    Ok(ThreadPage {
        threads,
        next_cursor,
    })
}

#[cfg(test)]
mod tests;
