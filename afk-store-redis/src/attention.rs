//! The index of runs that need attention (`Store::list_attention`, `Store::attention`).
//!
//! **Per thread**, beside its key index and in its slot: `{<prefix>:T}#attention`, a hash from
//! run id to the run's entry, and `{<prefix>:T}#attention:runs`, a sorted set of the same run
//! ids (score 0, so ordered by id) to list them in pages. The commit script moves a run in
//! (`Attention::Open`) or out (`Attention::Closed`) with the commit's records, under its fence:
//! a refused commit changes nothing, and a reader never sees an entry without its commit or a
//! commit without its entry. `delete_run` takes the run out too.
//!
//! **Across threads**: `{<prefix>}#attention`, a sorted set of the threads whose
//! `#attention:runs` exists, in the store's own slot, kept by the stamped membership protocol of
//! `stamped.rs` ([`Set::Attention`]); its proof covers this set with these fillings and
//! emptyings:
//! - a *filling* is a commit that enters a run into an empty set (the commit script answers
//!   `ok:add:<g>`, `g` the thread's attention generation, raised first when it has none); the
//!   committer then sends the add stamped `2g + 1` ([`Follow::Add`]), after the commit, before
//!   `commit` returns;
//! - an *emptying* is a commit (or `delete_run`) that takes out the set's last run: its script
//!   raises the generation to `g` and answers it, and the closer sends the removal `2g`, then
//!   adds the thread back if a run was entered meanwhile ([`Follow::Remove`],
//!   `stamped::forget`); a lister that finds a listed thread with an empty set repairs it the
//!   same way (`stamped::mark_empty`, then `forget`).
//!
//! So once the operations have finished, every thread holding a run that needs attention is
//! in the set (the last filling's add is stamped above every removal decided before it, and no
//! emptying comes after it), and a thread whose set is empty is not, except when a claim added
//! it after its last emptying (below). A run's entry therefore reaches a lister through at most
//! one round trip per thread in the set: the listing never reads a finished run, nor a thread
//! without runs that need attention (unless a claim just added it).
//!
//! **Claims add first.** A commit's add comes after the commit; a committer killed between the
//! two would leave an open run unlisted, exactly the run a recovery worker looks for. So every
//! claim also adds its thread to `{<prefix>}#attention`, in the same round trip and script as
//! its add to the thread index (`stamped::ADD`, `ZADD NX` to both), and, like for the thread
//! index, sends the add stamped with the attention generation its claim script read when the
//! removal of that emptying may land after its `ZADD`. A run's first opening commit comes after
//! its claim, so it finds its thread listed.
//!
//! **Pending claims.** Another run of the same thread could empty the set between the claim
//! and the opening commit; if that emptying's removal landed and its remover's check (which
//! adds the thread back once a run is in the set) came before the commit, a committer that
//! died before its own add would leave its open run out. So a claim also enters its run in
//! the thread's `{<prefix>:T}#attention:pending` (a sorted set scored by expiry, 5 minutes on,
//! in the claim script), the run's first commit carrying an attention takes it out, and a
//! thread with a live pending claim counts as held: closing its last run is no emptying, and
//! the protocol's checks (`stamped::held_script`, `stamped::mark_empty_script`) find it held.
//! Only a runner paused for longer than that between its claim and its first commit could
//! still have its run left out.
//!
//! The price: a thread claimed and never opened stays listed with an empty set until its
//! pending claim expired and a lister skipped and repaired it (one repair per such claim,
//! three round trips).
//!
//! **Listing** is in `(thread, run)` order. One page: `ZRANGEBYLEX` of up to `limit` threads
//! from the cursor's thread on, then one script per thread, sent concurrently
//! ([`PAGE`]: `ZRANGEBYLEX` of its runs after the cursor's run, `HMGET` of their entries). The
//! `i`-th thread of a page (from 0) is asked for at most `ceil(limit / (i + 1))` runs, so a page
//! moves at most about `limit · ln(limit)` entries however many runs each thread holds; a
//! thread that has more than it was asked for ends the page on its last run read. The cursor
//! is [`attention_cursor`]'s `<thread>/<run>` (after that run), or a bare `<thread>` (after all
//! of that thread) when a page ends on a thread whose runs were all read.

use afk_core::store::{AttentionPage, AttentionRun, attention_cursor, attention_list_limit};
use afk_core::store::{Commit, parse_attention_cursor};
use afk_core::{Error, Result, RunId, ThreadId};

use crate::config::RedisConfig;
use crate::conn::{Client, Repeat};
use crate::scripts::Scripts;
use crate::stamped::{self, Set, Update};

