//! The index of runs that need attention on S3: the run's head holds its entry, a marker
//! object under `<prefix>/.afk-attention/` finds the head. These tests put markers where a
//! crashed writer would leave them (with the raw client) and count what the index costs.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use afk_core::store::{Attention, Commit, Epoch, Store};
use afk_core::{RunId, ThreadId};
use afk_store_s3::{S3Config, S3Store, S3Traffic};
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use common::{ids, step};

/// A store lists a marker that stays pending (its head at the marker's seq, not naming it)
/// for this long at a second listing as abandoned (the store's `PENDING_GRACE`, plus slack).
const PENDING_GRACE: Duration = Duration::from_millis(2500);

/// Step `i` of `run`, carrying `attention`.
fn step_with(
    t: &ThreadId,
    r: &RunId,
    epoch: Epoch,
    i: u32,
    attention: Option<Attention>,
) -> Commit {
    let mut c = step(t, r, epoch, i);
    c.attention = attention;
    c
}

fn open(entry: &str) -> Option<Attention> {
    Some(Attention::Open(entry.as_bytes().to_vec()))
}

/// The folder of the run's markers, as a bucket key prefix.
fn marker_dir(cfg: &S3Config, run: &str) -> String {
    format!("{}/.afk-attention/t/{run}/", cfg.prefix)
}

/// The markers (ids) of a run in the bucket.
async fn markers(raw: &Client, cfg: &S3Config, run: &str) -> Vec<String> {
    let dir = marker_dir(cfg, run);
    common::objects(raw, &cfg.bucket, &dir)
        .await
        .into_iter()
        .map(|k| k.strip_prefix(&dir).unwrap().to_owned())
        .collect()
}

/// Create the marker `id` of a run, as a writer does before its head swap.
async fn put_marker(raw: &Client, cfg: &S3Config, run: &str, id: &str) {
    raw.put_object()
        .bucket(&cfg.bucket)
        .key(format!("{}{id}", marker_dir(cfg, run)))
        .body(ByteStream::from(Vec::new()))
        .send()
        .await
        .unwrap();
}

/// The id of the marker a writer with `nonce` writes for the head at `seq`.
fn marker_id(seq: u64, nonce: &str) -> String {
    format!("{seq:020}-{nonce}")
}

/// The runs of thread `t` a complete listing in pages of `limit` gives, in order.
async fn listed(store: &S3Store, limit: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_attention(cursor.as_deref(), limit)
            .await
            .unwrap();
        for r in page.runs.into_iter().filter(|r| r.thread.as_str() == "t") {
            out.push((r.run.to_string(), String::from_utf8(r.entry).unwrap()));
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(r, e)| ((*r).to_owned(), (*e).to_owned()))
        .collect()
}

/// A writer that died after its marker PUT and before its head swap leaves a marker its head
/// does not name: never listed. Once the head has moved on the next listing deletes it; while
/// the head is still at the marker's seq, a store that finds it so again at a listing
/// `PENDING_GRACE` later moves the head past it (an unchanged head, one seq on, so no slow
/// writer can name it any more) and then deletes it. A marker whose run is gone goes at once,
/// and `delete_run` takes the run's own marker with it.
#[tokio::test]
async fn a_marker_without_its_head_change_is_not_listed_and_is_cleaned_up() {
    let Some((store, cfg)) = common::store("attn-dead").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, live) = ids("run_live");
    let e = store.claim(&t, &live).await.unwrap();
    store
        .commit(&step_with(&t, &live, e, 0, open("live")))
        .await
        .unwrap();
    // Died before its swap, the head still at the marker's seq (1: the claim).
    let (_, pending) = ids("run_pending");
    let ep = store.claim(&t, &pending).await.unwrap();
    put_marker(&raw, &cfg, "run_pending", &marker_id(1, "dead0001")).await;
    // Died before its swap, and the run went on without it.
    let (_, moved) = ids("run_moved");
    let em = store.claim(&t, &moved).await.unwrap();
    put_marker(&raw, &cfg, "run_moved", &marker_id(1, "dead0002")).await;
    store.commit(&step(&t, &moved, em, 0)).await.unwrap();
    // Its run was deleted (a delete_run that died before the markers).
    put_marker(&raw, &cfg, "run_gone", &marker_id(1, "dead0003")).await;

    assert_eq!(listed(&store, 1000).await, pairs(&[("run_live", "live")]));
    assert!(
        markers(&raw, &cfg, "run_moved").await.is_empty(),
        "stale: deleted"
    );
    assert!(
        markers(&raw, &cfg, "run_gone").await.is_empty(),
        "run gone: deleted"
    );
    assert_eq!(
        markers(&raw, &cfg, "run_pending").await.len(),
        1,
        "pending: kept"
    );
    assert_eq!(
        common::raw_head(&raw, &cfg, "t", "run_pending").await["seq"],
        1
    );

    tokio::time::sleep(PENDING_GRACE).await;
    assert_eq!(listed(&store, 1).await, pairs(&[("run_live", "live")]));
    assert!(
        markers(&raw, &cfg, "run_pending").await.is_empty(),
        "retired"
    );
    let head = common::raw_head(&raw, &cfg, "t", "run_pending").await;
    assert_eq!(
        (head["seq"].as_u64(), head["epoch"].as_u64()),
        (Some(2), Some(1))
    );
    // The run is not fenced by it: its writer goes on, and opens it for real.
    store
        .commit(&step_with(&t, &pending, ep, 0, open("late")))
        .await
        .unwrap();
    assert_eq!(
        listed(&store, 1000).await,
        pairs(&[("run_live", "live"), ("run_pending", "late")])
    );

    store.delete_run(&t, &live).await.unwrap();
    assert!(
        markers(&raw, &cfg, "run_live").await.is_empty(),
        "delete_run"
    );
    assert_eq!(
        listed(&store, 1000).await,
        pairs(&[("run_pending", "late")])
    );
}

