//! Shared helpers of the S3 integration tests: server address from the environment, unique
//! buckets, a raw SDK client to look at the objects behind the store.
#![allow(dead_code)]

use afk_core::{
    RunId, ThreadId,
    store::{Commit, Epoch},
};
use afk_store_s3::{S3Config, S3Store};
use aws_sdk_s3::Client;

/// Thread `t` and run `run`.
pub fn ids(run: &str) -> (ThreadId, RunId) {
    (
        ThreadId::new("t").expect("thread id"),
        RunId::new(run).expect("run id"),
    )
}

/// Step `i`'s commit: a record and a transcript entry (two values: one pack object, read back
/// by range) and the pointer `{"step":i}`.
pub fn step(t: &ThreadId, r: &RunId, epoch: Epoch, i: u32) -> Commit {
    Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch,
        puts: vec![
            (
                format!("checkpoint:{r}:{i}:pre_llm"),
                format!("value {i}").into_bytes(),
            ),
            (
                format!("messages:{r}:{i:020}"),
                format!("message {i}").into_bytes(),
            ),
        ],
        latest: Some(format!("{{\"step\":{i}}}").into_bytes()),
        attention: None,
    }
}

/// Endpoint, region, key id and secret of the test server, or `None` (test skipped) when
/// `AFK_TEST_S3_ENDPOINT` is unset. Panics instead when `AFK_REQUIRE_INTEGRATION=1`.
pub fn server() -> Option<(String, String, String, String)> {
    let endpoint = afk_conformance::require_env("AFK_TEST_S3_ENDPOINT")?;
    let var =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    Some((
        endpoint,
        var("AFK_TEST_S3_REGION", "us-east-1"),
        var("AFK_TEST_S3_ACCESS_KEY_ID", "test"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY", "test"),
    ))
}

/// A bucket name no other test run uses.
pub fn unique_bucket(tag: &str) -> String {
    format!("afk-{tag}-{:016x}", rand::random::<u64>())
}

/// Config for a fresh bucket on `endpoint` (created at open), built with the `with_*` setters.
pub fn config(endpoint: &str, tag: &str) -> Option<S3Config> {
    let (default_endpoint, region, key, secret) = server()?;
    let endpoint = if endpoint.is_empty() {
        default_endpoint
    } else {
        endpoint.to_owned()
    };
    // Built as code outside the crate must build it (the struct is #[non_exhaustive]).
    Some(
        S3Config::new(unique_bucket(tag))
            .with_prefix("afk/test")
            .with_endpoint(endpoint)
            .with_region(region)
            .with_force_path_style(true)
            .with_credentials(key, secret)
            .with_create_bucket(true),
    )
}

/// A store on a fresh bucket of the shared test server, or `None` when skipped.
pub async fn store(tag: &str) -> Option<(S3Store, S3Config)> {
    let cfg = config("", tag)?;
    let store = S3Store::open(cfg.clone()).await.expect("open S3 store");
    Some((store, cfg))
}

/// A raw SDK client for the same server, to look behind the store.
pub async fn raw_client(cfg: &S3Config) -> Client {
    let creds = aws_credential_types::Credentials::new(
        cfg.access_key_id.clone().unwrap_or_default(),
        cfg.secret_access_key
            .as_ref()
            .map(|s| s.expose().to_owned())
            .unwrap_or_default(),
        None,
        None,
        "test",
    );
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(
            cfg.region.clone().unwrap_or_default(),
        ))
        .endpoint_url(cfg.endpoint.clone().unwrap_or_default())
        .credentials_provider(creds)
        .load()
        .await;
    Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    )
}

/// Every object key in the bucket under `prefix`.
pub async fn objects(client: &Client, bucket: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .expect("list objects");
        out.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned)),
        );
        match page.next_continuation_token() {
            Some(t) => token = Some(t.to_owned()),
            None => return out,
        }
    }
}

/// The raw head JSON of a run.
pub async fn raw_head(
    client: &Client,
    cfg: &S3Config,
    thread: &str,
    run: &str,
) -> serde_json::Value {
    raw_json(
        client,
        &cfg.bucket,
        &format!("{}/{thread}/{run}/head", cfg.prefix),
    )
    .await
}

/// An object of the bucket read as JSON (a head, an index segment).
pub async fn raw_json(client: &Client, bucket: &str, key: &str) -> serde_json::Value {
    let out = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    let bytes = out.body.collect().await.expect("object body").into_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{key} is not JSON: {e}"))
}
