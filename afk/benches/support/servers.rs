//! Where the server-backed stores are: the `AFK_TEST_…` variables of `cargo xtask test`. A
//! missing variable skips that store's benchmarks with a printed line (benchmarks are not
//! tests; the report shows the group as not measured).

use std::time::{SystemTime, UNIX_EPOCH};

/// A name unique to this process and moment, for key prefixes and bucket names.
pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    format!("{tag}{}x{nanos}", std::process::id())
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `AFK_TEST_REDIS_URL`, or `None` after printing why the Redis benchmarks are skipped.
pub fn redis_url() -> Option<String> {
    let url = var("AFK_TEST_REDIS_URL");
    if url.is_none() {
        eprintln!("skipped: set AFK_TEST_REDIS_URL to benchmark the Redis store");
    }
    url
}

/// The S3-compatible test service.
#[derive(Debug, Clone)]
pub struct S3Env {
    /// `AFK_TEST_S3_ENDPOINT`.
    pub endpoint: String,
    /// `AFK_TEST_S3_REGION` (default `us-east-1`).
    pub region: String,
    /// `AFK_TEST_S3_ACCESS_KEY_ID`.
    pub key_id: String,
    /// `AFK_TEST_S3_SECRET_ACCESS_KEY`.
    pub secret: String,
}

/// The S3 test service from `AFK_TEST_S3_…`, or `None` after printing why S3 is skipped.
pub fn s3_env() -> Option<S3Env> {
    let env = (|| {
        Some(S3Env {
            endpoint: var("AFK_TEST_S3_ENDPOINT")?,
            region: var("AFK_TEST_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
            key_id: var("AFK_TEST_S3_ACCESS_KEY_ID")?,
            secret: var("AFK_TEST_S3_SECRET_ACCESS_KEY")?,
        })
    })();
    if env.is_none() {
        eprintln!(
            "skipped: set AFK_TEST_S3_ENDPOINT, AFK_TEST_S3_ACCESS_KEY_ID and \
             AFK_TEST_S3_SECRET_ACCESS_KEY to benchmark the S3 store"
        );
    }
    env
}

/// Our Redis store on `url` under a fresh key prefix.
#[cfg(feature = "redis")]
pub async fn redis_store(url: &str) -> afk_store_redis::RedisStore {
    let mut cfg = afk_store_redis::RedisConfig::from_url(url).expect("AFK_TEST_REDIS_URL");
    cfg.prefix = unique("bench");
    afk_store_redis::RedisStore::open(cfg)
        .await
        .expect("connect to AFK_TEST_REDIS_URL")
}

/// Our S3 store in a fresh bucket of the test service.
#[cfg(feature = "s3")]
pub async fn s3_store(env: &S3Env, bucket: &str) -> afk_store_s3::S3Store {
    afk_store_s3::S3Store::open(s3_config(env, bucket))
        .await
        .expect("open the S3 test service")
}

/// The configuration of [`s3_store`] (open it again for a store with cold caches).
#[cfg(feature = "s3")]
pub fn s3_config(env: &S3Env, bucket: &str) -> afk_store_s3::S3Config {
    let mut cfg = afk_store_s3::S3Config::new(bucket);
    cfg.endpoint = Some(env.endpoint.clone());
    cfg.region = Some(env.region.clone());
    cfg.force_path_style = true;
    cfg.access_key_id = Some(env.key_id.clone());
    cfg.secret_access_key = Some(afk_store_s3::Secret::new(env.secret.clone()));
    cfg.create_bucket = true;
    cfg
}

/// A plain aws-sdk-s3 client for the test service (path style, static keys), as an
/// application would build one.
pub async fn raw_s3_client(env: &S3Env) -> aws_sdk_s3::Client {
    let creds = aws_credential_types::Credentials::new(
        env.key_id.clone(),
        env.secret.clone(),
        None,
        None,
        "bench",
    );
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(env.region.clone()))
        .endpoint_url(env.endpoint.clone())
        .credentials_provider(creds)
        .load()
        .await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}
