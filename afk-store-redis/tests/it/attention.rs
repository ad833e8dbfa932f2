//! The attention index on a real Redis and Redis Cluster: with a TTL, an open run outlives it
//! and stays listed while a closed one expires and leaves the index; a run opened after its
//! thread's last run closed is listed; listers racing openers and closers never lose an open
//! run; a listing reads no finished run. The cross-thread index `{<prefix>}#attention` is
//! read raw where the test is about it.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use afk_core::store::{Attention, Commit, Epoch, Store, latest_key};
use afk_core::{RunId, ThreadId};
use afk_store_redis::RedisStore;
use common::{connect, raw_query, run, thread, topologies};

/// A commit of one record and the pointer on it, carrying `attention`.
fn commit(t: &ThreadId, r: &RunId, e: Epoch, step: u64, attention: Attention) -> Commit {
    let mut c = common::commit(
        t,
        r,
        e,
        &[(&format!("checkpoint:{r}:{step}:step_started"), b"rec")],
        Some(b"ptr"),
    );
    c.attention = Some(attention);
    c
}

fn open(entry: &str) -> Attention {
    Attention::Open(entry.as_bytes().to_vec())
}

/// Claim `r` and commit it open with `entry`; returns the epoch.
async fn opened(s: &RedisStore, t: &ThreadId, r: &RunId, entry: &str) -> Epoch {
    let e = s.claim(t, r).await.unwrap();
    s.commit(&commit(t, r, e, 0, open(entry))).await.unwrap();
    e
}

/// Every run listed by a complete listing in pages of `limit`, checked for duplicates.
async fn listed(s: &dyn Store, limit: usize) -> BTreeMap<(ThreadId, RunId), Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = s.list_attention(cursor.as_deref(), limit).await.unwrap();
        assert!(page.runs.len() <= limit, "a page over the limit");
        for r in page.runs {
            let id = (r.thread, r.run);
            assert!(
                out.insert(id.clone(), r.entry).is_none(),
                "listed twice: {id:?}"
            );
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

/// The members of the raw cross-thread attention index.
async fn members(s: &RedisStore) -> BTreeSet<String> {
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(format!("{{{}}}#attention", s.config().prefix))
        .arg(0)
        .arg(-1);
    raw_query::<Vec<String>>(s.config(), cmd)
        .await
        .into_iter()
        .collect()
}

async fn pttl(s: &RedisStore, t: &ThreadId, key: &str) -> i64 {
    let mut cmd = redis::cmd("PTTL");
    cmd.arg(format!("{{{}:{t}}}:{key}", s.config().prefix));
    raw_query(s.config(), cmd).await
}

/// With a TTL of one second: a run left open (paused) for twice the TTL keeps every key and
/// its place in the index; a closed run is gone after the TTL and out of the index, and so is
/// the thread that held only it; a closed run claimed again before the TTL stops expiring.
#[tokio::test]
async fn an_open_run_outlives_the_ttl_listed_and_a_closed_one_expires_out_of_the_index() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg.with_ttl_s(1)).await;
        let (t, lone) = (thread("ttl"), thread("ttl-lone"));
        let (paused, done, back) = (run("r_paused"), run("r_done"), run("r_back"));
        opened(&s, &t, &paused, "paused").await;
        for (th, r) in [(&t, &done), (&lone, &done), (&t, &back)] {
            let e = opened(&s, th, r, "running").await;
            s.commit(&commit(th, r, e, 1, Attention::Closed))
                .await
                .unwrap();
        }
        s.claim(&t, &back).await.unwrap();
        assert_eq!(members(&s).await, BTreeSet::from([t.to_string()]), "{topo}");
        tokio::time::sleep(Duration::from_millis(2200)).await;

        let all = listed(&s, 100).await;
        let want = BTreeMap::from([((t.clone(), paused.clone()), b"paused".to_vec())]);
        assert_eq!(all, want, "{topo}: the listing after the TTL");
        for key in [
            latest_key(&paused),
            format!("checkpoint:{paused}:0:step_started"),
        ] {
            assert!(s.get(&t, &key).await.unwrap().is_some(), "{topo}: {key}");
            assert_eq!(pttl(&s, &t, &key).await, -1, "{topo}: {key} expires");
        }
        for (th, r) in [(&t, &done), (&lone, &done)] {
            let keys = s.list(th, &format!("checkpoint:{r}:"), None, 100).await;
            assert!(keys.unwrap().keys.is_empty(), "{topo}: {th}/{r} is left");
            assert!(s.get(th, &format!("run:{r}")).await.unwrap().is_none());
            assert!(s.attention(th, r).await.unwrap().is_none(), "{topo}");
        }
        assert!(
            s.get(&t, &latest_key(&back)).await.unwrap().is_some(),
            "{topo}: a closed run claimed again expired"
        );
        assert!(!members(&s).await.contains(lone.as_str()), "{topo}");
    }
}

