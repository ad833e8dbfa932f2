//! The Lua scripts: every write (and `list`) is one script, so it is atomic on the server and
//! touches one hash slot (all keys of a thread share the tag `{<prefix>:<thread>}`).
//!
//! Conventions for every script: `KEYS[1]` is the thread's index (a sorted set of logical keys,
//! all score 0); physical keys are `<kp><logical key>` where `kp` = `{<prefix>:<thread>}:`.
//! Keys derived inside a script from index members share the declared keys' hash tag, so they
//! are in the same slot on Cluster.

/// Shared helpers: run-key iteration and the live set of TTL mode. Prepended to the scripts that need them.
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
"#;

/// Commit: check the fence, then write puts + latest and index them (no TTL: a run's keys
/// expire only once it has finished, see [`FINISH_BODY`]).
/// KEYS: index, fence, data keys…. ARGV: epoch, ttl_ms (unused), kp, run, values… (aligned with
/// KEYS[3..]). Returns `"ok"` or `"fenced:<current epoch>"` (also for a run never claimed); on a
/// fence failure nothing is written.
///
/// The data keys are written with one `MSET` and indexed with one `ZADD` per chunk of
/// [`CHUNK`] keys, not one `SET` and one `ZADD` per key: each `redis.call` costs the server
/// ~1.5 µs of its own (command lookup, argument objects, call bookkeeping), and a merged commit
/// of the write-behind holds a dozen keys (measured on Redis 7.0.15, replaying the merged
/// commits of a bench run of 13 keys and ~7 KB each: 71 → 55 µs per commit on one node, 80 → 62
/// µs on a Cluster node). The
/// chunks keep `unpack` under Lua's limit of ~8000 results. Scores are the string `'0'`: a Lua
/// number would be formatted with `snprintf` for every member. The index is written first: the
/// only write of the script that can fail (an index key that is not a sorted set) then fails
/// before any data is written.
pub(crate) const COMMIT_BODY: &str = r#"
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local plen = #ARGV[3]
local n = #KEYS
for i = 3, n, CHUNK do
  local j = math.min(i + CHUNK - 1, n)
  local kv, zs = {}, {}
  for x = i, j do
    kv[#kv + 1] = KEYS[x]
    kv[#kv + 1] = ARGV[x + 2]
    zs[#zs + 1] = '0'
    zs[#zs + 1] = string.sub(KEYS[x], plen + 1)
  end
  redis.call('ZADD', KEYS[1], unpack(zs))
  redis.call('MSET', unpack(kv))
end
return 'ok'
"#;

/// Claim body (`Store::claim`, and `Store::claim_if_new` when ARGV[4] is `1`). KEYS: index,
/// fence, the thread's generation (see `threads.rs`), the run's latest pointer. ARGV: kp, run,
/// ttl_ms, if_new. Returns nil (nothing claimed) when if_new and the pointer exists, else
/// `{epoch, gen}`: the caller compares `gen` with the stamp its thread-index `ZADD` saw, and
/// when the removal of the thread's last emptying (generation `gen`) may come after that
/// `ZADD`, sends the add stamped `gen` (`store::must_add_again`).
pub(crate) const CLAIM_BODY: &str = r#"
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  return false
end
local e = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], 0, 'run:' .. ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then keep_run(KEYS[1], ARGV[1], ARGV[2]) end
return {e, tonumber(redis.call('GET', KEYS[3]) or '0')}
"#;

/// Finish (`Store::finish_run`, TTL mode only): check the fence, then give every key of the
/// run one expiry instant, now + ttl, and take the run out of the thread's live set; when no
/// run of the thread is live any more, the thread's index expires with its last run. KEYS:
/// index, fence. ARGV: epoch, ttl_ms, kp, run. Returns `"ok"` or `"fenced:<current epoch>"`.
pub(crate) const FINISH_BODY: &str = r#"
local refused = fenced(KEYS[2], ARGV[1])
if refused then return refused end
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
for _, m in ipairs(run_members(KEYS[1], ARGV[4])) do
  redis.call('PEXPIREAT', ARGV[3] .. m, at)
end
local live = live_key(KEYS[1])
redis.call('SREM', live, ARGV[4])
if redis.call('SCARD', live) == 0 then
  local iat = redis.call('PEXPIRETIME', KEYS[1])
  if iat == -1 or iat < at then redis.call('PEXPIREAT', KEYS[1], at) end
end
return 'ok'
"#;

/// The end of a delete: when the thread holds no key any more, raise its generation (the
/// emptying of `threads.rs`; `{<prefix>:T}#gen` sits beside the index `{<prefix>:T}#index`, in
/// its slot). Returns `{n, gen}`, `gen` 0 when the thread still holds keys. Preceded by
/// `threads::next_gen`.
const MARK_IF_EMPTY: &str = r#"
local g = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  g = next_gen(string.sub(KEYS[1], 1, #KEYS[1] - 6) .. '#gen')
end
return {n, g}
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

/// Delete keys. KEYS: index, data keys…. ARGV: kp. Returns `{how many existed, gen}`. One
/// `ZREM` and one `DEL` per chunk of [`CHUNK`] keys, the index first (as in a commit).
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
"#;

/// Delete a run. KEYS: index, fence. ARGV: kp, run. Returns `{how many keys existed, gen}`.
/// One `DEL` and one `ZREM` per chunk of [`CHUNK`] members (a run of 10 steps has ~90 keys).
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
"#;

/// Most keys one `MSET`, `DEL`, `ZADD` or `ZREM` of a script takes (the Lua name `CHUNK`):
/// Lua's `unpack` returns at most ~8000 values (`LUAI_MAXCSTACK`), and a `ZADD` of `CHUNK`
/// keys unpacks twice as many (score, member).
pub(crate) const CHUNK: usize = 500;

use crate::threads;

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
    pub(crate) finish: Lua,
    pub(crate) list: Lua,
    pub(crate) delete: Lua,
    pub(crate) delete_run: Lua,
    pub(crate) index_add: Lua,
    pub(crate) index_set_if_newer: Lua,
    pub(crate) index_held: Lua,
    pub(crate) index_mark_empty: Lua,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with = |body: &str| Lua::new(format!("local CHUNK = {CHUNK}\n{HELPERS}{body}"));
        let next_gen = threads::next_gen();
        Scripts {
            commit: with(COMMIT_BODY),
            claim: with(CLAIM_BODY),
            finish: with(FINISH_BODY),
            list: Lua::new(LIST.to_string()),
            delete: Lua::new(format!(
                "local CHUNK = {CHUNK}\n{next_gen}{DELETE}{MARK_IF_EMPTY}"
            )),
            delete_run: with(&format!("{next_gen}{DELETE_RUN_BODY}{MARK_IF_EMPTY}")),
            index_add: Lua::new(threads::ADD.to_string()),
            index_set_if_newer: Lua::new(threads::SET_IF_NEWER.to_string()),
            index_held: Lua::new(format!("{next_gen}{}", threads::HELD)),
            index_mark_empty: Lua::new(format!("{next_gen}{}", threads::MARK_EMPTY)),
        }
    }
}
