//! Opening against an endpoint that is not a working S3 service: one that accepts connections
//! and never answers fails the open within the probe's bound, not the minutes a large upload
//! may take; one that answers as no S3 service would (an HTTP server's 501) is `InvalidConfig`
//! naming the endpoint. No S3 server is needed: both are local listeners.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use afk_core::ErrorKind;
use afk_store_s3::{S3Config, S3Store};

fn config(endpoint: &str) -> S3Config {
    S3Config::new("afk-endpoint-test")
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_credentials("test", "test")
        .with_force_path_style(true)
}

/// A listener that accepts connections, reads what comes and answers with `reply` (or never,
/// when `None`), keeping every connection open.
fn listener(reply: Option<&'static [u8]>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for mut conn in l.incoming().flatten() {
            if let Some(reply) = reply {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(reply);
            }
            open.push(conn);
        }
    });
    endpoint
}

/// The configured attempt timeout is 60 s (the default) and one attempt is allowed: the open
/// still gives up after the probe's own 10 s bound.
#[tokio::test]
async fn a_silent_endpoint_fails_the_open_within_the_probe_bound() {
    let endpoint = listener(None);
    let start = Instant::now();
    let open = S3Store::open(config(&endpoint).with_max_attempts(1));
    let err = tokio::time::timeout(Duration::from_secs(50), open)
        .await
        .expect("the open gave up within 50 s")
        .expect_err("nothing answers");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(9),
        "gave up after {took:?}: {err}"
    );
    // A configured attempt timeout shorter than the probe's bound is kept.
    let start = Instant::now();
    let open = S3Store::open(
        config(&endpoint)
            .with_max_attempts(1)
            .with_attempt_timeout_ms(500),
    );
    let err = tokio::time::timeout(Duration::from_secs(50), open)
        .await
        .expect("the open gave up within 50 s")
        .expect_err("nothing answers");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(start.elapsed() < Duration::from_secs(9), "{err}");
}

#[tokio::test]
async fn an_endpoint_that_is_not_s3_is_invalid_config() {
    let endpoint = listener(Some(
        b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    let err = tokio::time::timeout(Duration::from_secs(50), S3Store::open(config(&endpoint)))
        .await
        .expect("the open answered within 50 s")
        .expect_err("not an S3 service");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains(&endpoint), "{err}");
    assert!(err.message().contains("S3-compatible"), "{err}");
}
