//! TLS against a real `redis-server` of the test's own: a private CA and certificates made
//! with `openssl` at test time, the server on a TLS-only port. Skipped like the other server
//! tests when `AFK_TEST_REDIS_URL` is unset (that is how the environment says "Redis tests
//! wanted"); the bad-file tests need no server and always run.

use crate::common;

use std::time::{Duration, Instant};

use afk_core::ErrorKind;
use afk_core::store::{Store, latest_key};
use afk_store_redis::{RedisConfig, RedisStore};
use common::certs::TestPki;
use common::*;

/// No hang: a refused connection answers within a bound far above its deadlines. It catches
/// a hang, not a slow machine (a 5 s bound flaked on a loaded 2-core machine).
const NO_HANG: Duration = Duration::from_secs(60);

/// A URL with short timeouts and its own prefix.
fn url(base: &str, options: &str) -> String {
    let sep = if options.is_empty() { "" } else { "&" };
    format!(
        "{base}?prefix={}&connect_timeout_ms=300&response_timeout_ms=700{sep}{options}",
        unique("tls")
    )
}

/// Claim, commit (with the latest pointer), get, get_many, list, batch commit, delete_run:
/// the whole store surface over one connection.
async fn round_trip(s: &RedisStore, tag: &str) {
    let t = thread(tag);
    let r = run("run_tls");
    let e = s.claim(&t, &r).await.expect("claim over TLS");
    let rec = "checkpoint:run_tls:0:post_tool";
    s.commit(&commit(
        &t,
        &r,
        e,
        &[
            (rec, b"record-0"),
            ("messages:run_tls:00000000000000000000", b"m0"),
        ],
        Some(rec.as_bytes()),
    ))
    .await
    .expect("commit over TLS");
    assert_eq!(
        s.get(&t, &latest_key(&r)).await.expect("get").as_deref(),
        Some(rec.as_bytes())
    );
    assert_eq!(
        s.get(&t, rec).await.expect("get").as_deref(),
        Some(b"record-0" as &[u8])
    );
    let batch: Vec<_> = (1..4)
        .map(|i| {
            let k = format!("checkpoint:run_tls:{i}:post_tool");
            commit(&t, &r, e, &[(k.as_str(), b"r")], Some(k.as_bytes()))
        })
        .collect();
    for res in s.commit_batch(&batch).await {
        res.expect("batched commit over TLS");
    }
    let page = s
        .list(&t, "checkpoint:run_tls:", None, 100)
        .await
        .expect("list");
    assert_eq!(
        page.keys,
        vec![
            "checkpoint:run_tls:0:post_tool",
            "checkpoint:run_tls:1:post_tool",
            "checkpoint:run_tls:2:post_tool",
            "checkpoint:run_tls:3:post_tool",
            "checkpoint:run_tls:latest",
        ]
    );
    assert!(s.delete_run(&t, &r).await.expect("delete_run") >= 6);
    assert_eq!(s.get(&t, rec).await.expect("get"), None);
}

