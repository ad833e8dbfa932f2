//! Tests that need a redis-server of their own (restarted, script cache flushed, password
//! set), so they never disturb the shared dev servers. Skipped like the others when
//! `AFK_TEST_REDIS_URL` is unset (that is how the environment says "Redis tests wanted").

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use afk_core::store::{Epoch, Store, StoreExt, latest_key};
use afk_core::{ErrorKind, RunId, ThreadId};
use afk_store_redis::{RedisConfig, RedisStore};
use common::*;

fn quick(url: &str) -> RedisConfig {
    let mut cfg = config(url);
    cfg.connect_timeout_ms = 200;
    cfg.response_timeout_ms = 500;
    cfg
}

/// No hang: any single operation answers within a bound far above its deadlines (connect +
/// response, a few hundred ms here), even while the server is gone. It catches a hang, not a
/// slow machine: a loaded 2-core machine made a 5 s bound flake.
const NO_HANG: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum Event {
    Ok,
    Err(ErrorKind),
}

async fn step_commit(
    s: &RedisStore,
    t: &ThreadId,
    r: &RunId,
    e: Epoch,
    step: u32,
) -> afk_core::Result<()> {
    let rec = format!("checkpoint:{r}:{step}:post_tool");
    let msg = format!("messages:{r}:{step:020}");
    let c = commit(
        t,
        r,
        e,
        &[(rec.as_str(), b"record"), (msg.as_str(), b"m")],
        Some(rec.as_bytes()),
    );
    s.commit(&c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_mid_stream_fails_fast_then_recovers_without_half_writes() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let mut server = OwnServer::start(&[]);
    let s = connect(quick(&server.url())).await;
    let t = thread("restart");
    let r = run("run_stream");
    // Each attempt: when it started, how long it took, how it ended.
    let events = Arc::new(Mutex::new(Vec::<(Instant, Duration, Event)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // The writer: a stream of commits; on Fenced (the restarted server lost the fence) it
    // re-claims, on Unavailable it goes on with the next commit, as a resuming runner would.
    let writer = {
        let (s, t, r, events, stop) = (
            s.clone(),
            t.clone(),
            r.clone(),
            events.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut epoch: Option<Epoch> = None;
            let mut step = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                let res = match epoch {
                    None => s.claim(&t, &r).await.map(|e| epoch = Some(e)),
                    Some(e) => step_commit(&s, &t, &r, e, step).await.map(|()| step += 1),
                };
                let took = start.elapsed();
                if matches!(&res, Err(err) if err.kind() == ErrorKind::Fenced) {
                    epoch = None;
                }
                let ev = match res {
                    Ok(()) => Event::Ok,
                    Err(e) => Event::Err(e.kind()),
                };
                events.lock().expect("lock").push((start, took, ev));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            step
        })
    };
    let oks = |ev: &Mutex<Vec<(Instant, Duration, Event)>>| {
        ev.lock()
            .expect("lock")
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::Ok))
            .count()
    };
    let wait_for = |n: usize| {
        let events = events.clone();
        async move {
            let start = Instant::now();
            while oks(&events) < n {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "stream stalled at {} oks",
                    oks(&events)
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(20).await;
    server.kill();
    // An attempt already sent when the server died may have been answered: only attempts
    // begun after the process is gone are "during the outage".
    let dead_at = Instant::now();

    // During the outage, direct operations fail with Unavailable, fast.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let start = Instant::now();
        let err = s.get(&t, &latest_key(&r)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.is_retryable());
        assert!(
            start.elapsed() < NO_HANG,
            "get hung for {:?}",
            start.elapsed()
        );
        let start = Instant::now();
        let batch = vec![commit(
            &t,
            &r,
            Epoch(1),
            &[("effect:run_stream:1:c", b"x")],
            None,
        )];
        let out = s.commit_batch(&batch).await;
        assert_eq!(out[0].as_ref().unwrap_err().kind(), ErrorKind::Unavailable);
        assert!(
            start.elapsed() < NO_HANG,
            "commit_batch hung for {:?}",
            start.elapsed()
        );
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let during: Vec<_> = events
        .lock()
        .expect("lock")
        .iter()
        .filter(|(start, _, _)| *start >= dead_at)
        .map(|(_, d, e)| (*d, format!("{e:?}")))
        .collect();
    assert!(
        !during.is_empty(),
        "the writer made no attempt during the outage"
    );
    assert!(
        during.iter().all(|(_, e)| e == "Err(Unavailable)"),
        "{during:?}"
    );

    server.restart();
    let after_restart = oks(&events);
    wait_for(after_restart + 20).await; // reconnects and goes on
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let steps = writer.await.expect("writer task");
    assert!(
        steps >= 38,
        "{steps} commits (40 successes, two of them claims)"
    );

    let all: Vec<(Instant, Duration, Event)> = std::mem::take(&mut *events.lock().expect("lock"));
    for (_, took, ev) in all.iter() {
        assert!(*took < NO_HANG, "an operation took {took:?} ({ev:?})");
        if let Event::Err(k) = ev {
            assert!(
                matches!(k, ErrorKind::Unavailable | ErrorKind::Fenced),
                "{k:?}"
            );
        }
    }

    // Nothing half-written: the pointer names a record that exists, and every record written
    // after the restart has its transcript entry.
    let ptr = s
        .get(&t, &latest_key(&r))
        .await
        .unwrap()
        .expect("latest after restart");
    let rec = String::from_utf8(ptr).expect("utf8 pointer");
    assert_eq!(
        s.get(&t, &rec).await.unwrap().as_deref(),
        Some(b"record" as &[u8]),
        "{rec}"
    );
    for k in &s.list_all(&t, "checkpoint:").await.unwrap() {
        let Some(step) = k
            .strip_suffix(":post_tool")
            .and_then(|x| x.rsplit(':').next())
        else {
            continue;
        };
        let step: u32 = step.parse().expect("step number");
        let msg = format!("messages:{r}:{step:020}");
        assert!(
            s.get(&t, &msg).await.unwrap().is_some(),
            "{k} without {msg}"
        );
    }
}

#[tokio::test]
async fn flushed_script_cache_is_reloaded_transparently() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let server = OwnServer::start(&[]);
    let s = connect(quick(&server.url())).await;
    let mut raw = raw(&server.url()).await;
    let t = thread("noscript");
    let r = run("run_ns");
    let flush = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut raw)
                .await
                .expect("SCRIPT FLUSH");
        }
    };
    let e = s.claim(&t, &r).await.unwrap();
    step_commit(&s, &t, &r, e, 0).await.unwrap();
    flush(&mut raw).await;
    step_commit(&s, &t, &r, e, 1)
        .await
        .expect("commit after SCRIPT FLUSH");
    flush(&mut raw).await;
    let batch: Vec<_> = (2..6)
        .map(|i| {
            let k = format!("checkpoint:run_ns:{i}:x");
            commit(&t, &r, e, &[(k.as_str(), b"v")], Some(k.as_bytes()))
        })
        .collect();
    for res in s.commit_batch(&batch).await {
        res.expect("batched commit after SCRIPT FLUSH");
    }
    assert_eq!(
        s.get(&t, &latest_key(&r)).await.unwrap().as_deref(),
        Some(b"checkpoint:run_ns:5:x" as &[u8])
    );
    flush(&mut raw).await;
    assert_eq!(
        s.list(&t, "checkpoint:run_ns:5", None, 10)
            .await
            .unwrap()
            .keys
            .len(),
        1
    );
    flush(&mut raw).await;
    assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(2));
    // `claim_if_new` pipelines the thread index's add and its own script: after a flush the
    // add still runs first, and the script is sent again as EVAL.
    flush(&mut raw).await;
    assert_eq!(
        s.claim_if_new(&t, &r).await.unwrap(),
        None,
        "run_ns has a pointer"
    );
    let fresh = run("run_ns_fresh");
    flush(&mut raw).await;
    assert_eq!(s.claim_if_new(&t, &fresh).await.unwrap(), Some(Epoch(1)));
    assert!(s.get(&t, "run:run_ns_fresh").await.unwrap().is_some());
    assert_eq!(
        s.claim(&t, &r).await.unwrap(),
        Epoch(3),
        "the refusal claimed nothing"
    );
    flush(&mut raw).await;
    assert!(s.delete_run(&t, &r).await.unwrap() > 5);
}

