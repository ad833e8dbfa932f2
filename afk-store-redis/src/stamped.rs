//! Store-wide sets of threads kept in line with the threads' own slots: the *stamped
//! membership* protocol, used by the thread index (`threads.rs`, [`Set::Threads`]) and by the
//! index of threads holding runs that need attention (`attention.rs`, [`Set::Attention`]).
//!
//! **The problem.** A set `S` lists the threads `T` for which a key of `T`'s own slot exists
//! (the *held key*: `{<prefix>:T}#index` for the thread index, `{<prefix>:T}#attention:runs`
//! for the attention index). `S` is a sorted set in the store's own slot (`{<prefix>}#<set>`),
//! so on Cluster it lives apart from the threads' slots and can never join a thread's script:
//! the script that creates the held key (a *filling*) and the one that deletes it (an
//! *emptying*) decide in the thread's slot, and their update of `S` lands one round trip later,
//! so two updates can arrive in the other order than they were decided in.
//!
//! **Stamps.** Every update of `S` beyond a claim's first `ZADD` carries a *stamp* that orders
//! it by decision, and `S` applies an update only when its stamp is above the last one applied
//! for that thread (`{<prefix>}#<set>:stamp:T`, in `S`'s slot, see [`SET_IF_NEWER`]):
//! - the thread's slot holds a generation per set (`{<prefix>:T}#gen`,
//!   `{<prefix>:T}#attention:gen`), raised by every emptying (to `max(gen + 1, server time in
//!   ms)`, so it keeps growing after the key expired, [`FORGOTTEN_TTL_MS`] after its last change);
//! - the removal for the emptying to generation `g` has stamp `2g`; an add decided at generation
//!   `g` (after the emptying to `g`, before any later one) has stamp `2g + 1`: it beats the
//!   removal of the emptying before it and loses to the removal of any emptying after it,
//!   whatever order they arrive in.
//!
//! **The rules.** (R1) An emptying raises the generation to `g` in its own script; its process
//! then sends the removal `2g` ([`Update::Remove`]), then checks the thread's slot ([`held_script`]):
//! if the held key exists again (a filling ran meanwhile) it adds the thread back stamped with
//! the generation it read (`2h + 1`); this is [`forget`]. (R2) Every filling is followed by a
//! stamped add `2g + 1`, `g` the generation the filling's script read (raised first when it
//! has none, so the stamp is above any removal still remembered), or, for a filling made by a
//! claim, preceded by the claim's unstamped `ZADD NX` ([`ADD`], which answers the stamp `c` `S`
//! had) and followed by the stamped add only when `c < 2g` (the removal of the emptying to `g`
//! may land after the `ZADD`).
//!
//! **Why a thread whose held key exists is listed, once the operations have finished.** Take
//! the last filling `F` (the key has existed since), which read generation `g`. Every emptying
//! came before `F`, so every removal has a stamp `2g' <= 2g`. If `F` sent its add `2g + 1`:
//! it beats every removal; if a higher stamp refused it, that was an add too (a removal above
//! `2g` needs an emptying after `F`), and no removal can be applied after an applied stamp above
//! `2g`. If `F` was a claim that saw `c >= 2g` at its `ZADD`: the last applied stamp was already
//! `>= 2g` then, so every removal (all `<= 2g`) arriving after that `ZADD` is refused, and the
//! `ZADD` stands.
//!
//! **Why a thread whose held key does not exist is not listed, once the operations have
//! finished** (up to the leftovers each set names): take the last emptying `E`, to generation
//! `g`; its removal `2g` is sent. A stamped add decided before `E` read a generation below `g`
//! and loses to `2g`. After `E` nothing fills the thread, so no add is decided from a filling
//! or a [`held_script`] check; what remains are unstamped `ZADD`s (and their stamped adds) of claims
//! that never filled: the thread index has none (a claim's script always fills,
//! `threads.rs`), the attention index lists those threads with an empty set, which its lister
//! skips and repairs (`attention.rs`). A repair ([`mark_empty_script`], then [`forget`]) is an
//! emptying like any other.
//!
//! The remover's add back covers a filler that died between its script and its stamped add,
//! when the remover's check comes after the filling. A thread's generation and stamp expire
//! [`FORGOTTEN_TTL_MS`] after their last change: only a process paused for longer between two
//! round trips could have its update misordered.

use afk_core::{Result, ThreadId};

use crate::config::RedisConfig;
use crate::conn::{Client, NO_ARGS, Repeat};
use crate::scripts::Scripts;

/// How long a thread's generation and stamp are remembered: 24 hours. A claim is two round
/// trips sent one after the other, a removal three; only a process paused between them for
/// longer could have its update misordered.
pub const FORGOTTEN_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Lua: `next_gen(key)` raises a thread's generation (see the module doc) and returns it;
/// `held_gen(key)` returns it, raised first when it has none (so an add stamped with it is
/// above every removal still remembered).
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