/// A closing commit whose marker delete was lost (the writer died after its swap) leaves a
/// marker its head no longer names: not listed, and deleted by that listing. Reopened, the run
/// gets a new marker and is listed once, in pages of one too.
#[tokio::test]
async fn a_closed_run_whose_marker_delete_was_lost_is_not_listed() {
    let Some((store, cfg)) = common::store("attn-lost").await else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    let (t, r) = ids("run_c");
    let e = store.claim(&t, &r).await.unwrap();
    store
        .commit(&step_with(&t, &r, e, 0, open("one")))
        .await
        .unwrap();
    let first = markers(&raw, &cfg, "run_c").await;
    assert_eq!(first.len(), 1);
    let head = common::raw_head(&raw, &cfg, "t", "run_c").await;
    assert_eq!(head["attn"]["m"], first[0].as_str(), "{head}");
    store
        .commit(&step_with(&t, &r, e, 1, Some(Attention::Closed)))
        .await
        .unwrap();
    assert!(
        markers(&raw, &cfg, "run_c").await.is_empty(),
        "closed: deleted"
    );
    // The delete is lost: the marker is back.
    put_marker(&raw, &cfg, "run_c", &first[0]).await;
    assert_eq!(listed(&store, 1000).await, Vec::new());
    assert!(
        markers(&raw, &cfg, "run_c").await.is_empty(),
        "stale: deleted"
    );
    assert_eq!(store.attention(&t, &r).await.unwrap(), None);

    put_marker(&raw, &cfg, "run_c", &first[0]).await;
    store
        .commit(&step_with(&t, &r, e, 2, open("two")))
        .await
        .unwrap();
    assert_eq!(markers(&raw, &cfg, "run_c").await.len(), 2);
    assert_eq!(listed(&store, 1).await, pairs(&[("run_c", "two")]));
    assert_eq!(
        markers(&raw, &cfg, "run_c").await.len(),
        1,
        "the stale one went"
    );
}

/// A run listed on one page and then closed and opened again (a new marker, after the old one
/// in key order) is not listed again on a later page of the same listing.
#[tokio::test]
async fn a_run_reopened_during_a_listing_is_listed_once() {
    let Some((store, _cfg)) = common::store("attn-reopen").await else {
        return;
    };
    let (t, a) = ids("run_a");
    let (_, b) = ids("run_b");
    let ea = store.claim(&t, &a).await.unwrap();
    let eb = store.claim(&t, &b).await.unwrap();
    store
        .commit(&step_with(&t, &a, ea, 0, open("a")))
        .await
        .unwrap();
    store
        .commit(&step_with(&t, &b, eb, 0, open("b")))
        .await
        .unwrap();
    let page = store.list_attention(None, 1).await.unwrap();
    assert_eq!(page.runs.len(), 1);
    assert_eq!(page.runs[0].run, a);
    store.finish_run(&t, &a, ea).await.unwrap();
    store
        .commit(&step_with(&t, &a, ea, 1, open("a again")))
        .await
        .unwrap();
    let mut rest = Vec::new();
    let mut cursor = page.next_cursor;
    while let Some(c) = cursor {
        let page = store.list_attention(Some(&c), 1).await.unwrap();
        rest.extend(page.runs.into_iter().map(|r| r.run.to_string()));
        cursor = page.next_cursor;
    }
    assert_eq!(rest, ["run_b"], "run_a twice in one listing");
}