#[tokio::test]
async fn passwords_never_appear_and_bad_credentials_are_invalid_config() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let secret = "s3cr3t-Pass-word";
    let server = OwnServer::start(&["--requirepass", secret]);
    let wrong = "wr0ng-Pass-word";
    let bad = RedisStore::from_url(&format!(
        "redis://:{wrong}@127.0.0.1:{}/0?connect_timeout_ms=300",
        server.port
    ))
    .await;
    let err = bad.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(wrong), "password leaked: {shown}");
    assert!(
        shown.contains(":***@"),
        "the redacted URL names the server: {shown}"
    );

    let none = RedisStore::from_url(&format!(
        "redis://127.0.0.1:{}?connect_timeout_ms=300",
        server.port
    ))
    .await;
    assert_eq!(none.unwrap_err().kind(), ErrorKind::InvalidConfig);

    let s = RedisStore::from_url(&format!(
        "redis://default:{secret}@127.0.0.1:{}",
        server.port
    ))
    .await
    .unwrap();
    assert!(!format!("{s:?}").contains(secret));
    assert!(!format!("{:?}", s.config()).contains(secret));
    let t = thread("auth");
    assert_eq!(s.claim(&t, &run("run_pw")).await.unwrap(), Epoch(1));

    // A failure after connecting does not show it either.
    drop(server);
    let err = s.get(&t, "run:run_pw").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(!format!("{err} {err:?}").contains(secret));
}

#[tokio::test]
async fn no_server_is_unavailable_quickly() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let port = free_port();
    let start = Instant::now();
    let err = RedisStore::from_url(&format!(
        "redis://127.0.0.1:{port}?connect_timeout_ms=200&response_timeout_ms=200"
    ))
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(start.elapsed() < NO_HANG);
}

