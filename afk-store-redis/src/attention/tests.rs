//! The interleavings the attention index's protocol exists for, driven step by step against
//! the real servers (`AFK_TEST_REDIS_URL`, `AFK_TEST_REDIS_CLUSTER_URLS`): a commit's script
//! and its update of `{<prefix>}#attention` are separate round trips, and a closer's or a
//! lister's removal, or a committer's death, falls between them.

#![allow(clippy::unwrap_used)]

use afk_core::store::{Attention, Commit, Epoch, Store};
use afk_core::{RunId, ThreadId};

use super::Follow;
use crate::config::RedisConfig;
use crate::stamped::{Set, Update, forget, mark_empty, remember, update};
use crate::{RedisStore, attention};

fn stores_env() -> Vec<String> {
    let mut out = Vec::new();
    for var in ["AFK_TEST_REDIS_URL", "AFK_TEST_REDIS_CLUSTER_URLS"] {
        out.extend(afk_conformance::require_env(var));
    }
    out
}

async fn store(url: &str, tag: &str) -> RedisStore {
    let mut cfg = RedisConfig::from_url(url).unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    cfg.prefix = format!("attn{tag}{}x{nanos}", std::process::id());
    RedisStore::open(cfg).await.unwrap()
}

async fn indexed(s: &RedisStore, t: &ThreadId) -> bool {
    let mut cmd = redis::cmd("ZSCORE");
    cmd.arg(Set::Attention.key(s.config())).arg(t.as_str());
    let score: Option<f64> = s.client().query(&cmd, "zscore").await.unwrap();
    score.is_some()
}

fn commit(t: &ThreadId, r: &RunId, e: Epoch, attention: Attention) -> Commit {
    Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch: e,
        puts: Vec::new(),
        latest: Some(b"p".to_vec()),
        attention: Some(attention),
    }
}

fn run(id: &str) -> RunId {
    RunId::new(id).unwrap()
}

fn open() -> Attention {
    Attention::Open(b"open".to_vec())
}

/// Drop the thread's pending claims, as their expiry does.
async fn expire_pending(s: &RedisStore, t: &ThreadId) {
    let keys = Set::Attention.slot_keys(s.config(), t.as_str());
    let mut cmd = redis::cmd("DEL");
    cmd.arg(&keys[2]);
    let _: i64 = s.client().query(&cmd, "del").await.unwrap();
}

/// A claim pending keeps its thread held: another run's close is no emptying, and a lister's
/// repair finds the thread held, until the claim's first commit or its expiry.
#[tokio::test]
async fn a_pending_claim_keeps_its_thread_held() {
    for url in stores_env() {
        let s = store(&url, "pending").await;
        let (t, a, b) = (ThreadId::new("t").unwrap(), run("a"), run("b"));
        let (c, sc, cfg) = (s.client(), s.scripts(), s.config());
        let ea = s.claim(&t, &a).await.unwrap();
        s.commit(&commit(&t, &a, ea, open())).await.unwrap();
        s.claim(&t, &b).await.unwrap();
        let closed = s
            .commit_script_only(&commit(&t, &a, ea, Attention::Closed))
            .await
            .unwrap();
        assert_eq!(
            closed,
            Follow::Nothing,
            "{url}: an emptying under a pending claim"
        );
        let g = mark_empty(c, sc, cfg, Set::Attention, t.as_str())
            .await
            .unwrap();
        assert_eq!(g, 0, "{url}: a repair under a pending claim");
        assert!(indexed(&s, &t).await, "{url}");
        expire_pending(&s, &t).await;
        let g = mark_empty(c, sc, cfg, Set::Attention, t.as_str())
            .await
            .unwrap();
        assert!(g > 0, "{url}: once the claim expired, the thread is empty");
    }
}

/// The runs a complete listing gives.
async fn listed(s: &RedisStore) -> Vec<(ThreadId, RunId)> {
    let page = s.list_attention(None, 1000).await.unwrap();
    assert!(page.next_cursor.is_none());
    page.runs.into_iter().map(|r| (r.thread, r.run)).collect()
}

/// Run `a` is the thread's last open run. Its closer's emptying comes first, then run `b` is
/// claimed and opens and its committer dies before its add; the closer's removal then takes
/// the thread out, and its check after the removal finds `b` and adds the thread back.
#[tokio::test]
async fn a_closer_adds_back_a_thread_whose_opener_died_before_its_add() {
    for url in stores_env() {
        let s = store(&url, "addback").await;
        let (t, a, b) = (ThreadId::new("t").unwrap(), run("a"), run("b"));
        let ea = s.claim(&t, &a).await.unwrap();
        s.commit(&commit(&t, &a, ea, open())).await.unwrap();
        let Follow::Remove(g) = s
            .commit_script_only(&commit(&t, &a, ea, Attention::Closed))
            .await
            .unwrap()
        else {
            panic!("{url}: closing the last run is no emptying");
        };
        let eb = s.claim(&t, &b).await.unwrap();
        let died = s.commit_script_only(&commit(&t, &b, eb, open())).await;
        assert!(matches!(died.unwrap(), Follow::Add(_)), "{url}");
        let (c, sc, cfg) = (s.client(), s.scripts(), s.config());
        assert!(
            !forget(c, sc, cfg, Set::Attention, t.as_str(), g)
                .await
                .unwrap()
        );
        assert!(indexed(&s, &t).await, "{url}: an open run's thread is lost");
        assert_eq!(listed(&s).await, vec![(t, b)], "{url}");
    }
}

