//! `fixtures check` against the real Redis and S3 servers (features `redis`, `s3`). Each test
//! reads its server from the environment and skips with a printed line when it is not set,
//! unless `AFK_REQUIRE_INTEGRATION=1`.

#![cfg(any(feature = "redis", feature = "s3"))]

mod common;

use common::{afk_in, corpus};

fn env_or_skip(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("AFK_REQUIRE_INTEGRATION").as_deref() == Ok("1") => {
            panic!("{name} is not set and AFK_REQUIRE_INTEGRATION=1")
        }
        _ => {
            println!("skipped: set {name}");
            None
        }
    }
}

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
    if let Some(url) = env_or_skip("AFK_TEST_REDIS_URL") {
        corpus_passes_on(&url);
    }
}

#[cfg(feature = "s3")]
#[test]
fn the_corpus_passes_on_s3() {
    let Some(endpoint) = env_or_skip("AFK_TEST_S3_ENDPOINT") else {
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