/// A run claimed while its thread held an open run, whose other run then closes before it
/// opens: the thread stays in the index, since the claim is pending (were it removed, an
/// opener that died between its commit and its own add would leave its run out for good), and
/// the run is listed once it opens. A thread whose last run closes with no claim pending
/// leaves the index.
#[tokio::test]
async fn a_run_opened_after_its_threads_last_run_closed_is_listed() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("reopen");
        let (a, b) = (run("r_a"), run("r_b"));
        let ea = opened(&s, &t, &a, "a").await;
        let eb = s.claim(&t, &b).await.unwrap();
        s.commit(&commit(&t, &a, ea, 1, Attention::Closed))
            .await
            .unwrap();
        let thread_set = BTreeSet::from([t.to_string()]);
        assert_eq!(members(&s).await, thread_set, "{topo}: a claim is pending");
        s.commit(&commit(&t, &b, eb, 0, open("b"))).await.unwrap();
        assert_eq!(members(&s).await, thread_set, "{topo}");
        let want = BTreeMap::from([((t.clone(), b.clone()), b"b".to_vec())]);
        assert_eq!(listed(&s, 10).await, want, "{topo}");
        s.commit(&commit(&t, &b, eb, 1, Attention::Closed))
            .await
            .unwrap();
        assert!(members(&s).await.is_empty(), "{topo}: the emptied thread");
    }
}

/// Per thread, workers each open and close runs of their own (claim, an opening commit, a
/// closing commit), so a thread's set fills and empties while others open in it; listers page
/// through the index (and repair empty threads) all along. After each round, every run left
/// open is listed, with its entry, and nothing else of ours; a thread whose run stays open
/// throughout is in every listing. Requires that many removals raced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lister_racing_openers_and_closers_never_loses_an_open_run() {
    const ROUNDS: usize = 20;
    const THREADS: usize = 6;
    for (topo, cfg) in topologies() {
        let s = Arc::new(connect(cfg).await);
        let steady = thread("steady");
        opened(&s, &steady, &run("r_steady"), "steady").await;
        let mut left_open = BTreeSet::new();
        for round in 0..ROUNDS {
            let threads: Vec<_> = (0..THREADS).map(|_| thread("race")).collect();
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let lister = tokio::spawn(lister(s.clone(), steady.clone(), done.clone()));
            let mut tasks = Vec::new();
            for (i, t) in threads.iter().enumerate() {
                for worker in 0..3 {
                    let keep = (i + worker + round) % 4 == 0;
                    tasks.push(tokio::spawn(cycle(s.clone(), t.clone(), worker, keep)));
                }
            }
            for task in tasks {
                if let Some(kept) = task.await.unwrap() {
                    left_open.insert(kept);
                }
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let listings = lister.await.unwrap();
            assert!(listings > 0, "{topo}: no listing finished during the round");
            let ours: BTreeSet<_> = listed(s.as_ref(), 7)
                .await
                .into_keys()
                .filter(|(t, _)| t != &steady)
                .collect();
            assert_eq!(ours, left_open, "{topo}: round {round}");
        }
        let mut cmd = redis::cmd("GET");
        cmd.arg(format!("{{{}}}#attention:removals", s.config().prefix));
        let removals: Option<u64> = raw_query(s.config(), cmd).await;
        assert!(
            removals.unwrap_or(0) > 100,
            "{topo}: too few removals to race: {removals:?}"
        );
        println!(
            "{topo}: {removals:?} removals, {} runs left open",
            left_open.len()
        );
    }
}

/// Runs each worker of the race opens (and closes, but for the last one when it keeps it).
const CYCLES: usize = 6;

