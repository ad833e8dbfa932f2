//! Store-level behaviour against the real servers (single node and Cluster).

use crate::common;

use afk_core::ErrorKind;
use afk_core::store::{Epoch, Store, latest_key};
use afk_store_redis::{RedisConfig, RedisStore};
use common::*;

#[tokio::test]
async fn claim_commit_get_round_trip_with_binary_values() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("rt");
        let r = run("run_1");
        assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(1), "{topo}");
        let binary: Vec<u8> = (0..=255u8).chain([0, 0, 13, 10]).collect();
        let c = commit(
            &t,
            &r,
            Epoch(1),
            &[
                ("checkpoint:run_1:1:pre_llm", &binary),
                ("messages:run_1:0", b"m0"),
            ],
            Some(b"ptr1"),
        );
        s.commit(&c).await.unwrap();
        assert_eq!(
            s.get(&t, "checkpoint:run_1:1:pre_llm").await.unwrap(),
            Some(binary.clone()),
            "{topo}"
        );
        assert_eq!(
            s.get(&t, &latest_key(&r)).await.unwrap(),
            Some(b"ptr1".to_vec()),
            "{topo}"
        );
        assert_eq!(
            s.get(&t, "run:run_1").await.unwrap(),
            Some(b"1".to_vec()),
            "{topo}"
        );
        assert_eq!(
            s.get(&t, "checkpoint:run_1:9:x").await.unwrap(),
            None,
            "{topo}"
        );
        let keys: Vec<String> = ["messages:run_1:0", "nope:x", "checkpoint:run_1:1:pre_llm"]
            .map(String::from)
            .to_vec();
        let got = s.get_many(&t, &keys).await.unwrap();
        assert_eq!(
            got,
            vec![Some(b"m0".to_vec()), None, Some(binary)],
            "{topo}"
        );
        assert!(s.get_many(&t, &[]).await.unwrap().is_empty());
        // Other threads see nothing of it.
        assert_eq!(
            s.get(&thread("other"), "messages:run_1:0").await.unwrap(),
            None,
            "{topo}"
        );
    }
}

#[tokio::test]
async fn stale_epoch_is_fenced_and_writes_nothing() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("fence");
        let r = run("run_f");
        assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(1));
        assert_eq!(s.claim(&t, &r).await.unwrap(), Epoch(2), "{topo}");
        let old = commit(
            &t,
            &r,
            Epoch(1),
            &[("checkpoint:run_f:1:a", b"x")],
            Some(b"p"),
        );
        let err = s.commit(&old).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{topo}: {err}");
        assert!(!err.is_retryable());
        assert_eq!(
            s.get(&t, "checkpoint:run_f:1:a").await.unwrap(),
            None,
            "{topo}"
        );
        assert_eq!(
            s.get(&t, "checkpoint:run_f:latest").await.unwrap(),
            None,
            "{topo}"
        );
        let page = s.list(&t, "checkpoint:", None, 100).await.unwrap();
        assert!(
            page.keys.is_empty(),
            "{topo}: fenced commit indexed keys: {:?}",
            page.keys
        );
        let new = commit(
            &t,
            &r,
            Epoch(2),
            &[("checkpoint:run_f:1:a", b"y")],
            Some(b"p"),
        );
        s.commit(&new).await.unwrap();
        assert_eq!(
            s.get(&t, "checkpoint:run_f:1:a").await.unwrap(),
            Some(b"y".to_vec())
        );
        // A future epoch nobody claimed is fenced too.
        let future = commit(&t, &r, Epoch(3), &[("checkpoint:run_f:2:a", b"z")], None);
        assert_eq!(
            s.commit(&future).await.unwrap_err().kind(),
            ErrorKind::Fenced
        );
    }
}

#[tokio::test]
async fn commit_rejects_keys_of_other_runs_and_the_fence() {
    for (_, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("inv");
        let r = run("run_a");
        let e = s.claim(&t, &r).await.unwrap();
        for bad in [
            "checkpoint:run_b:1:x",
            "run:run_a",
            "loose",
            "checkpoint:run_a:1 x",
        ] {
            let c = commit(
                &t,
                &r,
                e,
                &[("checkpoint:run_a:1:ok", b"v"), (bad, b"v")],
                None,
            );
            assert_eq!(
                s.commit(&c).await.unwrap_err().kind(),
                ErrorKind::InvalidInput,
                "{bad}"
            );
        }
        assert_eq!(s.get(&t, "checkpoint:run_a:1:ok").await.unwrap(), None);
    }
}

