//! A commit starts from the head its run's previous commit swapped in (the store's head cache),
//! not from a GET: two requests in a row per commit instead of three. The cache is never
//! trusted for what the swap does not check again, so a head moved by another store, a claim
//! made elsewhere, and a service whose PUT answers an ETag its `If-Match` refuses all still give
//! the right outcome.

use crate::common;
use crate::proxy;

use common::{ids, step};

use afk_core::{ErrorKind, store::Store};
use afk_store_s3::S3Store;

/// Steps `steps` of the run are all there, read by a store opened afresh (no cache), and the
/// pointer names step `last`.
async fn assert_steps(cfg: &afk_store_s3::S3Config, run: &str, steps: &[u32], last: u32) {
    let fresh = S3Store::open(cfg.clone())
        .await
        .expect("open a second store");
    let (t, r) = ids(run);
    for i in steps {
        let got = fresh
            .get(&t, &format!("checkpoint:{r}:{i}:pre_llm"))
            .await
            .expect("read through a fresh store");
        assert_eq!(got, Some(format!("value {i}").into_bytes()), "step {i}");
        let got = fresh
            .get(&t, &format!("messages:{r}:{i:020}"))
            .await
            .expect("read through a fresh store");
        assert_eq!(got, Some(format!("message {i}").into_bytes()), "step {i}");
    }
    let latest = fresh
        .get(&t, &format!("checkpoint:{r}:latest"))
        .await
        .expect("read through a fresh store");
    assert_eq!(latest, Some(format!("{{\"step\":{last}}}").into_bytes()));
}

#[tokio::test]
async fn a_run_s_commits_read_no_head() {
    let Some((store, cfg)) = common::store("hc-reads").await else {
        return;
    };
    let (t, r) = ids("run_a");
    let epoch = store.claim(&t, &r).await.unwrap();
    let before = store.traffic();
    // Enough commits for the head's recent keys to be flushed into index segments and merged.
    for i in 0..60 {
        store.commit(&step(&t, &r, epoch, i)).await.unwrap();
    }
    let after = store.traffic();
    assert_eq!(
        after.gets - before.gets,
        0,
        "a commit after the run's last swap reads nothing: {after:?}"
    );
    assert_eq!(after.head_puts - before.head_puts, 60, "one head swap each");
    let steps: Vec<u32> = (0..60).collect();
    assert_steps(&cfg, "run_a", &steps, 59).await;
}

#[tokio::test]
async fn an_empty_commit_checks_the_fence_on_the_head_as_it_is() {
    let Some((a, cfg)) = common::store("hc-empty").await else {
        return;
    };
    let b = S3Store::open(cfg.clone())
        .await
        .expect("open a second store");
    let (t, r) = ids("run_z");
    let first = a.claim(&t, &r).await.unwrap();
    a.commit(&step(&t, &r, first, 0)).await.unwrap();
    let empty = |epoch| afk_core::store::Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: Vec::new(),
        latest: None,
        attention: None,
    };
    // It writes nothing, so no swap would catch a stale head: it reads the head.
    let before = a.traffic();
    a.commit(&empty(first)).await.unwrap();
    assert_eq!(a.traffic().gets - before.gets, 1);
    // And it leaves the remembered head in place for the next commit.
    let before = a.traffic();
    a.commit(&step(&t, &r, first, 1)).await.unwrap();
    assert_eq!(a.traffic().gets - before.gets, 0);
    // A claim through another store fences it, though the remembered head says otherwise.
    b.claim(&t, &r).await.unwrap();
    let err = a.commit(&empty(first)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
}

#[tokio::test]
async fn a_head_moved_by_another_store_costs_one_reread() {
    let Some((a, cfg)) = common::store("hc-moved").await else {
        return;
    };
    let b = S3Store::open(cfg.clone())
        .await
        .expect("open a second store");
    let (t, r) = ids("run_m");
    let epoch = a.claim(&t, &r).await.unwrap();
    a.commit(&step(&t, &r, epoch, 0)).await.unwrap();
    // Another writer under the same claim moves the head A remembers.
    b.commit(&step(&t, &r, epoch, 1)).await.unwrap();
    let before = a.traffic();
    a.commit(&step(&t, &r, epoch, 2)).await.unwrap();
    let after = a.traffic();
    assert_eq!(
        (after.gets - before.gets, after.head_puts - before.head_puts),
        (1, 2),
        "the remembered head lost its swap (412), was read again, and the swap made again"
    );
    // Nothing B wrote was lost to A's stale head.
    assert_steps(&cfg, "run_m", &[0, 1, 2], 2).await;
    // And A remembers the head it swapped in: its next commit reads nothing.
    let before = a.traffic();
    a.commit(&step(&t, &r, epoch, 3)).await.unwrap();
    assert_eq!(a.traffic().gets - before.gets, 0);
}