local function held_gen(key)
  return tonumber(redis.call('GET', key)) or next_gen(key)
end
"#
    )
}

/// A claim's first step: add a thread to each set; return, for each, the thread's last applied
/// stamp (0 when none). KEYS: set, stamp, set, stamp, …. ARGV: id.
pub(crate) const ADD: &str = r#"
local out = {}
for i = 1, #KEYS, 2 do
  redis.call('ZADD', KEYS[i], 'NX', 0, ARGV[1])
  out[#out + 1] = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
end
return out
"#;

/// A stamped update: add (odd stamp) or remove (even stamp) the thread when the stamp is above
/// the last one applied. KEYS: set, stamp, removals. ARGV: id, stamp, ttl ms. Returns -1
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

/// Lua: `is_held()`: whether the thread holds the set's held key (`KEYS[1]`) or, for the
/// attention index (`KEYS[3]`, its pending claims), a claim pending less than its expiry
/// (expired ones are dropped on the way).
const IS_HELD: &str = r#"
local function is_held()
  if redis.call('EXISTS', KEYS[1]) == 1 then return true end
  if KEYS[3] == nil then return false end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  return redis.call('EXISTS', KEYS[3]) == 1
end
"#;

/// In the thread's slot: -1 when the thread is not held ([`IS_HELD`]), else the generation
/// (raised first when it has none, so the add this answer stamps cannot be older than a later
/// emptying). KEYS: held key, gen (, pending claims). Preceded by [`next_gen`].
pub(crate) fn held_script() -> String {
    format!(
        "{IS_HELD}{}",
        r#"
if not is_held() then return -1 end
return held_gen(KEYS[2])
"#
    )
}

/// An emptying outside the scripts that empty (a rebuild, a lister's repair): raise the
/// generation when the thread is not held ([`IS_HELD`]). KEYS: held key, gen (, pending
/// claims). Returns the new generation, or 0 when the thread is held. Preceded by
/// [`next_gen`].
pub(crate) fn mark_empty_script() -> String {
    format!(
        "{IS_HELD}{}",
        r#"
if is_held() then return 0 end
return next_gen(KEYS[2])
"#
    )
}

/// One store-wide set of threads kept by this protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Set {
    /// Every thread that holds a key (`list_threads`); held key `{<prefix>:T}#index`.
    Threads,
    /// Every thread holding a run that needs attention (`list_attention`); held key
    /// `{<prefix>:T}#attention:runs`.
    Attention,
}

impl Set {
    fn name(self) -> &'static str {
        match self {
            Set::Threads => "threads",
            Set::Attention => "attention",
        }
    }

    /// The set itself: `{<prefix>}#<set>`, a sorted set of thread ids, all score 0.
    pub(crate) fn key(self, cfg: &RedisConfig) -> Vec<u8> {
        format!("{{{}}}#{}", cfg.prefix, self.name()).into_bytes()
    }

    /// How many removals from the set were applied, beside it (same slot).
    pub(crate) fn removals_key(self, cfg: &RedisConfig) -> Vec<u8> {
        format!("{{{}}}#{}:removals", cfg.prefix, self.name()).into_bytes()
    }

    /// The stamp of the thread's last applied update, in the set's slot.
    pub(crate) fn stamp_key(self, cfg: &RedisConfig, thread: &str) -> Vec<u8> {
        format!("{{{}}}#{}:stamp:{}", cfg.prefix, self.name(), thread).into_bytes()
    }

    /// The key of the thread's slot whose existence puts the thread in the set.
    pub(crate) fn held_key(self, cfg: &RedisConfig, thread: &str) -> Vec<u8> {
        match self {
            Set::Threads => format!("{{{}:{}}}#index", cfg.prefix, thread),
            Set::Attention => format!("{{{}:{}}}#attention:runs", cfg.prefix, thread),
        }
        .into_bytes()
    }

    /// The keys of [`held_script`] and [`mark_empty_script`]: the held key, the generation,
    /// and for the attention index the thread's pending claims.
    pub(crate) fn slot_keys(self, cfg: &RedisConfig, thread: &str) -> Vec<Vec<u8>> {
        let mut keys = vec![self.held_key(cfg, thread), self.gen_key(cfg, thread)];
        if self == Set::Attention {
            keys.push(format!("{{{}:{}}}#attention:pending", cfg.prefix, thread).into_bytes());
        }
        keys
    }

    /// The thread's generation for this set, raised by every emptying, in the thread's slot.
    pub(crate) fn gen_key(self, cfg: &RedisConfig, thread: &str) -> Vec<u8> {
        match self {
            Set::Threads => format!("{{{}:{}}}#gen", cfg.prefix, thread),
            Set::Attention => format!("{{{}:{}}}#attention:gen", cfg.prefix, thread),
        }
        .into_bytes()
    }
}

