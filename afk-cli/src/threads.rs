//! `afk threads`: the threads of a store, newest activity first, with how many runs each holds
//! and how many of them need a look (paused, uncertain, failed, in progress).

use std::process::ExitCode;

use afk_core::ThreadId;
use afk_core::store::{Store, StoreExt};
use serde_json::json;

use super::output::{Ctx, Progress, Report, table, utc};
use super::status::run_status;

/// `afk threads`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show at most this many threads (the newest).
    #[arg(long, conflicts_with = "page_size")]
    limit: Option<usize>,
    /// One page of the store's own listing instead of every thread: at most this many threads
    /// (1 to 1000), in the store's order, newest activity first within the page; the output
    /// ends with the cursor of the next page.
    #[arg(long)]
    page_size: Option<usize>,
    /// With `--page-size`: the page that starts at this cursor (printed by the previous page).
    #[arg(long, requires = "page_size")]
    cursor: Option<String>,
    /// Redis only: first rebuild the store's thread index from the data (adds threads written
    /// before the index existed, drops threads that hold nothing; walks every key with SCAN).
    #[arg(long)]
    rebuild_index: bool,
}

#[derive(Debug, Default, serde::Serialize)]
struct Row {
    thread: String,
    runs: usize,
    paused: usize,
    uncertain: usize,
    failed: usize,
    in_progress: usize,
    last_activity_ms: Option<u64>,
}

/// JSON: `{"store", "threads": [{"thread", "runs", "paused", "uncertain", "failed",
/// "in_progress", "last_activity_ms"}]}`, newest activity first; threads without runs left
/// out; with `--rebuild-index` also `"index_rebuild": {"added", "removed"}`; with
/// `--page-size` also `"next_cursor"` (a string, or null on the last page). Exit 1 when the
/// store cannot list its threads or does not know the cursor.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    let store_name = ctx.store_name();
    let url = ctx.url.clone();
    ctx.run("threads", |store| async move {
        let rebuilt = if args.rebuild_index {
            Some(rebuild_index(&url).await?)
        } else {
            None
        };
        let shown = match args.page_size {
            Some(size) => Shown::Page {
                cursor: args.cursor,
                size,
            },
            None => Shown::Newest(args.limit),
        };
        report(store.as_ref(), &store_name, shown, rebuilt, progress).await
    })
}

/// Which threads a report shows.
#[derive(Debug, Clone)]
pub enum Shown {
    /// Every thread, or only this many of the newest.
    Newest(Option<usize>),
    /// One page of the store's listing ([`Store::list_threads`]): at most `size` threads
    /// (clamped by the store), starting at `cursor`.
    Page {
        /// The cursor of the page; `None` for the first.
        cursor: Option<String>,
        /// Threads per page.
        size: usize,
    },
}

/// The threads `shown` selects, and the cursor of the next page (`Some(None)` on the last
/// page; `None` when not paging).
async fn listed(
    store: &dyn Store,
    shown: &Shown,
) -> afk_core::Result<(Vec<ThreadId>, Option<Option<String>>)> {
    match shown {
        Shown::Newest(_) => Ok((store.list_all_threads().await?, None)),
        Shown::Page { cursor, size } => {
            let page = store.list_threads(cursor.as_deref(), *size).await?;
            Ok((page.threads, Some(page.next_cursor)))
        }
    }
}

/// The report of `afk threads` on `store` (named `store_name`, redacted): the threads
/// `shown` selects, newest activity first; `rebuilt` is what `--rebuild-index` did.
pub async fn report(
    store: &dyn Store,
    store_name: &str,
    shown: Shown,
    rebuilt: Option<(u64, u64)>,
    progress: Progress,
) -> afk_core::Result<Report> {
    let (threads, next) = listed(store, &shown).await?;
    let mut rows = Vec::new();
    for (i, thread) in threads.iter().enumerate() {
        progress.tick("reading threads", i, Some(threads.len()));
        let row = thread_row(store, thread).await?;
        if row.runs > 0 {
            rows.push(row);
        }
    }
    progress.done();
    rows.sort_by(|a, b| {
        b.last_activity_ms
            .cmp(&a.last_activity_ms)
            .then_with(|| a.thread.cmp(&b.thread))
    });
    if let Shown::Newest(Some(n)) = shown {
        rows.truncate(n);
    }
    let mut human = rebuilt.map_or_else(String::new, |(added, removed)| {
        format!("thread index rebuilt: {added} thread(s) added, {removed} removed\n")
    });
    if rows.is_empty() && matches!(next, Some(Some(_))) {
        human.push_str("no threads with runs on this page\n");
    } else if rows.is_empty() {
        human.push_str(&format!("no threads in {store_name}\n"));
    } else {
        human.push_str(&rows_table(&rows));
    }
    let mut doc = json!({"store": store_name, "threads": rows});
    if let Some((added, removed)) = rebuilt {
        doc["index_rebuild"] = json!({"added": added, "removed": removed});
    }
    if let Some(next) = next {
        match &next {
            Some(c) => human.push_str(&format!("next page: --cursor {c}\n")),
            None => human.push_str("last page\n"),
        }
        doc["next_cursor"] = json!(next);
    }
    Ok(Report::ok(doc, human))
}

/// One thread's row: its runs counted by state, and its newest activity.
async fn thread_row(store: &dyn Store, thread: &ThreadId) -> afk_core::Result<Row> {
    let mut row = Row {
        thread: thread.to_string(),
        ..Row::default()
    };
    for run in store.list_runs(thread).await? {
        let st = run_status(store, thread, &run).await?;
        row.runs += 1;
        match st.state.as_str() {
            "paused" => row.paused += 1,
            "uncertain" => row.uncertain += 1,
            "failed" | "unreadable" => row.failed += 1,
            "in_progress" | "suspended" | "claimed" => row.in_progress += 1,
            _ => {}
        }
        row.last_activity_ms = row.last_activity_ms.max(st.timestamp_ms);
    }
    Ok(row)
}

/// The rows as a table for people.
fn rows_table(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.thread.clone(),
                r.runs.to_string(),
                r.paused.to_string(),
                r.uncertain.to_string(),
                r.failed.to_string(),
                r.in_progress.to_string(),
                r.last_activity_ms.map_or_else(|| "-".to_owned(), utc),
            ]
        })
        .collect();
    table(
        &[
            "THREAD",
            "RUNS",
            "PAUSED",
            "UNCERTAIN",
            "FAILED",
            "IN_PROGRESS",
            "LAST_ACTIVITY",
        ],
        &cells,
    )
}

/// `--rebuild-index`: (threads added, threads removed). Only Redis keeps a thread index; the
/// other stores list threads from their data and have nothing to rebuild.
async fn rebuild_index(url: &str) -> afk_core::Result<(u64, u64)> {
    let scheme = url
        .split_once("://")
        .map_or("", |(s, _)| s)
        .to_ascii_lowercase();
    if !scheme.starts_with("redis") {
        return Err(afk_core::Error::unsupported(format!(
            "--rebuild-index is for Redis stores; `{scheme}://` lists threads from its data \
             and keeps no index"
        )));
    }
    #[cfg(feature = "redis")]
    {
        let store = afk::backend::redis::RedisStore::from_url(url).await?;
        let r = store.rebuild_thread_index().await?;
        Ok((r.added, r.removed))
    }
    #[cfg(not(feature = "redis"))]
    Err(afk_core::Error::unsupported(
        "--rebuild-index needs the `redis` feature of afk-cli",
    ))
}
