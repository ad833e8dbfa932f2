//! `fixtures check` against the real Redis and S3 servers (features `redis`, `s3`). Each test
//! reads its server from the environment and skips with a printed line when it is not set,
//! unless `AFK_REQUIRE_INTEGRATION=1`.

#![cfg(any(feature = "redis", feature = "s3"))]

use crate::common;

use afk_core::testkit::require_env;
use common::{afk_in, corpus};

fn corpus_passes_on(url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = corpus();
    let out = afk_in(
        dir.path(),
        &[
            "fixtures",
            "check",
            "--store",
            url,
            c.to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.lines().last(), Some("77 passed, 0 failed"));
}

#[cfg(feature = "redis")]
#[test]
fn the_corpus_passes_on_redis() {
    if let Some(url) = require_env("AFK_TEST_REDIS_URL") {
        corpus_passes_on(&url);
    }
}

#[cfg(feature = "s3")]
#[test]
fn the_corpus_passes_on_s3() {
    let Some(endpoint) = require_env("AFK_TEST_S3_ENDPOINT") else {
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let url = format!(
        "s3://afk-cli-{nanos}/fixtures?endpoint={endpoint}&region={}&force_path_style=true\
         &access_key_id={}&secret_access_key={}&create_bucket=true",
        var("AFK_TEST_S3_REGION"),
        var("AFK_TEST_S3_ACCESS_KEY_ID"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY"),
    );
    corpus_passes_on(&url);
}

/// An `s3://` store with no region anywhere (URL, environment, AWS config files) is
/// `invalid_config` naming the fix, before any request: not a retryable `unavailable` from
/// every request failing to sign. No server is needed (nothing is sent).
#[cfg(feature = "s3")]
#[test]
fn s3_without_a_region_is_invalid_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let none = dir.path().join("no-such-aws-file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_afk"))
        .args([
            "--json",
            "threads",
            "--store",
            "s3://afk-no-region/p?endpoint=http://127.0.0.1:9&access_key_id=a&secret_access_key=b",
        ])
        .current_dir(dir.path())
        .env_remove("AFK_STORE")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", &none)
        .env("AWS_SHARED_CREDENTIALS_FILE", &none)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("run afk");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    assert_eq!(doc["error"]["kind"], "invalid_config", "{doc}");
    assert_eq!(doc["error"]["retryable"], false, "{doc}");
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("region=") && message.contains("AWS_REGION"),
        "{doc}"
    );
}