#[tokio::test]
async fn list_pages_by_prefix_in_byte_order_exactly_once() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("list");
        let r = run("run_l");
        let e = s.claim(&t, &r).await.unwrap();
        let mut want: Vec<String> = (0..23).map(|i| format!("messages:run_l:{i:020}")).collect();
        let puts: Vec<(String, Vec<u8>)> = want
            .iter()
            .map(|k| (k.clone(), k.as_bytes().to_vec()))
            .collect();
        let mut c = commit(&t, &r, e, &[("effect:run_l:1:call", b"e")], Some(b"p"));
        c.puts.extend(puts);
        s.commit(&c).await.unwrap();
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = s
                .list(&t, "messages:run_l:", cursor.as_deref(), 5)
                .await
                .unwrap();
            assert!(page.keys.len() <= 5);
            got.extend(page.keys);
            pages += 1;
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        want.sort();
        assert_eq!(got, want, "{topo}");
        assert_eq!(pages, 5, "{topo}: 23 keys in pages of 5");
        let all = s.list(&t, "", None, 1000).await.unwrap();
        assert_eq!(all.next_cursor, None);
        assert_eq!(all.keys.len(), 23 + 3, "{topo}: {:?}", all.keys);
        assert!(all.keys.contains(&"run:run_l".to_string()));
        assert!(all.keys.contains(&"checkpoint:run_l:latest".to_string()));
        assert!(all.keys.windows(2).all(|w| w[0] < w[1]), "sorted");
        assert!(s.list(&t, "zzz", None, 10).await.unwrap().keys.is_empty());
        // limit 0 is clamped to 1, not an endless empty page.
        let one = s.list(&t, "effect:", None, 0).await.unwrap();
        assert_eq!(one.keys, vec!["effect:run_l:1:call".to_string()]);
    }
}

#[tokio::test]
async fn delete_run_removes_only_that_run() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("del");
        for id in ["run_1", "run_10"] {
            let r = run(id);
            let e = s.claim(&t, &r).await.unwrap();
            let keys = [
                format!("checkpoint:{id}:1:pre_llm"),
                format!("effect:{id}:1:c1"),
                format!("messages:{id}:0"),
                format!("bgtool:{id}:j1"),
            ];
            let puts: Vec<(&str, &[u8])> =
                keys.iter().map(|k| (k.as_str(), b"v" as &[u8])).collect();
            s.commit(&commit(&t, &r, e, &puts, Some(b"p")))
                .await
                .unwrap();
        }
        // 4 keys + latest + fence
        assert_eq!(s.delete_run(&t, &run("run_1")).await.unwrap(), 6, "{topo}");
        let left = s.list(&t, "", None, 1000).await.unwrap().keys;
        assert_eq!(left.len(), 6, "{topo}: {left:?}");
        assert!(
            left.iter().all(|k| k.contains("run_10")),
            "{topo}: {left:?}"
        );
        assert_eq!(
            s.get(&t, "effect:run_10:1:c1").await.unwrap(),
            Some(b"v".to_vec())
        );
        assert_eq!(s.get(&t, "run:run_1").await.unwrap(), None);
        assert_eq!(
            s.delete_run(&t, &run("run_1")).await.unwrap(),
            0,
            "idempotent"
        );
        // A re-claimed deleted run starts over.
        assert_eq!(s.claim(&t, &run("run_1")).await.unwrap(), Epoch(1));
    }
}

#[tokio::test]
async fn delete_removes_keys_and_index_entries() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        let t = thread("dk");
        let r = run("run_d");
        let e = s.claim(&t, &r).await.unwrap();
        s.commit(&commit(
            &t,
            &r,
            e,
            &[("effect:run_d:1:a", b"1"), ("effect:run_d:1:b", b"2")],
            None,
        ))
        .await
        .unwrap();
        s.delete(
            &t,
            &["effect:run_d:1:a".into(), "effect:run_d:9:missing".into()],
        )
        .await
        .unwrap();
        assert_eq!(s.get(&t, "effect:run_d:1:a").await.unwrap(), None);
        let keys = s.list(&t, "effect:", None, 10).await.unwrap().keys;
        assert_eq!(keys, vec!["effect:run_d:1:b".to_string()], "{topo}");
        s.delete(&t, &[]).await.unwrap();
    }
}