/// Both sets, in the order [`ADD`] answers their stamps.
const ADDED_BY_CLAIMS: [Set; 2] = [Set::Threads, Set::Attention];

/// The stamps a claim's [`ADD`] saw, one per set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The thread index's.
    pub(crate) threads: u64,
    /// The attention index's.
    pub(crate) attention: u64,
}

/// The KEYS and ARGV of [`ADD`] for `thread`: both sets.
pub(crate) fn add_call(cfg: &RedisConfig, thread: &ThreadId) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut keys = Vec::with_capacity(4);
    for set in ADDED_BY_CLAIMS {
        keys.push(set.key(cfg));
        keys.push(set.stamp_key(cfg, thread.as_str()));
    }
    (keys, vec![thread.as_str().as_bytes().to_vec()])
}

/// Decode [`ADD`]'s answer.
pub(crate) fn seen_of(stamps: Vec<u64>) -> Result<Seen> {
    match stamps.as_slice() {
        [threads, attention] => Ok(Seen {
            threads: *threads,
            attention: *attention,
        }),
        other => Err(afk_core::Error::unexpected(format!(
            "redis: adding a thread to its indexes answered {} stamps",
            other.len()
        ))),
    }
}

/// A claim's first round trip: add `thread` to both sets (before anything of it is written);
/// returns the stamps the claim script's answer is compared with.
pub(crate) async fn remember(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &ThreadId,
) -> Result<Seen> {
    let (keys, args) = add_call(cfg, thread);
    let stamps: Vec<u64> = client
        .eval(
            &scripts.index_add,
            &keys,
            &args,
            // ZADD NX and reads: sending it twice is sending it once.
            Repeat::Safe,
            "add the thread to the thread and attention indexes",
        )
        .await?;
    seen_of(stamps)
}

/// Which way a stamped update goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Update {
    /// The thread was filled, or found held, at this generation.
    Add(u64),
    /// The thread was emptied to this generation.
    Remove(u64),
}

/// Send a stamped update; `None` when the set refused it (a later decision was applied), else
/// whether it changed the set.
pub(crate) async fn update(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    set: Set,
    thread: &str,
    up: Update,
) -> Result<Option<bool>> {
    let (stamp, what) = match up {
        Update::Add(g) => (2 * g + 1, "add a thread to an index again"),
        Update::Remove(g) => (2 * g, "remove a thread from an index"),
    };
    let r: i64 = client
        .eval(
            &scripts.index_set_if_newer,
            &[
                set.key(cfg),
                set.stamp_key(cfg, thread),
                set.removals_key(cfg),
            ],
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

/// The thread's generation when its held key exists (see [`held_script`]).
pub(crate) async fn held(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    set: Set,
    thread: &str,
) -> Result<Option<u64>> {
    let g: i64 = client
        .eval(
            &scripts.index_held,
            &set.slot_keys(cfg, thread),
            NO_ARGS,
            // Raises a missing generation once; a second copy reads it.
            Repeat::Safe,
            "check whether a thread belongs in an index",
        )
        .await?;
    Ok(u64::try_from(g).ok())
}

/// An emptying found from outside ([`mark_empty_script`]): the new generation, or 0 when the held key
/// exists.
pub(crate) async fn mark_empty(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    set: Set,
    thread: &str,
) -> Result<u64> {
    client
        .eval(
            &scripts.index_mark_empty,
            &set.slot_keys(cfg, thread),
            NO_ARGS,
            // A second copy raises the generation once more: still an emptying.
            Repeat::Safe,
            "check a listed thread",
        )
        .await
}

/// A removal after the emptying to generation `g` (the caller's script raised it): the stamped
/// removal, then the add back when the held key exists again. Returns whether this removal
/// took the thread out of the set and it stayed out.
pub(crate) async fn forget(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    set: Set,
    thread: &str,
    g: u64,
) -> Result<bool> {
    let removed = update(client, scripts, cfg, set, thread, Update::Remove(g)).await?;
    if let Some(h) = held(client, scripts, cfg, set, thread).await? {
        update(client, scripts, cfg, set, thread, Update::Add(h)).await?;
        return Ok(false);
    }
    Ok(removed == Some(true))
}

/// Bring the thread's membership in line with its slot when the caller does not know which
/// way it moved (a commit whose outcome had to be read back): the add stamped with the
/// generation when the held key exists, else an emptying and its removal.
pub(crate) async fn settle(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    set: Set,
    thread: &str,
) -> Result<()> {
    if let Some(h) = held(client, scripts, cfg, set, thread).await? {
        update(client, scripts, cfg, set, thread, Update::Add(h)).await?;
        return Ok(());
    }
    let g = mark_empty(client, scripts, cfg, set, thread).await?;
    if g > 0 {
        forget(client, scripts, cfg, set, thread, g).await?;
    }
    Ok(())
}