/// The first request after the server is back must be served. The connection
/// manager keeps the failure of its last reconnect attempt (made while the server was down)
/// and used to hand that stale `Connection refused` to the next request, whatever the server
/// was doing by then. Each read kind is tried as the very first request after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_a_server_restart_is_served() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let mut server = OwnServer::start(&[]);
    let s = connect(quick(&server.url())).await;
    let t = thread("back");
    let r = run("run_back");
    assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(1));
    for op in ["get", "get_many", "list", "delete"] {
        server.kill();
        let err = s.get(&t, &latest_key(&r)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        // Let the reconnect that request started fail against the dead server.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.restart();
        let first = match op {
            "get" => s.get(&t, &latest_key(&r)).await.map(drop),
            "get_many" => s.get_many(&t, &[latest_key(&r)]).await.map(drop),
            "list" => s.list(&t, "checkpoint:", None, 10).await.map(drop),
            _ => s.delete(&t, &[latest_key(&r)]).await,
        };
        assert!(
            first.is_ok(),
            "{op}: the first request after the restart failed: {first:?}"
        );
    }
}

/// A URL that names something other than a Redis server (here an HTTP server answering
/// `400 Bad Request`) is `InvalidConfig` saying so, at once: not `Unexpected` (a parse error),
/// and nothing a retry could fix.
#[tokio::test]
async fn a_server_that_is_not_redis_is_invalid_config() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 512];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let start = Instant::now();
    let err = RedisStore::from_url(&format!(
        "redis://127.0.0.1:{port}?connect_timeout_ms=2000&response_timeout_ms=2000"
    ))
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.message().contains("Redis protocol"), "{err}");
    assert!(start.elapsed() < NO_HANG);
}

/// Overload is not an outage: thousands of commits of a hundred keys each, sent at once on the
/// store's one connection (the server's work, not the client's, makes them queue), wait behind
/// each other longer than the deadline (2 s here; 2,000 such commits took 9.6 s on the loaded
/// 2-core machine, with gaps of up to 1.1 s between answers), and
/// each one succeeds, because the server keeps answering. A per-call deadline counting that
/// wait failed the last ones with `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_queued_behind_others_longer_than_the_deadline_succeed() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let server = OwnServer::start(&[]);
    let mut cfg = config(&server.url());
    cfg.connect_timeout_ms = 1000;
    cfg.response_timeout_ms = 1000;
    let s = connect(cfg).await;
    let t = thread("queued");
    let runs: Vec<RunId> = (0..3000).map(|i| run(&format!("run_{i}"))).collect();
    let mut epochs = Vec::new();
    for chunk in runs.chunks(100) {
        let claims = futures::future::join_all(chunk.iter().map(|r| s.claim(&t, r))).await;
        epochs.extend(claims.into_iter().map(|e| e.expect("claim")));
    }
    let commits: Vec<_> = runs
        .iter()
        .zip(epochs)
        .map(|(r, e)| {
            let keys: Vec<String> = (0..100).map(|i| format!("messages:{r}:{i:020}")).collect();
            let puts: Vec<(&str, &[u8])> = keys
                .iter()
                .map(|k| (k.as_str(), &b"sixteen bytes..."[..]))
                .collect();
            commit(&t, r, e, &puts, None)
        })
        .collect();
    // The script cache warm, as after a service's first commit.
    s.commit(&commits[0]).await.expect("first commit");
    // A task per commit, as runs commit.
    let tasks: Vec<_> = commits
        .into_iter()
        .map(|c| {
            let s = s.clone();
            tokio::spawn(async move { s.commit(&c).await })
        })
        .collect();
    let done: Vec<_> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("commit task"))
        .collect();
    let failed: Vec<_> = done.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} commits failed, first: {:?}",
        failed.len(),
        done.len(),
        failed.first()
    );
}

/// A server that is there but silent (stopped, its connections open) is an outage: every call
/// waiting on it, however many, fails with `Unavailable`, and once the server goes on the
/// store serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_fails_every_waiting_call_as_unavailable() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let server = OwnServer::start(&[]);
    let s = connect(quick(&server.url())).await;
    let t = thread("silent");
    let runs: Vec<RunId> = (0..200).map(|i| run(&format!("run_{i}"))).collect();
    for r in &runs[..1] {
        assert_eq!(s.claim(&t, r).await.unwrap(), Epoch(1));
    }
    server.pause();
    let keys: Vec<String> = runs.iter().map(latest_key).collect();
    let calls = keys.iter().map(|k| s.get(&t, k));
    let done = tokio::time::timeout(NO_HANG, futures::future::join_all(calls))
        .await
        .expect("every call ends while the server is silent");
    server.resume();
    for r in &done {
        let err = r.as_ref().expect_err("a silent server answers nothing");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
    assert_eq!(s.claim(&t, &runs[0]).await.unwrap(), Epoch(2));
}