#[tokio::test]
async fn a_claim_made_elsewhere_fences_the_remembered_head() {
    let Some((a, cfg)) = common::store("hc-fenced").await else {
        return;
    };
    let b = S3Store::open(cfg.clone())
        .await
        .expect("open a second store");
    let (t, r) = ids("run_f");
    let first = a.claim(&t, &r).await.unwrap();
    a.commit(&step(&t, &r, first, 0)).await.unwrap();
    let second = b.claim(&t, &r).await.unwrap();
    assert!(second > first);
    let err = a.commit(&step(&t, &r, first, 1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    let raw = common::raw_client(&cfg).await;
    let objects = common::objects(&raw, &cfg.bucket, &format!("{}/t/run_f/o/", cfg.prefix)).await;
    assert_eq!(
        objects.len(),
        1,
        "commit 0's pack only; the fenced attempt's objects are gone: {objects:?}"
    );
    assert_steps(&cfg, "run_f", &[0], 0).await;
    let fresh = S3Store::open(cfg.clone()).await.unwrap();
    assert_eq!(
        fresh
            .get(&t, &format!("checkpoint:{r}:1:pre_llm"))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_claim_made_elsewhere_does_not_refuse_its_own_commits() {
    let Some((a, cfg)) = common::store("hc-epoch").await else {
        return;
    };
    let b = S3Store::open(cfg.clone())
        .await
        .expect("open a second store");
    let (t, r) = ids("run_e");
    let first = a.claim(&t, &r).await.unwrap();
    a.commit(&step(&t, &r, first, 0)).await.unwrap();
    // A remembers the head at the first epoch; the run is claimed again through B, and its
    // commits go through A (two stores of one process on one bucket).
    let second = b.claim(&t, &r).await.unwrap();
    a.commit(&step(&t, &r, second, 1)).await.unwrap();
    assert_steps(&cfg, "run_e", &[0, 1], 1).await;
}

#[tokio::test]
async fn etags_the_service_refuses_turn_the_cache_off() {
    let Some((endpoint, ..)) = common::server() else {
        return;
    };
    let proxy = proxy::Proxy::start(&endpoint).await;
    let cfg = common::config(&proxy.endpoint(), "hc-etag").expect("config");
    let store = S3Store::open(cfg.clone())
        .await
        .expect("open through the proxy");
    proxy.mangle_head_etags(true);
    let (t, r) = ids("run_x");
    let epoch = store.claim(&t, &r).await.unwrap();
    let (puts0, before) = (proxy.head_puts(), store.traffic());
    // The claim's head is remembered with an ETag the server refuses: the first commit loses
    // its swap to a head that did not change, reads it, and turns the cache off.
    store.commit(&step(&t, &r, epoch, 0)).await.unwrap();
    assert_eq!(
        proxy.head_puts() - puts0,
        2,
        "one refused swap, then one that took"
    );
    assert_eq!(store.traffic().gets - before.gets, 1);
    // From then on every commit reads its head (one GET) and swaps once: no lost races.
    let (puts1, before) = (proxy.head_puts(), store.traffic());
    for i in 1..6 {
        store.commit(&step(&t, &r, epoch, i)).await.unwrap();
    }
    assert_eq!(proxy.head_puts() - puts1, 5);
    assert_eq!(store.traffic().gets - before.gets, 5);
    assert!(proxy.mangled() >= 7, "the answers were changed");
    proxy.mangle_head_etags(false);
    let mut direct = cfg.clone();
    direct.endpoint = Some(endpoint);
    assert_steps(&direct, "run_x", &[0, 1, 2, 3, 4, 5], 5).await;
}