/// One thread's page. KEYS: the thread's `#attention:runs`, `#attention`. ARGV: min (`-` or
/// `(<run>`), cap. Returns `{exists, more, runs, entries}`: whether the thread holds any run
/// that needs attention, whether it holds more after these, up to `cap` run ids after `min` and
/// their entries (nil for a run without one, which only a hand edit leaves).
pub(crate) const PAGE: &str = r#"
local cap = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, cap + 1)
local more = 0
if #ids > cap then
  more = 1
  ids[#ids] = nil
end
local entries = {}
if #ids > 0 then entries = redis.call('HMGET', KEYS[2], unpack(ids)) end
return {redis.call('EXISTS', KEYS[1]), more, ids, entries}
"#;

/// A commit's read-back (after an answer that did not come): KEYS: the thread's `#attention`,
/// the run's fence. ARGV: run. Returns `{entry, fence PTTL}`.
pub(crate) const READ_BACK: &str = r#"
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('PTTL', KEYS[2])}
"#;

/// The thread's hash of entries, `{<prefix>:T}#attention`.
pub(crate) fn hash_key(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#attention", cfg.prefix, thread).into_bytes()
}

/// What a commit leaves to do in the attention index after its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    /// Nothing: the thread's set was not filled nor emptied.
    Nothing,
    /// The commit filled the thread's set at this generation: the stamped add.
    Add(u64),
    /// The commit emptied it to this generation: the removal and the check after it.
    Remove(u64),
    /// The commit's answer was lost and read back: which way it moved is unknown.
    Settle,
}

/// The follow-up named by a commit script's `ok…` answer; `None` for any other answer.
pub(crate) fn follow_of(answer: &[u8]) -> Option<Follow> {
    let rest = answer.strip_prefix(b"ok")?;
    if rest.is_empty() {
        return Some(Follow::Nothing);
    }
    let gen_of = |g: &[u8]| std::str::from_utf8(g).ok()?.parse::<u64>().ok();
    if let Some(g) = rest.strip_prefix(b":add:") {
        return gen_of(g).map(Follow::Add);
    }
    rest.strip_prefix(b":rm:")
        .and_then(gen_of)
        .map(Follow::Remove)
}

/// The commit script's ARGV for `commit.attention`: the operation and the entry.
pub(crate) fn op_args(commit: &Commit) -> (&'static [u8], &[u8]) {
    use afk_core::store::Attention;
    match &commit.attention {
        None => (b"", b""),
        Some(Attention::Open(entry)) => (b"o", entry),
        Some(Attention::Closed) => (b"c", b""),
    }
}

/// Do what a commit of `thread` left to do in the attention index. The commit is applied
/// whatever happens here, so a failure is logged, not returned: a removal that did not happen
/// leaves an empty set listed (the lister skips and repairs it); an add that did not happen
/// matters only if a removal raced it (the claim's add stands otherwise).
pub(crate) async fn follow(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
    follow: Follow,
) {
    let done = match follow {
        Follow::Nothing => return,
        Follow::Add(g) => {
            stamped::update(client, scripts, cfg, Set::Attention, thread, Update::Add(g))
                .await
                .map(|_| ())
        }
        Follow::Remove(g) => stamped::forget(client, scripts, cfg, Set::Attention, thread, g)
            .await
            .map(|_| ()),
        Follow::Settle => stamped::settle(client, scripts, cfg, Set::Attention, thread).await,
    };
    if let Err(e) = done {
        tracing::warn!(
            %thread, ?follow, error = %e,
            "redis: the attention index was not updated after an applied commit"
        );
    }
}

/// `attention(thread, run)`: the run's entry.
pub(crate) async fn entry(
    client: &Client,
    cfg: &RedisConfig,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Option<Vec<u8>>> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(hash_key(cfg, thread.as_str())).arg(run.as_str());
    client.query(&cmd, "read a run's attention entry").await
}

/// Where a listing goes on.
enum After {
    /// After this run of this thread.
    Run(ThreadId, RunId),
    /// After every run of this thread.
    Thread(ThreadId),
}

impl After {
    fn parse(cursor: &str) -> Result<After> {
        if cursor.contains('/') {
            let (t, r) = parse_attention_cursor(cursor)?;
            return Ok(After::Run(t, r));
        }
        ThreadId::new(cursor)
            .map(After::Thread)
            .map_err(|_| Error::invalid_input(format!("bad attention cursor {cursor:?}")))
    }

    /// The `ZRANGEBYLEX` start in the set of threads.
    fn thread_min(after: Option<&After>) -> String {
        match after {
            None => "-".to_owned(),
            Some(After::Run(t, _)) => format!("[{t}"),
            Some(After::Thread(t)) => format!("({t}"),
        }
    }

