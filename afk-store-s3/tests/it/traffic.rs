//! `S3Store::traffic` counts what really reaches the server: checked against moto's request
//! recorder (`/moto-api/recorder/…`), which logs every request with its `Content-Length`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use afk_core::{
    RunId, ThreadId,
    store::{Commit, Store},
};

/// One plain HTTP/1.1 request to the test server (moto answers with `Connection: close`).
fn http(endpoint: &str, method: &str, path: &str) -> String {
    let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(addr).expect("connect to the S3 test server");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    out.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn traffic_matches_the_bytes_the_server_received() {
    let Some((store, cfg)) = common::store("traffic").await else {
        return;
    };
    let endpoint = cfg.endpoint.clone().unwrap();
    if http(&endpoint, "POST", "/moto-api/recorder/start-recording").is_empty() {
        afk_conformance::skip_or_fail("the S3 test server has no request recorder (not moto?)");
        return;
    }
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_tr").unwrap());
    let before = store.traffic();
    let epoch = store.claim(&t, &r).await.unwrap();
    for i in 0..40u64 {
        let commit = Commit {
            thread: t.clone(),
            run: r.clone(),
            epoch,
            puts: vec![(
                format!("checkpoint:run_tr:{i}:pre_llm"),
                vec![b'x'; 100 + i as usize],
            )],
            latest: Some(format!("latest {i}").into_bytes()),
            attention: None,
        };
        store.commit(&commit).await.unwrap();
    }
    let after = store.traffic();
    http(&endpoint, "POST", "/moto-api/recorder/stop-recording");
    let log = http(&endpoint, "GET", "/moto-api/recorder/download-recording");
    http(&endpoint, "POST", "/moto-api/recorder/reset-recording");
    let (mut puts, mut bytes) = (0u64, 0u64);
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("recorder JSON line");
        let url = v["url"].as_str().unwrap_or("");
        if v["method"] == "PUT" && url.contains(&format!("/{}/", cfg.bucket)) {
            puts += 1;
            bytes += v["headers"]["Content-Length"]
                .as_str()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    assert_eq!(after.puts - before.puts, puts, "PUT requests");
    assert_eq!(after.put_bytes - before.put_bytes, bytes, "PUT body bytes");
    assert!(after.head_puts - before.head_puts >= 41, "{after:?}");
    assert!(bytes > 40 * 100);
}
