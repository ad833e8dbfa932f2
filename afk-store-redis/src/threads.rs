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
//! `{<prefix>:T}#index` is gone), the thread is removed from the index. Removal and a new claim
//! of the same thread run in two slots, and each side's decision ("the thread is empty", "it
//! holds keys") reaches the index one round trip after it was taken, so two updates can arrive
//! in the other order than they were decided in. Every update of the index beyond the claim's
//! first `ZADD` therefore carries a *stamp* that orders it by decision, and the index applies
//! an update only when its stamp is above the last one applied for that thread
//! (`{<prefix>}#threads:stamp:T`, in the index's slot, see [`SET_IF_NEWER`]):
//! - the thread's slot holds a generation `{<prefix>:T}#gen`, raised by every delete that
//!   empties the thread (to `max(gen + 1, server time in ms)`, so it keeps growing after the
//!   key expired, [`FORGOTTEN_TTL_MS`] after the last emptying);
//! - the removal for the emptying to generation `g` has stamp `2g`; an add decided while the
//!   thread held keys at generation `g` has stamp `2g + 1`: it beats the removal of the
//!   emptying before it and loses to the removal of any emptying after it, whatever order they
//!   arrive in.
//!
//! A removal is: the delete script raises `gen` to `g` ([`next_gen`]); [`SET_IF_NEWER`] with
//! `2g` (`ZREM`); then [`HELD`] in the thread's slot: if the thread holds keys again (a claim ran
//! meanwhile) the remover adds it back with stamp `2h + 1`, `h` the generation it read. A claim
//! sends [`ADD`] (`ZADD NX`, unstamped, returning the stamp `c` the index had), then its claim
//! script; when the thread's generation `g` is set and `c < 2g`, the removal of that emptying
//! may land after the claim's `ZADD`, and the claim sends its own stamped add (`2g + 1`).
//!
//! Why it holds once the operations have finished: *a thread holding keys is listed*: the first
//! claim after the last emptying `g` either `ZADD`ed after that removal was applied (and only
//! older, refused, removals come later) or saw `c < 2g` and sent `2g + 1`, which beats `2g`.
//! *An empty thread is not listed*: the last emptying's removal `2g` is sent; every stamped add
//! was decided while the thread held keys, so at a generation below `g`, and loses to `2g`; an
//! unstamped claim `ZADD` is followed by its claim script, which would make the thread hold a
//! key again. (The one leftover: a claim that fails between its `ZADD` and its script leaves an
//! empty thread indexed; `list_threads` hides it and [`rebuild`] removes it.) The unstamped first
//! `ZADD` keeps "every thread holding a key is indexed" true even while its claim is under way,
//! and the remover's add back covers a claimer killed before its stamped add. Cost: a claim's
//! round trips are unchanged (a third only right after a racing emptying); a delete that
//! empties a thread takes two more. A thread's `#gen` and stamp keys expire
//! [`FORGOTTEN_TTL_MS`] after their last change.
//!
//! Data written before the index existed, or left behind by an index edited by hand, is brought
//! back in line by [`rebuild`] (`SCAN` of every primary for thread key indexes, then removal of
//! members whose thread holds nothing). Listing still checks each listed thread's key index
//! (one `EXISTS` per thread, sent concurrently), so a thread whose keys all expired (TTL) is not
//! listed before a rebuild removes it.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};

use crate::config::RedisConfig;
use crate::conn::{Client, NO_ARGS, Repeat};
use crate::scripts::Scripts;

/// How long a thread's generation and stamp are remembered: 24 hours. A claim is two round
/// trips sent one after the other, a removal three; only a process paused between them for
/// longer could have its update misordered.
pub const FORGOTTEN_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Lua: `next_gen(key)` raises the thread's generation (see the module doc) and returns it.
pub(crate) fn next_gen() -> String {
    format!(
        r#"
local function next_gen(key)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local g = math.max((tonumber(redis.call('GET', key)) or 0) + 1, now)
  redis.call('SET', key, string.format('%.0f', g), 'PX', {FORGOTTEN_TTL_MS})
  return g
end
"#
    )
}

/// A claim's first step: add a thread to the index; return the thread's last applied stamp (0
/// when none). KEYS: threads, stamp. ARGV: id.
pub(crate) const ADD: &str = r#"
redis.call('ZADD', KEYS[1], 'NX', 0, ARGV[1])
return tonumber(redis.call('GET', KEYS[2]) or '0')
"#;

/// A stamped update: add (odd stamp) or remove (even stamp) the thread when the stamp is above
/// the last one applied. KEYS: threads, stamp, removals. ARGV: id, stamp, ttl ms. Returns -1
/// when refused (an update decided later was applied), else what `ZADD`/`ZREM` changed (0/1).
/// An applied removal counts in `removals`.
pub(crate) const SET_IF_NEWER: &str = r#"
local s = tonumber(ARGV[2])
if s <= tonumber(redis.call('GET', KEYS[2]) or '0') then return -1 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
if s % 2 == 1 then
  return redis.call('ZADD', KEYS[1], 'NX', 0, ARGV[1])
