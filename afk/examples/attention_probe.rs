//! What finding the runs that need attention costs: the index (`Store::list_attention`)
//! against the scan a recovery worker does without it.
//!
//! `cargo run -p afk --features redis --example attention_probe -- URL [--finished N] [--open M]
//! [--runs-per-thread K] [--concurrency C] [--written 1]` opens the store at `URL` (`afk::open`; a Redis URL
//! without `prefix=` gets a fresh one, whose keys are deleted at the end), then writes N
//! finished runs (default 100,000) and M unfinished ones (default 100), K runs per thread
//! (default 10; the unfinished ones each in a thread of finished ones), as the runner writes
//! them: a claim, a commit of the first record and the pointer carrying `Attention::Open` with
//! a ~200-byte entry, and for a finished run a commit of the terminal record carrying
//! `Attention::Closed` (the commits of 1,000 runs at a time in one `commit_batch`, C claims in
//! flight, default 64); with `--written 1` it writes nothing and measures the runs an earlier
//! probe with the same layout left (an S3 bucket or a Redis prefix given in the URL). Then it
//! measures, each twice (the first to warm up):
//! - **index**: `list_attention` pages of 1,000 until the listing is complete;
//! - **scan**: `list_threads` pages of 1,000, and for each thread (C at a time) `list` of its
//!   `checkpoint:` keys to find the `checkpoint:<run>:latest` pointers and `get_many` of them to
//!   see which runs have not ended;
//!
//! and prints, for each, the time, the store calls (every trait method call, counted by a
//! wrapper) and, on a single Redis node, the commands the server ran (`INFO commandstats`,
//! the scripts' own calls included; other clients of the server count too), on S3 the
//! requests the store sent (`S3Store::traffic`: GET, PUT, LIST pages and DELETE). A store without
//! the index (`Capabilities::attention` off) is measured for the scan only, and the probe says
//! so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a probe: failures should stop it

#[path = "../benches/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use afk::store::{Attention, Commit, Epoch, HookStore, Store};
use afk::{RunId, ThreadId};
use futures::{StreamExt, TryStreamExt};
use support::counting::{Counter, CountingStore};

/// What the command line asks for.
struct Args {
    url: String,
    finished: usize,
    open: usize,
    per_thread: usize,
    concurrency: usize,
    /// Measure the runs an earlier probe with the same layout wrote (`--written 1`).
    written: bool,
    /// The key prefix the probe chose (Redis URLs without one), to delete its keys after.
    prefix: Option<String>,
}

fn usage(why: &str) -> ! {
    eprintln!(
        "attention_probe: {why}\nusage: attention_probe URL [--finished N] [--open M] \
         [--runs-per-thread K] [--concurrency C]"
    );
    std::process::exit(2)
}

impl Args {
    fn parse() -> Args {
        let mut it = std::env::args().skip(1);
        let mut url = it.next().unwrap_or_else(|| usage("no store URL"));
        let mut args = Args {
            url: String::new(),
            finished: 100_000,
            open: 100,
            per_thread: 10,
            concurrency: 64,
            written: false,
            prefix: None,
        };
        while let Some(flag) = it.next() {
            let n: usize = it
                .next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .unwrap_or_else(|| usage(&format!("{flag} needs a number")));
            match flag.as_str() {
                "--finished" => args.finished = n,
                "--open" => args.open = n,
                "--runs-per-thread" => args.per_thread = n.max(1),
                "--concurrency" => args.concurrency = n.max(1),
                "--written" => args.written = n > 0,
                _ => usage(&format!("unknown flag {flag}")),
            }
        }
        if url.starts_with("redis") && !url.contains("prefix=") {
            let prefix = support::servers::unique("attnprobe");
            let sep = if url.contains('?') { '&' } else { '?' };
            url = format!("{url}{sep}prefix={prefix}");
            args.prefix = Some(prefix);
        }
        args.url = url;
        args
    }
}

