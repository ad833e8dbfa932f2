//! A service that ignores conditional writes, simulated by a proxy that removes
//! `If-None-Match` / `If-Match` from every request (the test server does not check request
//! signatures, so it accepts the altered requests; a server that ignores the headers would
//! have received them and done the same). Opening it is refused unless `single_writer=true`.

use crate::common;
use crate::proxy;

use std::future::Future;
use std::time::Duration;

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Store},
};
use afk_store_s3::{S3Config, S3Store};
use proxy::Proxy;

const BOUND: Duration = Duration::from_secs(90);

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

/// A proxy that strips conditional headers, and a config for a fresh bucket behind it.
async fn unconditional(tag: &str) -> Option<(Proxy, S3Config)> {
    let (endpoint, ..) = common::server()?;
    let proxy = Proxy::start(&endpoint).await;
    proxy.strip_conditions(true);
    let cfg = common::config(&proxy.endpoint(), tag)?;
    Some((proxy, cfg))
}

#[tokio::test]
async fn a_service_ignoring_conditional_writes_is_refused_by_default() {
    let Some((proxy, cfg)) = unconditional("nocond").await else {
        return;
    };
    let err = bounded("open", S3Store::open(cfg.clone()))
        .await
        .expect_err("conditional writes are not honored");
    assert!(proxy.stripped() > 0, "the probe's conditions were removed");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("ignores conditional writes"), "{msg}");
    assert!(msg.contains("single_writer=true"), "{msg}");
    assert!(msg.contains(&cfg.bucket), "{msg}");

    // Control: the same proxy passing the conditions through opens fine.
    proxy.strip_conditions(false);
    let store = bounded("open", S3Store::open(cfg)).await.unwrap();
    assert!(store.conditional_writes() && store.capabilities().multi_process);
}

#[tokio::test]
async fn single_writer_mode_opens_commits_and_reads() {
    let Some((proxy, cfg)) = unconditional("single").await else {
        return;
    };
    let cfg = cfg.with_single_writer(true);
    let store = bounded("open", S3Store::open(cfg)).await.unwrap();
    assert!(!store.conditional_writes());
    assert!(!store.capabilities().multi_process);

    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_sw").unwrap());
    let epoch = bounded("claim", store.claim(&t, &r)).await.unwrap();
    for i in 0..3u32 {
        let c = Commit {
            thread: t.clone(),
            run: r.clone(),
            epoch,
            puts: vec![(format!("checkpoint:run_sw:{i}:pre_llm"), vec![i as u8; 8])],
            latest: Some(format!("{{\"step\":{i}}}").into_bytes()),
            attention: None,
        };
        bounded("commit", store.commit(&c)).await.unwrap();
    }
    let stripped = proxy.stripped();
    assert!(stripped > 0, "commits ran without their conditions");
    let got = bounded("get", store.get(&t, "checkpoint:run_sw:1:pre_llm"))
        .await
        .unwrap();
    assert_eq!(got, Some(vec![1u8; 8]));
    let latest = bounded("get latest", store.get(&t, "checkpoint:run_sw:latest"))
        .await
        .unwrap();
    assert_eq!(latest, Some(b"{\"step\":2}".to_vec()));
    let page = bounded("list", store.list(&t, "checkpoint:run_sw:", None, 100))
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 4, "{:?}", page.keys);

    // The fence is still checked, by reading the head before writing: a stale epoch is
    // refused when the claims and the commit do not overlap in time. (What is lost is the
    // atomicity of that check: overlapping writers are not fenced.)
    let newer = bounded("claim", store.claim(&t, &r)).await.unwrap();
    assert!(newer > epoch);
    let stale = Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![("checkpoint:run_sw:9:pre_llm".into(), b"stale".to_vec())],
        latest: None,
        attention: None,
    };
    let err = bounded("stale commit", store.commit(&stale))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
}