#[tokio::test]
async fn private_ca_round_trip_and_refusals() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let pki = TestPki::new();
    let server = OwnServer::start_tls(&pki.server_args("no"));
    let ca = format!("tls_ca={}", pki.query("ca.pem"));
    let base = format!("rediss://127.0.0.1:{}", server.port);

    // The private CA makes the server trusted, by IP and by DNS name (both are in the SAN).
    let s = RedisStore::from_url(&url(&base, &ca))
        .await
        .expect("connect with tls_ca");
    assert!(s.config().redacted_url().contains("tls_ca="));
    round_trip(&s, "tlsip").await;
    let by_name = RedisStore::from_url(&url(&format!("rediss://localhost:{}", server.port), &ca))
        .await
        .expect("connect to localhost with tls_ca");
    round_trip(&by_name, "tlsname").await;

    // Without the CA (the webpki roots) the server certificate is not trusted.
    let start = Instant::now();
    let err = RedisStore::from_url(&url(&base, "")).await.unwrap_err();
    println!("default roots: {err} / {err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(!err.is_retryable());
    assert!(err.message().contains("TLS"), "{err}");
    assert!(err.message().contains("tls_ca"), "{err}");
    assert!(start.elapsed() < NO_HANG, "took {:?}", start.elapsed());

    // Plain Redis protocol against the TLS port: the server resets the connection without a
    // TLS alert (as a proxy without a backend may, so still `Unavailable`); the error names
    // the likely cause.
    let start = Instant::now();
    let err = RedisStore::from_url(&url(&format!("redis://127.0.0.1:{}", server.port), ""))
        .await
        .unwrap_err();
    println!(
        "plain against TLS: {err} / {err:?} after {:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("use a rediss:// URL"), "{err}");
    assert!(start.elapsed() < NO_HANG, "took {:?}", start.elapsed());

    // TLS against a plain port: the peer does not speak TLS, and the error says so (it was a
    // retryable timeout).
    let plain = OwnServer::start(&[]);
    let start = Instant::now();
    let err = RedisStore::from_url(&url(&format!("rediss://127.0.0.1:{}", plain.port), &ca))
        .await
        .unwrap_err();
    println!(
        "TLS against plain: {err} / {err:?} after {:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("without TLS"), "{err}");
    assert!(start.elapsed() < NO_HANG, "took {:?}", start.elapsed());

    // A port nobody listens on stays `Unavailable` either way: nothing answered the probe.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    for (scheme, opts) in [("redis", ""), ("rediss", ca.as_str())] {
        let err = RedisStore::from_url(&url(&format!("{scheme}://127.0.0.1:{free}"), opts))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{scheme}: {err}");
    }
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let pki = TestPki::new();
    let server = OwnServer::start_tls(&pki.server_args("yes"));
    let base = format!("rediss://127.0.0.1:{}", server.port);
    let ca = format!("tls_ca={}", pki.query("ca.pem"));
    let mtls = format!(
        "{ca}&tls_cert={}&tls_key={}",
        pki.query("client.pem"),
        pki.query("client.key")
    );
    let s = RedisStore::from_url(&url(&base, &mtls))
        .await
        .expect("connect with a client certificate");
    round_trip(&s, "mtls").await;

    // Without a client certificate the server ends the handshake.
    let start = Instant::now();
    let err = RedisStore::from_url(&url(&base, &ca)).await.unwrap_err();
    println!(
        "no client cert: {err} / {err:?} after {:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("tls_cert"), "{err}");
    assert!(start.elapsed() < NO_HANG, "took {:?}", start.elapsed());

    // A certificate the CA signed, but not for client auth (the server's own, whose
    // extendedKeyUsage is serverAuth): the server refuses it.
    let wrong = format!(
        "{ca}&tls_cert={}&tls_key={}",
        pki.query("server.pem"),
        pki.query("server.key")
    );
    let err = RedisStore::from_url(&url(&base, &wrong)).await.unwrap_err();
    println!("server cert as client cert: {err} / {err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// Bad TLS files are `InvalidConfig` naming the option, found before any connection is tried
/// (the port here has no server), and never show a file's contents.
#[tokio::test]
async fn bad_tls_files_are_invalid_config_naming_the_option() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = "TOPSECRET-key-material-0123456789";
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, format!("-----BEGIN PRIVATE KEY-----\n{secret}\n")).expect("write");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no pem here\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let port = free_port();
    let q = |p: &std::path::Path| -> String {
        url::form_urlencoded::byte_serialize(p.to_string_lossy().as_bytes()).collect()
    };
    let cases = [
        (
            format!("tls_ca={}", q(&missing)),
            "option tls_ca: cannot read",
        ),
        (format!("tls_ca={}", q(&empty)), "option tls_ca:"),
        (format!("tls_ca={}", q(&garbage)), "option tls_ca:"),
        (
            format!("tls_cert={}&tls_key={}", q(&empty), q(&garbage)),
            "option tls_cert:",
        ),
    ];
    for (options, expect) in cases {
        let u = url(&format!("rediss://127.0.0.1:{port}"), &options);
        let err = RedisStore::from_url(&u).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{options}: {err}");
        assert!(err.message().contains(expect), "{options}: {err}");
        assert!(!format!("{err} {err:?}").contains(secret), "{err:?}");
    }
    // A key file that is not a key: named, contents not shown.
    let bogus_cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let cert = dir.path().join("cert.pem");
    std::fs::write(&cert, bogus_cert).expect("write");
    let mut cfg = RedisConfig::from_url(&format!("rediss://127.0.0.1:{port}")).expect("url");
    cfg.tls_cert = Some(cert);
    cfg.tls_key = Some(garbage);
    let err = RedisStore::open(cfg).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("option tls_key:"), "{err}");
    assert!(!format!("{err} {err:?}").contains(secret), "{err:?}");
}

#[tokio::test]
async fn mismatched_client_key_is_invalid_config() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let pki = TestPki::new();
    let options = format!(
        "tls_ca={}&tls_cert={}&tls_key={}",
        pki.query("ca.pem"),
        pki.query("client.pem"),
        pki.query("server.key")
    );
    let err = RedisStore::from_url(&url(
        &format!("rediss://127.0.0.1:{}", free_port()),
        &options,
    ))
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.message().contains("does not fit"), "{err}");
    let key = std::fs::read_to_string(pki.path("server.key")).expect("key");
    let body: String = key.lines().nth(1).unwrap_or_default().to_string();
    assert!(!format!("{err} {err:?}").contains(&body), "{err:?}");
}

/// `redis-cli` over TLS to the test server, `args` as one command; its standard output.
fn cli(pki: &TestPki, port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(pki.path("ca.pem"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli is installed");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cluster client over TLS (`ClusterClientBuilder::certs`), on a one-node cluster that
/// holds every slot and talks TLS on its client and bus ports.
#[tokio::test]
async fn cluster_over_tls_with_private_ca() {
    if require_env("AFK_TEST_REDIS_URL").is_none() {
        return;
    }
    let pki = TestPki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = pki.server_args("no");
    let nodes_conf = dir.path().join("nodes.conf");
    let bus_port = free_port().to_string();
    for a in [
        "--cluster-enabled",
        "yes",
        "--tls-cluster",
        "yes",
        "--cluster-announce-ip",
        "127.0.0.1",
        "--cluster-port",
        &bus_port,
        "--cluster-config-file",
        &nodes_conf.to_string_lossy(),
    ] {
        args.push(a.to_string());
    }
    let server = OwnServer::start_tls(&args);
    assert_eq!(
        cli(
            &pki,
            server.port,
            &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]
        )
        .trim(),
        "OK"
    );
    let start = Instant::now();
    while !cli(&pki, server.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cluster never ok"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let base = format!("rediss+cluster://127.0.0.1:{}", server.port);
    let ca = format!("tls_ca={}", pki.query("ca.pem"));
    let s = RedisStore::from_url(&url(&base, &ca))
        .await
        .expect("cluster connect with tls_ca");
    assert!(s.config().cluster && s.config().tls);
    round_trip(&s, "tlscluster").await;

    // Without the CA, the cluster client is refused the same way.
    let start = Instant::now();
    let err = RedisStore::from_url(&url(&base, "")).await.unwrap_err();
    println!("cluster, default roots: {err} / {err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(start.elapsed() < NO_HANG, "took {:?}", start.elapsed());
}