/// The runs to write: `(thread, run, finished)`, `per_thread` to a thread, the unfinished ones
/// spread over the threads.
fn layout(a: &Args) -> Vec<(ThreadId, RunId, bool)> {
    let total = a.finished + a.open;
    let threads = total.div_ceil(a.per_thread);
    let every = (threads / a.open.max(1)).max(1);
    let mut out = Vec::with_capacity(total);
    let mut open_left = a.open;
    for t in 0..threads {
        let thread = ThreadId::new(format!("thread-{t:07}")).unwrap();
        for r in 0..a.per_thread {
            if out.len() == total {
                break;
            }
            let finished = !(r == 0 && t % every == 0 && open_left > 0);
            if !finished {
                open_left -= 1;
            }
            out.push((
                thread.clone(),
                RunId::new(format!("run-{r:03}")).unwrap(),
                finished,
            ));
        }
    }
    out
}

/// The runner's entry for a run in progress, about 200 bytes.
fn entry(run: &RunId) -> Vec<u8> {
    format!(
        "{{\"state\":\"running\",\"owner\":\"probe-worker-{}\",\"lease_until_ms\":{},\
         \"not_before_ms\":null,\"run\":\"{run}\",\"note\":\"written by attention_probe\"}}",
        std::process::id(),
        u64::MAX / 2
    )
    .into_bytes()
}

fn commit(t: &ThreadId, r: &RunId, e: Epoch, step: &str, a: Attention) -> Commit {
    let record = format!("{{\"kind\":\"{step}\",\"run\":\"{r}\"}}").into_bytes();
    Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch: e,
        puts: vec![(format!("checkpoint:{r}:{step}"), record.clone())],
        latest: Some(record),
        attention: Some(a),
    }
}

/// Write the runs, a chunk at a time: the claims (C in flight), then the opening commits of
/// the chunk in one `commit_batch`, then the closing ones.
async fn write(store: &dyn Store, runs: &[(ThreadId, RunId, bool)], concurrency: usize) {
    let started = Instant::now();
    for (i, chunk) in runs.chunks(1000).enumerate() {
        let epochs: Vec<Epoch> = futures::stream::iter(chunk)
            .map(|(t, r, _)| store.claim(t, r))
            .buffered(concurrency)
            .try_collect()
            .await
            .expect("claim");
        let opens: Vec<Commit> = chunk
            .iter()
            .zip(&epochs)
            .map(|((t, r, _), e)| commit(t, r, *e, "0:step_started", Attention::Open(entry(r))))
            .collect();
        store
            .commit_batch(&opens)
            .await
            .into_iter()
            .for_each(|r| r.expect("open"));
        let closes: Vec<Commit> = chunk
            .iter()
            .zip(&epochs)
            .filter(|((_, _, finished), _)| *finished)
            .map(|((t, r, _), e)| commit(t, r, *e, "1:run_completed", Attention::Closed))
            .collect();
        store
            .commit_batch(&closes)
            .await
            .into_iter()
            .for_each(|r| r.expect("close"));
        if i % 20 == 19 {
            eprintln!(
                "  {} runs written, {:.0?}",
                (i + 1) * 1000,
                started.elapsed()
            );
        }
    }
    eprintln!("wrote {} runs in {:.1?}", runs.len(), started.elapsed());
}