    /// The `ZRANGEBYLEX` start in `thread`'s runs.
    fn run_min(after: Option<&After>, thread: &str) -> String {
        match after {
            Some(After::Run(t, r)) if t.as_str() == thread => format!("({r}"),
            _ => "-".to_owned(),
        }
    }
}

/// One thread's answer to [`PAGE`].
struct ThreadRuns {
    exists: bool,
    more: bool,
    runs: Vec<String>,
    entries: Vec<Option<Vec<u8>>>,
}

/// [`PAGE`] for `thread`: at most `cap` runs after the cursor.
async fn thread_runs(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    thread: &str,
    min: String,
    cap: usize,
) -> Result<ThreadRuns> {
    let keys = [Set::Attention.held_key(cfg, thread), hash_key(cfg, thread)];
    let args = [min.into_bytes(), cap.to_string().into_bytes()];
    let (exists, more, runs, entries): (i64, i64, Vec<String>, Vec<Option<Vec<u8>>>) = client
        .eval(
            &scripts.attention_page,
            &keys,
            &args,
            Repeat::Safe,
            "list a thread's runs that need attention",
        )
        .await?;
    Ok(ThreadRuns {
        exists: exists == 1,
        more: more == 1,
        runs,
        entries,
    })
}

/// One page of the listing (see the module docs).
pub(crate) async fn list(
    client: &Client,
    scripts: &Scripts,
    cfg: &RedisConfig,
    cursor: Option<&str>,
    limit: usize,
) -> Result<AttentionPage> {
    let limit = attention_list_limit(limit);
    let after = cursor.map(After::parse).transpose()?;
    let mut cmd = redis::cmd("ZRANGEBYLEX");
    cmd.arg(Set::Attention.key(cfg))
        .arg(After::thread_min(after.as_ref()))
        .arg("+")
        .arg("LIMIT")
        .arg(0)
        .arg(limit + 1);
    let mut ids: Vec<String> = client.query(&cmd, "list the attention index").await?;
    let more_threads = ids.len() > limit;
    ids.truncate(limit);
    let fetches = ids.iter().enumerate().map(|(i, id)| {
        let min = After::run_min(after.as_ref(), id);
        thread_runs(client, scripts, cfg, id, min, limit.div_ceil(i + 1))
    });
    let pages = futures::future::try_join_all(fetches).await?;
    let (runs, mut next_cursor) = walk(&ids, &pages, limit);
    if next_cursor.is_none() && more_threads {
        next_cursor = ids.last().cloned();
    }
    let stale = ids.iter().zip(&pages).filter(|(_, p)| !p.exists);
    futures::future::join_all(stale.map(|(id, _)| repair(client, scripts, cfg, id))).await;
    Ok(AttentionPage { runs, next_cursor })
}

/// The runs of the fetched threads in order, up to `limit`, and the cursor after them when the
/// page stopped before the end of what was fetched.
fn walk(ids: &[String], pages: &[ThreadRuns], limit: usize) -> (Vec<AttentionRun>, Option<String>) {
    let mut out: Vec<AttentionRun> = Vec::new();
    for (id, page) in ids.iter().zip(pages) {
        let Ok(thread) = ThreadId::new(id.as_str()) else {
            tracing::warn!(member = %id, "redis: attention index member is no thread id");
            continue;
        };
        for (run, entry) in page.runs.iter().zip(&page.entries) {
            let (Ok(run), Some(entry)) = (RunId::new(run.as_str()), entry) else {
                continue;
            };
            if out.len() == limit {
                let last = out.last().map(|r| attention_cursor(&r.thread, &r.run));
                return (out, last);
            }
            out.push(AttentionRun {
                thread: thread.clone(),
                run,
                entry: entry.clone(),
            });
        }
        if page.more {
            let last = page.runs.last().map(|r| [id.as_str(), "/", r].concat());
            return (out, last);
        }
    }
    (out, None)
}

/// A listed thread whose set is empty: an emptying found by the lister, and its removal. A
/// failure leaves it listed, to be skipped again.
async fn repair(client: &Client, scripts: &Scripts, cfg: &RedisConfig, thread: &str) {
    let done = async {
        let g = stamped::mark_empty(client, scripts, cfg, Set::Attention, thread).await?;
        if g > 0 {
            stamped::forget(client, scripts, cfg, Set::Attention, thread, g).await?;
        }
        Ok::<_, Error>(())
    };
    if let Err(e) = done.await {
        tracing::debug!(%thread, error = %e, "redis: an empty thread stays in the attention index");
    }
}

#[cfg(test)]
mod tests;