/// A lister finds a thread a claim added with nothing open, once the claim's pending expired,
/// and repairs it; the claimed run opens between the repair's emptying and its removal. Whichever of the opener's add and the
/// removal lands first, the thread stays listed.
#[tokio::test]
async fn a_repair_racing_an_opener_keeps_its_thread() {
    for url in stores_env() {
        for add_first in [true, false] {
            let s = store(&url, "repair").await;
            let (t, r) = (ThreadId::new("t").unwrap(), run("r"));
            let (c, sc, cfg) = (s.client(), s.scripts(), s.config());
            let e = s.claim(&t, &r).await.unwrap();
            assert!(indexed(&s, &t).await, "{url}: the claim added its thread");
            expire_pending(&s, &t).await; // a claim left pending for longer than its expiry
            let g = mark_empty(c, sc, cfg, Set::Attention, t.as_str())
                .await
                .unwrap();
            assert!(g > 0, "{url}: a claimed thread with nothing open is empty");
            let follow = s.commit_script_only(&commit(&t, &r, e, open())).await;
            let Follow::Add(h) = follow.unwrap() else {
                panic!("{url}: the first opening is no filling");
            };
            assert!(h >= g, "{url}: the opening read generation {h} below {g}");
            let add = Update::Add(h);
            if add_first {
                update(c, sc, cfg, Set::Attention, t.as_str(), add)
                    .await
                    .unwrap();
            }
            forget(c, sc, cfg, Set::Attention, t.as_str(), g)
                .await
                .unwrap();
            if !add_first {
                update(c, sc, cfg, Set::Attention, t.as_str(), add)
                    .await
                    .unwrap();
            }
            assert!(indexed(&s, &t).await, "{url} (add first: {add_first})");
            assert_eq!(listed(&s).await, vec![(t, r)], "{url}");
        }
    }
}

/// A closer's removal lands late, after another run of the thread opened (and its add was
/// applied): the removal is refused.
#[tokio::test]
async fn a_late_removal_does_not_unlist_a_run_opened_after_its_emptying() {
    for url in stores_env() {
        let s = store(&url, "late").await;
        let (t, a, b) = (ThreadId::new("t").unwrap(), run("a"), run("b"));
        let ea = s.claim(&t, &a).await.unwrap();
        s.commit(&commit(&t, &a, ea, open())).await.unwrap();
        let closing = commit(&t, &a, ea, Attention::Closed);
        let Follow::Remove(g) = s.commit_script_only(&closing).await.unwrap() else {
            panic!("{url}: closing the last run is no emptying");
        };
        let eb = s.claim(&t, &b).await.unwrap();
        s.commit(&commit(&t, &b, eb, open())).await.unwrap();
        let (c, sc, cfg) = (s.client(), s.scripts(), s.config());
        let up = update(c, sc, cfg, Set::Attention, t.as_str(), Update::Remove(g));
        assert_eq!(
            up.await.unwrap(),
            None,
            "{url}: a stale removal was applied"
        );
        assert_eq!(listed(&s).await, vec![(t, b)], "{url}");
    }
}

/// A claim's add to the attention index comes before its claim script; the thread's last open
/// run closes whole in between (its removal lands after that add). The claim learns of it and
/// adds the thread again, so the run it then opens is listed even though its committer dies
/// before its own add.
#[tokio::test]
async fn a_claim_racing_an_emptying_lists_its_run_if_the_opener_dies() {
    for url in stores_env() {
        let s = store(&url, "claim").await;
        let (t, a, b) = (ThreadId::new("t").unwrap(), run("a"), run("b"));
        let ea = s.claim(&t, &a).await.unwrap();
        s.commit(&commit(&t, &a, ea, open())).await.unwrap();
        let seen = remember(s.client(), s.scripts(), s.config(), &t)
            .await
            .unwrap();
        s.commit(&commit(&t, &a, ea, Attention::Closed))
            .await
            .unwrap();
        assert!(
            !indexed(&s, &t).await,
            "{url}: the emptied thread is indexed"
        );
        let eb = s.claim_after_remember(&t, &b, seen).await.unwrap();
        assert!(
            indexed(&s, &t).await,
            "{url}: the claim did not add its thread"
        );
        let died = s.commit_script_only(&commit(&t, &b, eb, open())).await;
        assert!(matches!(died.unwrap(), Follow::Add(_)), "{url}");
        assert_eq!(listed(&s).await, vec![(t, b)], "{url}");
    }
}

/// The follow-up answers of the commit script.
#[test]
fn follow_ups_are_parsed() {
    assert_eq!(attention::follow_of(b"ok"), Some(Follow::Nothing));
    assert_eq!(attention::follow_of(b"ok:add:17"), Some(Follow::Add(17)));
    assert_eq!(
        attention::follow_of(b"ok:rm:1764"),
        Some(Follow::Remove(1764))
    );
    assert_eq!(attention::follow_of(b"ok:rm:x"), None);
    assert_eq!(attention::follow_of(b"fenced:3"), None);
}
