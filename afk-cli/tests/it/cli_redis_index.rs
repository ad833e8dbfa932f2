//! The Redis thread index from the console: `afk prune` of a thread's last run takes it out of
//! the index, and `afk threads --rebuild-index` brings back a thread written before the index
//! existed. Real Redis and Redis Cluster.

#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::cli_ops;
use crate::common;

use common::{afk_in, corpus};
use serde_json::{Value, json};

/// The raw members of the thread index, and a ZREM of one, on a plain connection.
fn index(nodes: &[String], cluster: bool, prefix: &str, zrem: Option<&str>) -> Vec<String> {
    let key = format!("{{{prefix}}}#threads");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut rem = redis::cmd("ZREM");
        rem.arg(&key).arg(zrem.unwrap_or(""));
        let mut range = redis::cmd("ZRANGE");
        range.arg(&key).arg(0).arg(-1);
        if cluster {
            let client = redis::cluster::ClusterClient::new(nodes.to_vec()).unwrap();
            let mut c = client.get_async_connection().await.unwrap();
            if zrem.is_some() {
                let _: i64 = rem.query_async(&mut c).await.unwrap();
            }
            range.query_async(&mut c).await.unwrap()
        } else {
            let client = redis::Client::open(nodes[0].as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            if zrem.is_some() {
                let _: i64 = rem.query_async(&mut c).await.unwrap();
            }
            range.query_async(&mut c).await.unwrap()
        }
    })
}

fn check(url: &str, nodes: &[String], cluster: bool, prefix: &str) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = corpus().join("b-crash-k42-s3-pre_llm.json");
    let run = |args: &[&str]| {
        let mut all = vec!["--store", url, "--json"];
        all.extend(args);
        let out = afk_in(dir.path(), &all);
        assert_eq!(out.code, Some(0), "{args:?}: {}{}", out.stdout, out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()
    };
    run(&[
        "fixtures",
        "load",
        "--thread",
        "fx",
        fixture.to_str().unwrap(),
    ]);
    assert_eq!(index(nodes, cluster, prefix, None), ["fx"]);
    // As if written before the index existed.
    assert!(index(nodes, cluster, prefix, Some("fx")).is_empty());
    assert_eq!(run(&["threads"])["threads"], json!([]));
    let rebuilt = run(&["threads", "--rebuild-index"]);
    assert_eq!(
        rebuilt["index_rebuild"],
        json!({"added": 1, "removed": 0}),
        "{rebuilt}"
    );
    assert_eq!(rebuilt["threads"][0]["thread"], "fx", "{rebuilt}");
    // Pruning the thread's only run takes the thread out of the index.
    assert_eq!(rebuilt["threads"][0]["runs"], 1, "{rebuilt}");
    run(&[
        "prune",
        "--thread",
        "fx",
        "--run",
        "run_scenario_b",
        "--force",
    ]);
    assert!(index(nodes, cluster, prefix, None).is_empty());
    assert_eq!(
        run(&["threads", "--rebuild-index"])["index_rebuild"],
        json!({"added": 0, "removed": 0})
    );
}

#[test]
fn prune_and_rebuild_keep_the_redis_thread_index_exact() {
    if let Some(url) = cli_ops::require_env("AFK_TEST_REDIS_URL") {
        let prefix = cli_ops::unique("idx");
        check(
            &format!("{url}?prefix={prefix}"),
            std::slice::from_ref(&url),
            false,
            &prefix,
        );
    }
}

#[test]
fn prune_and_rebuild_keep_the_redis_cluster_thread_index_exact() {
    if let Some(urls) = cli_ops::require_env("AFK_TEST_REDIS_CLUSTER_URLS") {
        let prefix = cli_ops::unique("idx");
        let nodes: Vec<String> = urls.split(',').map(|u| u.trim().to_owned()).collect();
        let hosts: Vec<&str> = nodes
            .iter()
            .map(|u| u.trim_start_matches("redis://"))
            .collect();
        let url = format!("redis+cluster://{}?prefix={prefix}", hosts.join(","));
        check(&url, &nodes, true, &prefix);
    }
}

#[test]
fn rebuild_index_on_another_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::rocks(&dir.path().join("db"));
    // An empty store (`threads` does not create one).
    drop(afk::backend::rocksdb::RocksDbStore::from_url(&url).unwrap());
    let out = afk_in(dir.path(), &["--store", &url, "threads", "--rebuild-index"]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(out.stderr.contains("for Redis stores"), "{}", out.stderr);
}