/// Every run the index lists.
async fn by_index(store: &dyn Store) -> BTreeSet<(ThreadId, RunId)> {
    let mut out = BTreeSet::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_attention(cursor.as_deref(), 1000)
            .await
            .expect("list_attention");
        out.extend(page.runs.into_iter().map(|r| (r.thread, r.run)));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

/// The runs of `thread` whose pointer is not a terminal record.
async fn unfinished_in(store: &dyn Store, thread: ThreadId) -> Vec<(ThreadId, RunId)> {
    let mut latest = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list(&thread, "checkpoint:", cursor.as_deref(), 1000)
            .await
            .expect("list");
        latest.extend(page.keys.into_iter().filter(|k| k.ends_with(":latest")));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let pointers = store.get_many(&thread, &latest).await.expect("get_many");
    let mut out = Vec::new();
    for (key, p) in latest.iter().zip(pointers) {
        let ended = p.is_some_and(|p| p.windows(13).any(|w| w == b"run_completed"));
        let run = key.split(':').nth(1).expect("a pointer key names its run");
        if !ended {
            out.push((thread.clone(), RunId::new(run).unwrap()));
        }
    }
    out
}

/// Every unfinished run, found by reading every thread's pointers.
async fn by_scan(store: &dyn Store, concurrency: usize) -> BTreeSet<(ThreadId, RunId)> {
    let mut threads = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_threads(cursor.as_deref(), 1000)
            .await
            .expect("list_threads");
        threads.extend(page.threads);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    futures::stream::iter(threads)
        .map(|t| unfinished_in(store, t))
        .buffer_unordered(concurrency)
        .flat_map(futures::stream::iter)
        .collect()
        .await
}

/// What the server did since the last call: the commands a single Redis node ran, or the
/// requests an S3 store sent (`None` elsewhere).
enum ServerCount {
    None,
    Redis(redis::aio::MultiplexedConnection),
    #[cfg(feature = "s3")]
    S3 {
        store: Arc<afk::backend::s3::S3Store>,
        seen: u64,
    },
}

impl ServerCount {
    async fn new(url: &str, _s3: Option<Arc<S3Handle>>) -> ServerCount {
        #[cfg(feature = "s3")]
        if let Some(store) = _s3 {
            let mut count = ServerCount::S3 { store, seen: 0 };
            count.take().await;
            return count;
        }
        if !url.starts_with("redis://") || url.contains(',') {
            return ServerCount::None;
        }
        let base = url.split('?').next().unwrap_or(url);
        let client = redis::Client::open(base).expect("redis url");
        match client.get_multiplexed_async_connection().await {
            Ok(c) => ServerCount::Redis(c),
            Err(_) => ServerCount::None,
        }
    }

    /// Commands (Redis: without the probe's own `INFO` and `CONFIG`) or requests (S3: every
    /// GET, PUT, LIST and DELETE) since the last call.
    async fn take(&mut self) -> Option<u64> {
        let c = match self {
            ServerCount::None => return None,
            ServerCount::Redis(c) => c,
            #[cfg(feature = "s3")]
            ServerCount::S3 { store, seen } => {
                let t = store.traffic();
                let total = t.gets + t.puts + t.other;
                let n = total - *seen;
                *seen = total;
                return Some(n);
            }
        };
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(c)
            .await
            .ok()?;
        let n = info
            .lines()
            .filter(|l| !l.starts_with("cmdstat_info") && !l.starts_with("cmdstat_config"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(c)
            .await
            .ok()?;
        Some(n)
    }
}

/// One measurement: time, store calls, server commands, and how many runs it found.
async fn measure<F: std::future::Future<Output = BTreeSet<(ThreadId, RunId)>>>(
    name: &str,
    counter: &Counter,
    server: &mut ServerCount,
    f: impl Fn() -> F,
) -> BTreeSet<(ThreadId, RunId)> {
    let mut found = BTreeSet::new();
    for round in ["warm-up", "measured"] {
        server.take().await;
        let calls = counter.calls();
        let started = Instant::now();
        found = f().await;
        let took: Duration = started.elapsed();
        let calls = counter.calls() - calls;
        let commands = server
            .take()
            .await
            .map_or("-".to_owned(), |n| n.to_string());
        println!(
            "| {name} | {round} | {} | {:.1} ms | {calls} | {commands} |",
            found.len(),
            took.as_secs_f64() * 1000.0
        );
    }
    found
}

fn main() {
    let args = Args::parse();
    support::runtime().block_on(async {
        let (inner, s3) = open(&args.url).await;
        let counting: Arc<CountingStore> = Arc::new(HookStore::new(inner, Counter::default()));
        let store: &dyn Store = counting.as_ref();
        let caps = store.capabilities();
        let runs = layout(&args);
        println!(
            "store `{}`: {} finished runs, {} unfinished, {} runs per thread ({} threads)\n",
            caps.name,
            args.finished,
            args.open,
            args.per_thread,
            runs.len().div_ceil(args.per_thread)
        );
        if !args.written {
            write(store, &runs, args.concurrency).await;
        }
        let want: BTreeSet<_> = runs
            .iter()
            .filter(|(_, _, finished)| !finished)
            .map(|(t, r, _)| (t.clone(), r.clone()))
            .collect();
        let mut server = ServerCount::new(&args.url, s3).await;
        println!("| how | round | runs found | time | store calls | server commands (Redis) or requests (S3) |");
        println!("|---|---|---|---|---|---|");
        if caps.attention {
            let found = measure("index", counting.hooks(), &mut server, || by_index(store)).await;
            assert_eq!(
                found, want,
                "the index lists other runs than the unfinished ones"
            );
        } else {
            println!(
                "| index | unsupported: the {} store keeps no attention index | | | | |",
                caps.name
            );
        }
        if caps.list_threads {
            let scan = || by_scan(store, args.concurrency);
            let found = measure("scan", counting.hooks(), &mut server, scan).await;
            assert_eq!(
                found, want,
                "the scan found other runs than the unfinished ones"
            );
        } else {
            println!(
                "| scan | unsupported: the {} store cannot list its threads | | | | |",
                caps.name
            );
        }
        if let Some(prefix) = &args.prefix {
            clean(&args.url, prefix).await;
        }
    });
}

/// The S3 store behind an `s3://` URL, kept to read its request counters.
#[cfg(feature = "s3")]
type S3Handle = afk::backend::s3::S3Store;
#[cfg(not(feature = "s3"))]
type S3Handle = ();

/// The store at `url`, and for an `s3://` URL the S3 store itself (for its request counts).
async fn open(url: &str) -> (Arc<dyn Store>, Option<Arc<S3Handle>>) {
    #[cfg(feature = "s3")]
    if url.starts_with("s3://") {
        let s3 = afk::backend::s3::S3Store::from_url(url)
            .await
            .unwrap_or_else(|e| usage(&e.to_string()));
        let s3 = Arc::new(s3);
        return (s3.clone(), Some(s3));
    }
    let store = afk::open(url)
        .await
        .unwrap_or_else(|e| usage(&e.to_string()));
    (store, None)
}

/// The plain `redis://host:port` URLs of the nodes of a Redis URL: the seeds of a
/// `redis+cluster://` URL, or the node itself (credentials and TLS are not handled: a probe).
fn node_urls(url: &str) -> Vec<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Vec::new();
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    match scheme {
        "redis" => vec![format!("redis://{authority}")],
        "redis+cluster" => authority
            .split(',')
            .map(|n| format!("redis://{n}"))
            .collect(),
        _ => Vec::new(),
    }
}

/// Delete the keys under the probe's own prefix, on every node the URL names (one `UNLINK` per
/// key: on Cluster the keys of one node span slots).
async fn clean(url: &str, prefix: &str) {
    let pattern = format!("{{{prefix}*");
    let mut deleted = 0;
    for node in node_urls(url) {
        let client = redis::Client::open(node.as_str()).expect("node url");
        let mut c = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to a node");
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut c)
                .await
                .expect("scan");
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("UNLINK").arg(k).ignore();
            }
            let _: () = pipe.query_async(&mut c).await.expect("unlink");
            deleted += keys.len();
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    eprintln!("deleted {deleted} keys of prefix {prefix}");
}