/// An opening commit whose swap loses the race to a head that moved on (here: another store's
/// commit of the same claim) writes a marker for the head it replaces in the end and names
/// that one; the marker of its first try is deleted. Thread listings never show the markers.
#[tokio::test]
async fn an_opener_that_lost_a_race_names_a_marker_for_the_head_it_replaced() {
    let Some((a, cfg)) = common::store("attn-race").await else {
        return;
    };
    let b = S3Store::open(cfg.clone()).await.unwrap();
    let raw = common::raw_client(&cfg).await;
    let (t, r) = ids("run_r");
    let e = a.claim(&t, &r).await.unwrap();
    // `b` moves the head (seq 2); `a` starts from the head its claim swapped in (seq 1).
    b.commit(&step(&t, &r, e, 0)).await.unwrap();
    a.commit(&step_with(&t, &r, e, 1, open("opened")))
        .await
        .unwrap();
    let head = common::raw_head(&raw, &cfg, "t", "run_r").await;
    let id = head["attn"]["m"].as_str().unwrap().to_owned();
    let seq: u64 = id.split_once('-').unwrap().0.parse().unwrap();
    assert_eq!(seq + 1, head["seq"].as_u64().unwrap(), "{head}");
    assert_eq!(markers(&raw, &cfg, "run_r").await, [id]);
    assert_eq!(listed(&b, 1000).await, pairs(&[("run_r", "opened")]));
    let threads = a.list_threads(None, 100).await.unwrap();
    assert_eq!(threads.threads, [t]);
}

/// A commit that opens a run writes its marker before its head swap: when the marker cannot
/// be written the commit fails and the head is untouched (the run is not open without being
/// listed); once the marker can be written it opens the run and the run is listed.
#[tokio::test]
async fn a_commit_whose_marker_cannot_be_written_does_not_open_the_run() {
    let Some((endpoint, ..)) = common::server() else {
        return;
    };
    let proxy = crate::proxy::Proxy::start(&endpoint).await;
    let cfg = common::config(&proxy.endpoint(), "attn-order")
        .unwrap()
        .with_attempt_timeout_ms(1_000)
        .with_operation_timeout_ms(10_000)
        .with_max_attempts(1);
    let store = S3Store::open(cfg).await.unwrap();
    let (t, r) = ids("run_o");
    let e = store.claim(&t, &r).await.unwrap();
    proxy.drop_marker_puts(true);
    let failed = store.commit(&step_with(&t, &r, e, 0, open("x"))).await;
    assert!(failed.is_err(), "{failed:?}");
    let entry = store.attention(&t, &r).await.unwrap();
    let runs = listed(&store, 1000).await;
    assert!(
        entry.is_none() && runs.is_empty(),
        "open ({entry:?}) without its marker: listed {runs:?}"
    );
    proxy.drop_marker_puts(false);
    store
        .commit(&step_with(&t, &r, e, 0, open("x")))
        .await
        .unwrap();
    assert_eq!(listed(&store, 1000).await, pairs(&[("run_o", "x")]));
}

/// What one commit sends.
fn delta(before: S3Traffic, after: S3Traffic) -> [u64; 3] {
    [
        after.gets - before.gets,
        after.puts - before.puts,
        after.other - before.other,
    ]
}

/// The requests of each commit of a run of `n` steps; `attention(i)` for step `i`.
async fn per_commit(
    store: &S3Store,
    run: &str,
    n: u32,
    attention: impl Fn(u32) -> Option<Attention>,
) -> Vec<[u64; 3]> {
    let (t, r) = ids(run);
    let e = store.claim(&t, &r).await.unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let before = store.traffic();
        store
            .commit(&step_with(&t, &r, e, i, attention(i)))
            .await
            .unwrap();
        out.push(delta(before, store.traffic()));
    }
    out
}

/// Commits that keep a run open (a new entry on an open run) send exactly what commits
/// without an attention send, through head flushes and merges; the opening commit adds one
/// PUT (its marker), the closing one a PUT (its entry in the index of finished runs, sent
/// with its records) and a `DeleteObjects` unless it sends one anyway.
/// `finish_run` of a finished run is the read it always was.
#[tokio::test]
async fn only_commits_that_open_or_close_a_run_add_requests() {
    let Some((store, _cfg)) = common::store("attn-traffic").await else {
        return;
    };
    const N: u32 = 70;
    let plain = per_commit(&store, "run_plain", N, |_| None).await;
    let attn = per_commit(&store, "run_attn", N, |i| match i {
        i if i == N - 1 => Some(Attention::Closed),
        i => open(&format!("step {i}")),
    })
    .await;
    assert!(
        plain.iter().any(|d| d[2] > 0),
        "some commits delete: {plain:?}"
    );
    assert_eq!(plain[0], [0, 2, 0], "a pack and the head");
    let [g, p, o] = plain[0];
    assert_eq!(attn[0], [g, p + 1, o], "opening: the marker");
    for i in 1..N as usize - 1 {
        assert_eq!(attn[i], plain[i], "commit {i} keeps the run open");
    }
    let [g, p, o] = plain[N as usize - 1];
    assert_eq!(
        attn[N as usize - 1],
        [g, p + 1, o.max(1)],
        "closing: the finished entry and the marker delete"
    );
    let (t, r) = ids("run_attn");
    let before = store.traffic();
    store.finish_run(&t, &r, Epoch(1)).await.unwrap();
    assert_eq!(
        delta(before, store.traffic()),
        [1, 0, 0],
        "finished already"
    );
}