#[tokio::test]
async fn commit_batch_answers_each_commit_in_order_across_threads() {
    for (topo, cfg) in topologies() {
        let s = connect(cfg).await;
        // Several threads: on Cluster they hash to different slots and nodes.
        let threads: Vec<_> = (0..6).map(|i| thread(&format!("b{i}"))).collect();
        let r = run("run_b");
        let mut epochs = Vec::new();
        for t in &threads {
            epochs.push(s.claim(t, &r).await.unwrap());
        }
        s.claim(&threads[2], &r).await.unwrap(); // thread 2's commits are now stale
        let mut batch = Vec::new();
        for step in 0..3 {
            for (t, e) in threads.iter().zip(&epochs) {
                let k = format!("checkpoint:run_b:{step}:x");
                batch.push(commit(
                    t,
                    &r,
                    *e,
                    &[(k.as_str(), k.as_bytes())],
                    Some(k.as_bytes()),
                ));
            }
        }
        batch.push(commit(
            &threads[0],
            &r,
            epochs[0],
            &[("checkpoint:run_other:1:x", b"bad")],
            None,
        ));
        let out = s.commit_batch(&batch).await;
        assert_eq!(out.len(), batch.len());
        for (c, res) in batch.iter().zip(&out) {
            if c.puts[0].0.contains("run_other") {
                assert_eq!(res.as_ref().unwrap_err().kind(), ErrorKind::InvalidInput);
            } else if c.thread == threads[2] {
                assert_eq!(
                    res.as_ref().unwrap_err().kind(),
                    ErrorKind::Fenced,
                    "{topo}"
                );
            } else {
                assert!(res.is_ok(), "{topo}: {res:?}");
            }
        }
        for (i, t) in threads.iter().enumerate() {
            let latest = s.get(t, "checkpoint:run_b:latest").await.unwrap();
            if i == 2 {
                assert_eq!(latest, None);
            } else {
                // In-order application: the last commit of the thread moved the pointer last.
                assert_eq!(
                    latest.as_deref(),
                    Some(b"checkpoint:run_b:2:x" as &[u8]),
                    "{topo}"
                );
            }
        }
        assert!(s.commit_batch(&[]).await.is_empty());
    }
}

#[tokio::test]
async fn single_node_url_pointed_at_a_cluster_node_is_invalid_config() {
    let Some(urls) = require_env("AFK_TEST_REDIS_CLUSTER_URLS") else {
        return;
    };
    let first = urls.split(',').next().unwrap_or_default().to_string();
    // Refused when connecting: through a single-node URL the node would list only its own
    // keys and answer MOVED to the rest.
    let e = RedisStore::open(config(&first)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("redis+cluster://"), "{e}");
}

#[tokio::test]
async fn cluster_url_pointed_at_a_single_server_is_invalid_config() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let cluster = url.replacen("redis://", "redis+cluster://", 1);
    let e = RedisStore::open(config(&cluster)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("redis:// URL"), "{e}");
}

#[tokio::test]
async fn ttl_expires_a_finished_run_as_a_whole_and_never_one_that_has_not_finished() {
    for (topo, cfg) in topologies() {
        let cfg = cfg.with_ttl_s(1);
        let s = connect(cfg.clone()).await;
        assert!(s.capabilities().ttl);
        let t = thread("ttl");
        let r = run("run_t");
        let e = s.claim(&t, &r).await.unwrap();
        s.commit(&commit(
            &t,
            &r,
            e,
            &[("messages:run_t:0", b"a")],
            Some(b"p0"),
        ))
        .await
        .unwrap();
        s.commit(&commit(
            &t,
            &r,
            e,
            &[("messages:run_t:1", b"b")],
            Some(b"p1"),
        ))
        .await
        .unwrap();
        let kp = format!("{{{}:{}}}:", cfg.prefix, t);
        let keys: Vec<String> = [
            "messages:run_t:0",
            "messages:run_t:1",
            "checkpoint:run_t:latest",
            "run:run_t",
        ]
        .iter()
        .map(|k| format!("{kp}{k}"))
        .collect();
        // Not finished (in progress, paused, suspended): kept past the TTL.
        let times = crate::chunks::expiry_times(topo, &cfg, &keys).await;
        assert!(times.iter().all(|at| *at == -1), "{topo}: {times:?}");
        tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
        assert_eq!(
            s.get(&t, "checkpoint:run_t:latest")
                .await
                .unwrap()
                .as_deref(),
            Some(&b"p1"[..]),
            "{topo}: a run that has not finished expired"
        );
        // A finish under an older claim is fenced and changes nothing.
        let e2 = s.claim(&t, &r).await.unwrap();
        let err = s.finish_run(&t, &r, e).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Fenced, "{topo}: {err}");
        let times = crate::chunks::expiry_times(topo, &cfg, &keys).await;
        assert!(times.iter().all(|at| *at == -1), "{topo}: {times:?}");
        // Finished: every key of the run carries one common expiry instant, then is gone.
        s.finish_run(&t, &r, e2).await.unwrap();
        let times = crate::chunks::expiry_times(topo, &cfg, &keys).await;
        assert!(times[0] > 0, "{topo}: key has no expiry: {times:?}");
        assert!(times.windows(2).all(|w| w[0] == w[1]), "{topo}: {times:?}");
        tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
        assert_eq!(s.get(&t, "messages:run_t:0").await.unwrap(), None, "{topo}");
        assert_eq!(
            s.get(&t, "checkpoint:run_t:latest").await.unwrap(),
            None,
            "{topo}"
        );
        let page = s.list(&t, "", None, 100).await.unwrap();
        assert!(
            page.keys.is_empty(),
            "{topo}: expired keys listed: {:?}",
            page.keys
        );
    }
}