/// One worker's runs in `t`: `CYCLES` runs opened and closed, the last one left open when
/// `keep`; returns it.
async fn cycle(
    s: Arc<RedisStore>,
    t: ThreadId,
    worker: usize,
    keep: bool,
) -> Option<(ThreadId, RunId)> {
    for k in 0..CYCLES {
        let r = run(&format!("w{worker}_{k}"));
        let e = if k % 2 == 0 {
            s.claim(&t, &r).await.unwrap()
        } else {
            s.claim_if_new(&t, &r).await.unwrap().unwrap()
        };
        // A runner reads the run between its claim and its first commit: the window in which
        // another worker's closing empties the thread, or a lister repairs it.
        tokio::time::sleep(Duration::from_millis(((worker + k) % 3) as u64)).await;
        s.commit(&commit(&t, &r, e, 0, open(&format!("{worker}/{k}"))))
            .await
            .unwrap();
        if keep && k == CYCLES - 1 {
            return Some((t, r));
        }
        s.commit(&commit(&t, &r, e, 1, Attention::Closed))
            .await
            .unwrap();
    }
    None
}

/// Complete listings in small pages until `done`; each must hold the steady run. Returns how
/// many completed.
async fn lister(
    s: Arc<RedisStore>,
    steady: ThreadId,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> usize {
    let mut n = 0;
    loop {
        let stop = done.load(std::sync::atomic::Ordering::Relaxed);
        let all = listed(s.as_ref(), 3).await;
        assert!(
            all.keys().any(|(t, _)| t == &steady),
            "a listing lost the steady run"
        );
        n += 1;
        if stop {
            return n;
        }
    }
}

/// The server's command counts since `CONFIG RESETSTAT`, scripts' own calls included, without
/// the `INFO` and `CONFIG` of the test itself.
async fn commands(url: &str) -> BTreeMap<String, u64> {
    let mut c = common::raw(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if !(name.starts_with("info") || name.starts_with("config")) {
            out.insert(name.to_owned(), calls);
        }
    }
    out
}

/// A store with 300 threads each holding one finished run, and a thread holding 600 finished
/// runs and 2 open ones, plus 3 threads with one open run each: a complete listing costs a
/// handful of commands per thread with open runs (counted by the server, scripts included),
/// none for the finished runs.
#[tokio::test]
async fn listing_reads_no_finished_run() {
    if common::require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let server = common::OwnServer::start(&[]);
    let s = connect(common::config(&server.url())).await;
    let busy = thread("busy");
    let mut want = BTreeSet::new();
    for r in [run("r_open1"), run("r_open2")] {
        opened(&s, &busy, &r, "open").await;
        want.insert((busy.clone(), r));
    }
    for _ in 0..3 {
        let (t, r) = (thread("open"), run("r_open"));
        opened(&s, &t, &r, "open").await;
        want.insert((t, r));
    }
    let finished: Vec<(ThreadId, RunId)> = (0..600)
        .map(|i| (busy.clone(), run(&format!("r_done{i}"))))
        .chain((0..300).map(|_| (thread("done"), run("r_done"))))
        .collect();
    for chunk in finished.chunks(100) {
        let mut epochs = Vec::new();
        for (t, r) in chunk {
            epochs.push(s.claim(t, r).await.unwrap());
        }
        for attention in [open("running"), Attention::Closed] {
            let commits: Vec<Commit> = chunk
                .iter()
                .zip(&epochs)
                .map(|((t, r), e)| commit(t, r, *e, 0, attention.clone()))
                .collect();
            for r in s.commit_batch(&commits).await {
                r.unwrap();
            }
        }
    }
    // Load the scripts through another prefix (a fresh server answers the first `EVALSHA`
    // with `NOSCRIPT`); a listing of this store would repair its index first.
    let other = connect(common::config(&server.url())).await;
    opened(&other, &thread("warm"), &run("r_warm"), "warm").await;
    listed(&other, 1000).await;
    let mut c = common::raw(&server.url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c)
        .await
        .unwrap();
    let all = listed(&s, 1000).await;
    let counts = commands(&server.url()).await;
    assert_eq!(all.keys().cloned().collect::<BTreeSet<_>>(), want);
    let total: u64 = counts.values().sum();
    // One ZRANGEBYLEX of threads, then per thread with open runs one script of three commands.
    assert!(
        total <= 1 + 4 * 4,
        "listing 5 open runs beside 900 finished ones took {total} commands: {counts:?}"
    );
    println!("listing: {total} commands: {counts:?}");
}
