//! The Lua scripts: every write (and `list`) is one script, so it is atomic on the server and
//! touches one hash slot (all keys of a thread share the tag `{<prefix>:<thread>}`).
//!
//! Conventions for every script: `KEYS[1]` is the thread's index (a sorted set of logical keys,
//! all score 0); physical keys are `<kp><logical key>` where `kp` = `{<prefix>:<thread>}:`.
//! Keys derived inside a script from index members share the declared keys' hash tag, so they
//! are in the same slot on Cluster.

/// Shared helpers: run-key iteration, the live set of TTL mode and a run's end, the thread's
/// runs that need attention. Prepended (after `stamped::next_gen`) to the scripts that need
/// them.
const HELPERS: &str = r#"
local FAMILIES = {'checkpoint:', 'effect:', 'messages:', 'bgtool:'}

-- Every index member of `run`: keys `<family><run>:...` (never `<run>0:...`: the range ends
-- just before `<family><run>;`, ';' being the byte after ':'), plus the fence `run:<run>`.
local function run_members(index, run)
  local out = {}
  for _, f in ipairs(FAMILIES) do
    local ms = redis.call('ZRANGEBYLEX', index, '[' .. f .. run .. ':', '(' .. f .. run .. ';')
    for _, m in ipairs(ms) do out[#out + 1] = m end
  end
  out[#out + 1] = 'run:' .. run
  return out
end

-- Why a write under `epoch` is refused by the fence key `fence`, or nil when it may go on.
local function fenced(fence, epoch)
  local cur = redis.call('GET', fence)
  if not cur then return 'fenced:never claimed' end
  if cur ~= epoch then return 'fenced:' .. cur end
  return nil
end

-- The set of the thread's runs that have not finished, beside its index (same hash tag).
local function live_key(index)
  return string.sub(index, 1, #index - 6) .. '#live'
end

-- A claim in TTL mode: the run is live (not finished), so none of its keys expire, nor the
-- thread's index. Keys that do expire (a finished run claimed again, or keys an earlier version
-- of this store gave a TTL while the run was in progress) stop expiring.
local function keep_run(index, kp, run)
  if redis.call('PTTL', kp .. 'run:' .. run) >= 0 then
    for _, m in ipairs(run_members(index, run)) do redis.call('PERSIST', kp .. m) end
  end
  local live = live_key(index)
  redis.call('SADD', live, run)
  redis.call('PERSIST', live)
  redis.call('PERSIST', index)
end

-- A run's end in TTL mode: every key of the run gets one expiry instant, now + ttl, and the run
-- leaves the live set; when no run of the thread is live any more, the thread's index expires
-- with its last run.
local function finish_run(index, kp, run, ttl)
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
  for _, m in ipairs(run_members(index, run)) do
    redis.call('PEXPIREAT', kp .. m, at)
  end
  local live = live_key(index)
  redis.call('SREM', live, run)
  if redis.call('SCARD', live) == 0 then
    local iat = redis.call('PEXPIRETIME', index)
    if iat == -1 or iat < at then redis.call('PEXPIREAT', index, at) end
  end
end

-- The thread's runs that need attention, beside its index (same hash tag): `#attention` maps a
-- run to its entry, `#attention:runs` holds the same runs sorted (for listing), and
-- `#attention:gen` is the thread's generation in the attention index (`attention.rs`).
local function attn_key(index, suffix)
  return string.sub(index, 1, #index - 6) .. '#attention' .. suffix
end

-- Whether a claim of the thread is pending: claimed less than PENDING_MS ago and not yet
-- committed with an attention (see `attention.rs`, "Pending claims"). Drops the expired ones.
local function attn_pending(index)
  local p = attn_key(index, ':pending')
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', p, '-inf', now)
  return redis.call('EXISTS', p) == 1
end

-- Enter `run` with `entry`, or replace its entry. Returns the generation to stamp the thread's
-- add to the attention index with when this made the thread's set non-empty (a filling), else
-- nil.
local function attn_open(index, run, entry)
  local runs = attn_key(index, ':runs')
  local filled = redis.call('ZADD', runs, 0, run) == 1 and redis.call('ZCARD', runs) == 1
  redis.call('HSET', attn_key(index, ''), run, entry)
  redis.call('ZREM', attn_key(index, ':pending'), run)
  if filled then return held_gen(attn_key(index, ':gen')) end
  return nil
end

-- Take `run` out. Returns the raised generation when this took out the thread's last run and
-- no claim of the thread is pending (an emptying: its removal from the attention index
-- follows), else nil.
local function attn_close(index, run)
  local runs = attn_key(index, ':runs')
  local was = redis.call('ZREM', runs, run)
  redis.call('HDEL', attn_key(index, ''), run)
  redis.call('ZREM', attn_key(index, ':pending'), run)
  if was == 1 and redis.call('EXISTS', runs) == 0 and not attn_pending(index) then
    return next_gen(attn_key(index, ':gen'))
  end
  return nil
end
"#;

/// Commit: check the fence, then write puts + latest and index them, and move the run in or
/// out of the thread's runs that need attention. No TTL on an open run: a run's keys expire only
/// once it has finished, which a commit carrying `Closed` says (`finish_run` above). KEYS:
/// index, fence, data keys…. ARGV: epoch, ttl_ms, kp, run, attention (`''` none, `o` open, `c`
/// closed), entry (`''` unless open), values… (aligned with KEYS[3..]). Returns `"ok"`,
/// `"ok:add:<g>"` (the commit filled the thread's attention set: the thread's add to the
/// attention index stamped with generation `g` follows), `"ok:rm:<g>"` (it emptied it: the
/// removal follows), or `"fenced:<current epoch>"` (also for a run never claimed); on a fence
/// failure nothing is written.
///
/// The data keys are written with one `MSET` and indexed with one `ZADD` per chunk of
/// [`CHUNK`] keys, not one `SET` and one `ZADD` per key: each `redis.call` costs the server
/// ~1.5 µs of its own (command lookup, argument objects, call bookkeeping), and a merged commit
/// of the write-behind holds a dozen keys (measured on Redis 7.0.15, replaying the merged
/// commits of a bench run of 13 keys and ~7 KB each: 71 → 55 µs per commit on one node, 80 → 62
/// µs on a Cluster node). The
/// chunks keep `unpack` under Lua's limit of ~8000 results. Scores are the string `'0'`: a Lua
/// number would be formatted with `snprintf` for every member. The index is written first, then
/// the attention keys, the data last: the writes that can fail (a key that is not of its type,
/// only after a hand edit) fail before any data is written.
pub(crate) const COMMIT_BODY: &str = r#"
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local plen = #ARGV[3]
local n = #KEYS
for i = 3, n, CHUNK do
  local zs = {}
  for x = i, math.min(i + CHUNK - 1, n) do
    zs[#zs + 1] = '0'
    zs[#zs + 1] = string.sub(KEYS[x], plen + 1)
  end
  redis.call('ZADD', KEYS[1], unpack(zs))
end
local op, run, answer, g = ARGV[5], ARGV[4], 'ok', nil
if op == 'o' then
  g = attn_open(KEYS[1], run, ARGV[6])
  answer = 'ok:add:'
elseif op == 'c' then
  g = attn_close(KEYS[1], run)
  answer = 'ok:rm:'
end
for i = 3, n, CHUNK do
  local kv = {}
  for x = i, math.min(i + CHUNK - 1, n) do
    kv[#kv + 1] = KEYS[x]
    kv[#kv + 1] = ARGV[x + 4]
  end
  redis.call('MSET', unpack(kv))
end
local ttl = tonumber(ARGV[2])
if ttl > 0 and op == 'c' then
  finish_run(KEYS[1], ARGV[3], run, ttl)
elseif ttl > 0 and op == 'o' and redis.call('SISMEMBER', live_key(KEYS[1]), run) == 0 then
  keep_run(KEYS[1], ARGV[3], run)
end
if g then return answer .. string.format('%.0f', g) end
return 'ok'
"#;

/// Claim body (`Store::claim`; `Store::claim_if_new` when ARGV[4] is `1`; `Store::claim_if`
/// when ARGV[4] is `e:<epoch>`, claiming only while the fence holds that epoch). KEYS: index,
/// fence, the thread's generations in the thread index and in the attention index (see
/// `stamped.rs`), the run's latest pointer. ARGV: kp, run, ttl_ms, condition. Returns nil
/// (nothing claimed) when the condition refuses, else `{epoch, gen, attention gen}`: for each
/// index the caller compares the generation `g` with the stamp its `ZADD` saw, and when the
/// removal of the thread's emptying to `g` may come after that `ZADD`, sends the add stamped
/// with `g` (`store::must_add_again`).
pub(crate) const CLAIM_BODY: &str = r#"
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[5]) == 1 then
  return false
end
if string.sub(ARGV[4], 1, 2) == 'e:' and (redis.call('GET', KEYS[2]) or '0') ~= string.sub(ARGV[4], 3) then
  return false
end
local e = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], 0, 'run:' .. ARGV[2])
local pending = attn_key(KEYS[1], ':pending')
local t = redis.call('TIME')
local pending_until = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + PENDING_MS
redis.call('ZADD', pending, pending_until, ARGV[2])
redis.call('PEXPIREAT', pending, pending_until)
local ttl = tonumber(ARGV[3])
if ttl > 0 then keep_run(KEYS[1], ARGV[1], ARGV[2]) end
local g = tonumber(redis.call('GET', KEYS[3]) or '0')
return {e, g, tonumber(redis.call('GET', KEYS[4]) or '0')}
"#;

/// The end of a delete: when the thread holds no key any more, raise its generation (the
/// emptying of the thread index; `{<prefix>:T}#gen` sits beside the index `{<prefix>:T}#index`,
/// in its slot). `mark_if_empty(index)` returns the new generation, or 0 when the thread still
/// holds keys. Preceded by `stamped::next_gen`.
const MARK_IF_EMPTY: &str = r#"
local function mark_if_empty(index)
  if redis.call('EXISTS', index) == 0 then
    return next_gen(string.sub(index, 1, #index - 6) .. '#gen')
  end
  return 0
end
"#;

/// List one page. KEYS: index. ARGV: kp, min, max, limit. Returns `{more, last, keys}`:
/// members of the lexical range that still exist; members whose key has expired are removed
/// from the index on the way.
pub(crate) const LIST: &str = r#"
local n = tonumber(ARGV[4])
local ms = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, n + 1)
local out = {}
local more = 0
local last = ''
for i, m in ipairs(ms) do
  if i > n then more = 1 break end
  last = m
  if redis.call('EXISTS', ARGV[1] .. m) == 1 then
    out[#out + 1] = m
  else
    redis.call('ZREM', KEYS[1], m)
  end
end
return {more, last, out}
"#;

/// Delete keys. KEYS: index, data keys…. ARGV: kp. Returns `{how many existed, gen}` (`gen`
/// of [`MARK_IF_EMPTY`]). One `ZREM` and one `DEL` per chunk of [`CHUNK`] keys, the index first
/// (as in a commit). Keys only: a run's entry in the attention index stays.
pub(crate) const DELETE: &str = r#"
local plen = #ARGV[1]
local n = 0
for i = 2, #KEYS, CHUNK do
  local j = math.min(i + CHUNK - 1, #KEYS)
  local ms = {}
  for x = i, j do ms[#ms + 1] = string.sub(KEYS[x], plen + 1) end
  redis.call('ZREM', KEYS[1], unpack(ms))
  n = n + redis.call('DEL', unpack(KEYS, i, j))
end
return {n, mark_if_empty(KEYS[1])}
"#;

/// Delete a run. KEYS: index, fence. ARGV: kp, run. Returns `{how many keys existed, gen,
/// attention gen}`: `gen` of [`MARK_IF_EMPTY`]; `attention gen` non-zero when the run was the
/// thread's last run needing attention (an emptying, whose removal follows). One `DEL` and one
/// `ZREM` per chunk of [`CHUNK`] members (a run of 10 steps has ~90 keys).
pub(crate) const DELETE_RUN_BODY: &str = r#"
local n = 0
local ms = run_members(KEYS[1], ARGV[2])
for i = 1, #ms, CHUNK do
  local j = math.min(i + CHUNK - 1, #ms)
  local ks = {}
  for x = i, j do ks[#ks + 1] = ARGV[1] .. ms[x] end
  n = n + redis.call('DEL', unpack(ks))
  redis.call('ZREM', KEYS[1], unpack(ms, i, j))
end
redis.call('SREM', live_key(KEYS[1]), ARGV[2])
local ga = attn_close(KEYS[1], ARGV[2]) or 0
return {n, mark_if_empty(KEYS[1]), ga}
"#;

/// Most keys one `MSET`, `DEL`, `ZADD` or `ZREM` of a script takes (the Lua name `CHUNK`):
/// Lua's `unpack` returns at most ~8000 values (`LUAI_MAXCSTACK`), and a `ZADD` of `CHUNK`
/// keys unpacks twice as many (score, member).
pub(crate) const CHUNK: usize = 500;

/// How long a claim keeps its thread in the attention index without an opening commit (the
/// Lua name `PENDING_MS`): 5 minutes (see `attention.rs`, "Pending claims"). A live runner
/// commits within a round trip or a load of the run after its claim.
pub(crate) const PENDING_MS: u64 = 5 * 60 * 1000;

use crate::stamped;

/// A script's full text (helpers + body) and its SHA-1, for `EVALSHA` with an `EVAL` fallback.
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) code: String,
    pub(crate) sha: String,
}

impl Lua {
    fn new(code: String) -> Self {
        let sha = redis::Script::new(&code).get_hash().to_string();
        Lua { code, sha }
    }
}

/// All scripts, built once per store.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) commit: Lua,
    pub(crate) claim: Lua,
    pub(crate) list: Lua,
    pub(crate) delete: Lua,
    pub(crate) delete_run: Lua,
    pub(crate) index_add: Lua,
    pub(crate) index_set_if_newer: Lua,
    pub(crate) index_held: Lua,
    pub(crate) index_mark_empty: Lua,
    pub(crate) attention_page: Lua,
    pub(crate) attention_read_back: Lua,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let next_gen = stamped::next_gen();
        let with = |body: &str| {
            Lua::new(format!(
                "local CHUNK = {CHUNK}\nlocal PENDING_MS = {PENDING_MS}\n{next_gen}{HELPERS}{body}"
            ))
        };
        Scripts {
            commit: with(COMMIT_BODY),
            claim: with(CLAIM_BODY),
            list: Lua::new(LIST.to_string()),
            delete: Lua::new(format!(
                "local CHUNK = {CHUNK}\n{next_gen}{MARK_IF_EMPTY}{DELETE}"
            )),
            delete_run: with(&format!("{MARK_IF_EMPTY}{DELETE_RUN_BODY}")),
            index_add: Lua::new(stamped::ADD.to_string()),
            index_set_if_newer: Lua::new(stamped::SET_IF_NEWER.to_string()),
            index_held: Lua::new(format!("{next_gen}{}", stamped::held_script())),
            index_mark_empty: Lua::new(format!("{next_gen}{}", stamped::mark_empty_script())),
            attention_page: Lua::new(crate::attention::PAGE.to_string()),
            attention_read_back: Lua::new(crate::attention::READ_BACK.to_string()),
        }
    }
}