#[tokio::test]
async fn a_claim_stops_the_expiry_an_earlier_version_gave_a_run_in_progress() {
    for (topo, cfg) in topologies() {
        let cfg = cfg.with_ttl_s(3600);
        let s = connect(cfg.clone()).await;
        let t = thread("ttlold");
        let r = run("run_o");
        let e = s.claim(&t, &r).await.unwrap();
        s.commit(&commit(
            &t,
            &r,
            e,
            &[("messages:run_o:0", b"a")],
            Some(b"p0"),
        ))
        .await
        .unwrap();
        let kp = format!("{{{}:{}}}:", cfg.prefix, t);
        let keys: Vec<String> = ["messages:run_o:0", "checkpoint:run_o:latest", "run:run_o"]
            .iter()
            .map(|k| format!("{kp}{k}"))
            .collect();
        // As an earlier version left it: every key of the run in progress expiring.
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("PEXPIRE").arg(k).arg(600_000).ignore();
        }
        let () = crate::chunks::query(topo, &cfg, &pipe).await;
        s.claim(&t, &r).await.unwrap();
        let times = crate::chunks::expiry_times(topo, &cfg, &keys).await;
        assert!(times.iter().all(|at| *at == -1), "{topo}: {times:?}");
    }
}

#[tokio::test]
async fn a_fence_that_is_not_an_integer_is_corrupt() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let cfg = config(&url);
    let s = connect(cfg.clone()).await;
    let t = thread("corrupt");
    let r = run("run_c");
    s.claim(&t, &r).await.unwrap();
    let mut conn = raw(&url).await;
    let fence = format!("{{{}:{}}}:run:run_c", cfg.prefix, t);
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg("garbage")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = s.claim(&t, &r).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.key(), Some("run:run_c"));
    let c = commit(&t, &r, Epoch(1), &[("checkpoint:run_c:1:x", b"v")], None);
    assert_eq!(s.commit(&c).await.unwrap_err().kind(), ErrorKind::Fenced);
}

/// A config built with the constructors and setters, as code outside this crate builds one (the
/// struct is `#[non_exhaustive]`, so no literal), opens on one node and on a cluster, and its
/// options reach the store: the TTL capability, the key prefix in the physical keys.
#[tokio::test]
async fn a_config_built_with_setters_opens_with_its_options() {
    for (topo, parsed) in topologies() {
        let prefix = common::unique("b");
        let cfg = if parsed.cluster {
            RedisConfig::cluster(parsed.nodes.clone())
        } else {
            let (host, port) = parsed.nodes[0].clone();
            RedisConfig::single(host, port)
        }
        .with_prefix(prefix.clone())
        .with_ttl_s(600)
        .with_connect_timeout_ms(3_000)
        .with_response_timeout_ms(4_000);
        assert_eq!((cfg.cluster, cfg.ttl_s), (topo == "cluster", Some(600)));
        let s = RedisStore::open(cfg.clone()).await.expect("open");
        assert!(
            s.capabilities().ttl,
            "{topo}: ttl_s did not reach the store"
        );
        let (t, r) = (thread("built"), run("run_b"));
        let e = s.claim(&t, &r).await.unwrap();
        s.commit(&commit(&t, &r, e, &[("messages:run_b:0", b"v")], None))
            .await
            .unwrap();
        assert_eq!(
            s.get(&t, "messages:run_b:0").await.unwrap().as_deref(),
            Some(&b"v"[..])
        );
        if !cfg.cluster {
            let (h, p) = &cfg.nodes[0];
            let mut raw = common::raw(&format!("redis://{h}:{p}")).await;
            let key = format!("{{{prefix}:{t}}}:messages:run_b:0");
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(exists, "{key} missing: the prefix did not reach the store");
        }
    }
}
