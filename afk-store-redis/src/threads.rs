//! Enumerating threads: the store's thread index `{<prefix>}#threads`, a sorted set of thread
//! ids (all with score 0, so ordered by id), listed with `ZRANGEBYLEX` one page per call.
//!
//! **Adding.** `claim` adds the thread (`ZADD NX`, in the [`ADD`] script) *before* its claim
//! script runs, and every key of a thread is written by a claim or by a commit that needs one,
//! so every thread that holds a key is in the index. The index lives in its own hash slot
//! (`{<prefix>}`), apart from the threads' slots, so on Cluster it cannot join the claim's
//! script: it is a separate round trip.
//!
//! **Removing.** When `delete_run` or `delete` leaves a thread with no key (its key index
//! `{<prefix>:T}#index` is gone), the thread is removed from the index. Because removal and a
//! new claim of the same thread run in two slots, it is a small protocol, safe against a claim
//! racing it:
//! 1. the delete script itself, seeing the thread empty, sets the marker `{<prefix>:T}#forgetting`;
//! 2. [`FORGET`] (index slot): `ZREM` the thread and `INCR {<prefix>}#threads:removals` → `G`;
//! 3. [`FORGOTTEN`] (thread slot): delete the marker, record `G` in `{<prefix>:T}#forgotten`
//!    (expires after [`FORGOTTEN_TTL_MS`]); if the thread holds a key again (a claim ran
//!    meanwhile), answer so and the remover adds the thread back (`ZADD NX`).
//!
//! A claim's [`ADD`] returns the removal counter `c` it saw; its claim script answers "add
//! again" when the marker exists (a removal is between 1 and 3, or its remover died there) or
//! when `#forgotten` > `c` (a removal's `ZREM` came after this claim's `ZADD`), and the claim
//! then sends `ZADD NX` once more. Any interleaving ends with the thread listed if it holds a
//! key: a claim script before step 1 makes the thread non-empty (no removal); between 1 and 3 it
//! sees the marker, and step 3 sees the key; after 3 it sees `G > c` unless its `ZADD` came
//! after the `ZREM`. Cost: a claim's round trips are unchanged (the `ZADD` was already one; a
//! third only right after a racing removal); a delete that empties a thread takes two more.
//!
//! Data written before the index existed, or left behind by an index edited by hand, is brought
//! back in line by [`rebuild`] (`SCAN` of every primary for thread key indexes, then removal of
//! members whose thread holds nothing). Listing still checks each listed thread's key index
//! (one `EXISTS` per thread, sent concurrently), so a thread whose keys all expired (TTL) is not
//! listed before a rebuild removes it.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};

use crate::config::RedisConfig;
use crate::conn::{Client, Repeat};
use crate::scripts::Scripts;

/// How long a thread's last removal is remembered for racing claims: 24 hours. A claim is
/// two round trips sent one after the other; only a process paused between them for longer
/// could miss a removal.
pub const FORGOTTEN_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Add a thread to the index; return the removal counter. KEYS: threads, removals. ARGV: id.
pub(crate) const ADD: &str = r#"
redis.call('ZADD', KEYS[1], 'NX', 0, ARGV[1])
return tonumber(redis.call('GET', KEYS[2]) or '0')
"#;

/// Remove a thread from the index; return the new removal counter. KEYS: threads, removals.
/// ARGV: id.
pub(crate) const FORGET: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])
"#;

/// Step 3 of a removal. KEYS: thread key index, marker, forgotten. ARGV: G, ttl ms. Returns 1
/// when the thread holds keys again (the remover adds it back), else 0.
pub(crate) const FORGOTTEN: &str = r#"
redis.call('DEL', KEYS[2])
local r = tonumber(redis.call('GET', KEYS[3]) or '0')
if tonumber(ARGV[1]) > r then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
return redis.call('EXISTS', KEYS[1])
"#;

/// Step 1 outside a delete (for [`rebuild`]): set the marker when the thread holds nothing.
/// KEYS: thread key index, marker. Returns 1 when the thread is empty (marker set).
pub(crate) const MARK_EMPTY: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[2], '1')
return 1
"#;

/// The physical key of the thread index.
fn threads_key(cfg: &RedisConfig) -> Vec<u8> {
    format!("{{{}}}#threads", cfg.prefix).into_bytes()
}

/// The removal counter, beside the thread index (same slot).
fn removals_key(cfg: &RedisConfig) -> Vec<u8> {
    format!("{{{}}}#threads:removals", cfg.prefix).into_bytes()
}

/// The thread's own key index (as `store.rs` names it).
fn thread_index(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#index", cfg.prefix, thread).into_bytes()
}

/// The marker of a removal in progress, in the thread's slot.
pub(crate) fn marker_key(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#forgetting", cfg.prefix, thread).into_bytes()
}

/// The removal counter of the thread's last removal, in the thread's slot.
pub(crate) fn forgotten_key(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#forgotten", cfg.prefix, thread).into_bytes()
}

/// Add `thread` to the thread index (before anything of it is written); returns the removal
/// counter the claim script compares with.
pub(crate) async fn remember(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &ThreadId,
) -> Result<u64> {
    client
        .eval(
            &scripts.index_add,
            &[threads_key(cfg), removals_key(cfg)],
            &[thread.as_str().as_bytes().to_vec()],
            // ZADD NX and a read: sending it twice is sending it once.
            Repeat::Safe,
            "add the thread to the thread index",
        )
        .await
}

/// `ZADD NX` alone (after a claim learnt that a removal raced it).
pub(crate) async fn add_again(client: &Client, cfg: &RedisConfig, thread: &str) -> Result<()> {
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(threads_key(cfg)).arg("NX").arg(0).arg(thread);
    let _: i64 = client
        .query(&cmd, "add the thread to the thread index again")
        .await?;
    Ok(())
}

/// Steps 2 and 3 of a removal (step 1, the marker, is set by the caller's script, which saw the
/// thread empty). Returns whether the thread stayed removed.
pub(crate) async fn forget(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
) -> Result<bool> {
    let g: u64 = client
        .eval(
            &scripts.index_forget,
            &[threads_key(cfg), removals_key(cfg)],
            &[thread.as_bytes().to_vec()],
            Repeat::Never,
            "remove the thread from the thread index",
        )
        .await?;
    let back: i64 = client
        .eval(
            &scripts.index_forgotten,
            &[
                thread_index(cfg, thread),
                marker_key(cfg, thread),
                forgotten_key(cfg, thread),
            ],
            &[
                g.to_string().into_bytes(),
                FORGOTTEN_TTL_MS.to_string().into_bytes(),
            ],
            Repeat::Safe,
            "finish removing the thread from the thread index",
        )
        .await?;
    if back == 1 {
        add_again(client, cfg, thread).await?;
    }
    Ok(back == 0)
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
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(threads_key(cfg)).arg("NX").arg(0).arg(id);
        let added: i64 = client
            .query(&cmd, "add a thread to the thread index")
            .await?;
        out.added += added.unsigned_abs();
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
            let empty: i64 = client
                .eval(
                    &scripts.index_mark_empty,
                    &[thread_index(cfg, &id), marker_key(cfg, &id)],
                    &[],
                    Repeat::Safe,
                    "check a listed thread",
                )
                .await?;
            if empty == 1 && forget(client, scripts, cfg, &id).await? {
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
#[path = "threads_race_tests.rs"]
mod race_tests;

#[cfg(test)]
mod tests {
    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(super::glob_escape("{a*b?[c]\\:"), "{a\\*b\\?\\[c\\]\\\\:");
    }
}
