//! The S3 server stopped and restarted in the middle of a run: calls fail with a clear error
//! within their time bounds, never hang, and nothing half-written becomes visible.
//!
//! Uses its own throwaway moto server (`AFK_TEST_MOTO_SERVER`, default
//! `/tmp/motovenv/bin/moto_server`) on a free port. moto keeps everything in memory, so after
//! the restart the bucket is gone: the expected outcome is then an `InvalidConfig` error naming
//! the bucket, not stale or partial data.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use afk_core::{Commit, ErrorKind, RunId, Store, ThreadId};
use afk_store_s3::S3Store;

/// Longest any single store call may take while the server is down (the request bound is
/// 120 s; refused connections fail much faster).
const BOUND: Duration = Duration::from_secs(150);

fn moto_binary() -> Option<String> {
    let path = std::env::var("AFK_TEST_MOTO_SERVER")
        .unwrap_or_else(|_| "/tmp/motovenv/bin/moto_server".into());
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    assert!(
        std::env::var("AFK_REQUIRE_INTEGRATION").as_deref() != Ok("1"),
        "AFK_REQUIRE_INTEGRATION=1 but no moto_server at {path} (set AFK_TEST_MOTO_SERVER)"
    );
    eprintln!("skipped: set AFK_TEST_MOTO_SERVER to a moto_server binary");
    None
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

struct Moto(Child);

impl Moto {
    fn start(bin: &str, port: u16) -> Moto {
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto(child)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung longer than {BOUND:?}"))
}

#[tokio::test]
async fn server_restart_mid_run_fails_clearly_without_hanging() {
    let Some(bin) = moto_binary() else { return };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let Some(cfg) = common::config(&endpoint, "restart") else {
        return;
    };
    let mut moto = Some(Moto::start(&bin, port));
    let store = S3Store::open(cfg.clone()).await.unwrap();
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_r").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let step = |i: u32| Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![(format!("checkpoint:run_r:{i}:pre_llm"), vec![i as u8; 2048])],
        latest: Some(format!("{{\"step\":{i}}}").into_bytes()),
    };
    store.commit(&step(0)).await.unwrap();

    // Server down: commit and get fail with Unavailable (retryable), within the bound.
    drop(moto.take());
    let started = Instant::now();
    let err = bounded("commit while down", store.commit(&step(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    let err = bounded("get while down", store.get(&t, "checkpoint:run_r:latest"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    eprintln!("calls while down failed after {:?}", started.elapsed());

    // Server back, empty (moto is in memory): a clear error naming the bucket, no stale data.
    let _moto = Moto::start(&bin, port);
    let err = bounded("commit after restart", store.commit(&step(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains(&cfg.bucket), "{err}");
    let err = bounded(
        "get after restart",
        store.get(&t, "checkpoint:run_r:latest"),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains(&cfg.bucket), "{err}");

    // Reopened (bucket created again) the run starts from nothing: no half-written step 1.
    let store = S3Store::open(cfg.clone()).await.unwrap();
    assert_eq!(
        store.get(&t, "checkpoint:run_r:1:pre_llm").await.unwrap(),
        None
    );
    assert_eq!(
        store.get(&t, "checkpoint:run_r:latest").await.unwrap(),
        None
    );
    let epoch = store.claim(&t, &r).await.unwrap();
    let c = Commit { epoch, ..step(1) };
    store.commit(&c).await.unwrap();
    assert_eq!(
        store.get(&t, "checkpoint:run_r:latest").await.unwrap(),
        Some(b"{\"step\":1}".to_vec())
    );
}