end
redis.call('INCR', KEYS[3])
return redis.call('ZREM', KEYS[1], ARGV[1])
"#;

/// In the thread's slot: -1 when the thread holds nothing, else its generation (raised first
/// when it has none, so the add this answer stamps cannot be older than a later emptying).
/// KEYS: thread key index, gen. Preceded by [`next_gen`].
pub(crate) const HELD: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local g = tonumber(redis.call('GET', KEYS[2]))
if not g then g = next_gen(KEYS[2]) end
return g
"#;

/// An emptying outside a delete (for [`rebuild`]): raise the generation when the thread holds
/// nothing. KEYS: thread key index, gen. Returns the new generation, or 0 when the thread holds
/// keys. Preceded by [`next_gen`].
pub(crate) const MARK_EMPTY: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return next_gen(KEYS[2])
"#;

/// The physical key of the thread index.
fn threads_key(cfg: &RedisConfig) -> Vec<u8> {
    format!("{{{}}}#threads", cfg.prefix).into_bytes()
}

/// How many removals from the index were applied, beside the thread index (same slot).
fn removals_key(cfg: &RedisConfig) -> Vec<u8> {
    format!("{{{}}}#threads:removals", cfg.prefix).into_bytes()
}

/// The stamp of the thread's last applied index update, in the index's slot.
fn stamp_key(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}}}#threads:stamp:{}", cfg.prefix, thread).into_bytes()
}

/// The thread's own key index (as `store.rs` names it).
fn thread_index(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#index", cfg.prefix, thread).into_bytes()
}

/// The thread's generation, raised by every emptying, in the thread's slot.
pub(crate) fn gen_key(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#gen", cfg.prefix, thread).into_bytes()
}

/// The KEYS and ARGV of [`ADD`] for `thread`.
pub(crate) fn add_call(cfg: &RedisConfig, thread: &ThreadId) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    (
        vec![threads_key(cfg), stamp_key(cfg, thread.as_str())],
        vec![thread.as_str().as_bytes().to_vec()],
    )
}

/// Add `thread` to the thread index (before anything of it is written); returns the stamp the
/// claim script compares with.
pub(crate) async fn remember(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &ThreadId,
) -> Result<u64> {
    let (keys, args) = add_call(cfg, thread);
    client
        .eval(
            &scripts.index_add,
            &keys,
            &args,
            // ZADD NX and a read: sending it twice is sending it once.
            Repeat::Safe,
            "add the thread to the thread index",
        )
        .await
}

/// Which way a stamped update goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Update {
    /// The thread held keys at this generation.
    Add(u64),
    /// The thread was emptied to this generation.
    Remove(u64),
}

/// Send a stamped update; `None` when the index refused it (a later decision was applied),
/// else whether it changed the index.
pub(crate) async fn update(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
    up: Update,
) -> Result<Option<bool>> {
    let (stamp, what) = match up {
        Update::Add(g) => (2 * g + 1, "add the thread to the thread index again"),
        Update::Remove(g) => (2 * g, "remove the thread from the thread index"),
    };
    let r: i64 = client
        .eval(
            &scripts.index_set_if_newer,
            &[threads_key(cfg), stamp_key(cfg, thread), removals_key(cfg)],
            &[
                thread.as_bytes().to_vec(),
                stamp.to_string().into_bytes(),
                FORGOTTEN_TTL_MS.to_string().into_bytes(),
            ],
            // A second copy carries the same stamp: refused.
            Repeat::Safe,
            what,
        )
        .await?;
    Ok((r >= 0).then_some(r == 1))
}

/// The thread's generation when it holds keys (see [`HELD`]).
pub(crate) async fn held(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
) -> Result<Option<u64>> {
    let g: i64 = client
        .eval(
            &scripts.index_held,
            &[thread_index(cfg, thread), gen_key(cfg, thread)],
            NO_ARGS,
            // Raises a missing generation once; a second copy reads it.
            Repeat::Safe,
            "check whether the thread holds keys",
        )
        .await?;
    Ok(u64::try_from(g).ok())
}

/// A removal after the emptying to generation `g` (the caller's script raised it): the stamped
/// removal, then the add back when the thread holds keys again. Returns whether this removal
/// took the thread out of the index and it stayed out.
pub(crate) async fn forget(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
    g: u64,
) -> Result<bool> {
    let removed = update(client, scripts, cfg, thread, Update::Remove(g)).await?;
    if let Some(h) = held(client, scripts, cfg, thread).await? {
        update(client, scripts, cfg, thread, Update::Add(h)).await?;
        return Ok(false);
    }
    Ok(removed == Some(true))
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
        if let Some(h) = held(client, scripts, cfg, id).await?
            && update(client, scripts, cfg, id, Update::Add(h)).await? == Some(true)
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
            let g: u64 = client
                .eval(
                    &scripts.index_mark_empty,
                    &[thread_index(cfg, &id), gen_key(cfg, &id)],
                    NO_ARGS,
                    // A second copy raises the generation once more: still an emptying.
                    Repeat::Safe,
                    "check a listed thread",
                )
                .await?;
            if g > 0 && forget(client, scripts, cfg, &id, g).await? {
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
