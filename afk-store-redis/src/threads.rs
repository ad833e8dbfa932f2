//! Enumerating threads: the store's thread index `{<prefix>}#threads`, a sorted set of thread
//! ids (all with score 0, so ordered by id), listed with `ZRANGEBYLEX` one page per call.
//!
//! `claim` adds the thread (`ZADD NX`) *before* its claim script runs, and every key of a
//! thread is written by a claim or by a commit that needs one, so every thread that holds a key
//! is in the index. The index lives in its own hash slot (`{<prefix>}`), apart from the
//! threads' slots, so on Cluster it cannot join the claim's script: it is a separate command,
//! and a crash between the two leaves at most an id whose thread holds nothing. Members are
//! never removed (removing one could race with a new claim of that thread); instead a listing
//! keeps only threads whose own key index `{<prefix>:T}#index` exists (Redis drops an empty
//! sorted set, and expiry drops a thread's index with its last run), checked with one `EXISTS`
//! per listed thread, sent concurrently.

use afk_core::store::{ThreadPage, thread_list_limit};
use afk_core::{Error, Result, ThreadId};

use crate::config::RedisConfig;
use crate::conn::Client;

/// The physical key of the thread index.
fn threads_key(cfg: &RedisConfig) -> Vec<u8> {
    format!("{{{}}}#threads", cfg.prefix).into_bytes()
}

/// The thread's own key index (as `store.rs` names it).
fn thread_index(cfg: &RedisConfig, thread: &str) -> Vec<u8> {
    format!("{{{}:{}}}#index", cfg.prefix, thread).into_bytes()
}

/// Add `thread` to the thread index (before anything of it is written).
pub(crate) async fn remember(client: &Client, cfg: &RedisConfig, thread: &ThreadId) -> Result<()> {
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(threads_key(cfg))
        .arg("NX")
        .arg(0)
        .arg(thread.as_str());
    let _: i64 = client
        .query(&cmd, "add the thread to the thread index")
        .await?;
    Ok(())
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
