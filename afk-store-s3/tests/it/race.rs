//! Committers and claimers racing on one run's head, and the server's 412 answers.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Store},
};
use aws_sdk_s3::primitives::ByteStream;

const RACERS: usize = 8;

#[tokio::test]
async fn racing_committers_each_win_one_head_swap_and_lose_nothing() {
    let Some((store, cfg)) = common::store("race").await else {
        return;
    };
    let store = Arc::new(store);
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_race").unwrap());
    let epoch = store.claim(&t, &r).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (store, t, r) = (store.clone(), t.clone(), r.clone());
        tasks.push(tokio::spawn(async move {
            let c = Commit {
                thread: t,
                run: r,
                epoch,
                puts: vec![
                    (
                        format!("effect:run_race:0:call_{i}"),
                        format!("own {i}").into_bytes(),
                    ),
                    (
                        "checkpoint:run_race:0:shared".to_owned(),
                        format!("shared {i}").into_bytes(),
                    ),
                ],
                latest: Some(format!("latest {i}").into_bytes()),
                attention: None,
            };
            store.commit(&c).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    // Every commit is one head swap (seq 1 was the claim): no two swaps won from the same head,
    // or one of them would have been lost.
    let raw = common::raw_client(&cfg).await;
    let head = common::raw_head(&raw, &cfg, "t", "run_race").await;
    assert_eq!(head["seq"], 1 + RACERS as u64, "{head}");
    for i in 0..RACERS {
        let own = store
            .get(&t, &format!("effect:run_race:0:call_{i}"))
            .await
            .unwrap();
        assert_eq!(own, Some(format!("own {i}").into_bytes()));
    }
    let shared = String::from_utf8(
        store
            .get(&t, "checkpoint:run_race:0:shared")
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let latest = String::from_utf8(
        store
            .get(&t, "checkpoint:run_race:latest")
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    // The shared key and the latest pointer come from the same (last) winner.
    assert_eq!(
        shared.strip_prefix("shared "),
        latest.strip_prefix("latest "),
        "{shared} / {latest}"
    );
    // The final head refers only to existing objects, and nothing else is left behind.
    let objs: BTreeSet<String> = common::objects(&raw, &cfg.bucket, "afk/test/t/run_race/o/")
        .await
        .into_iter()
        .collect();
    // Each commit's two values share one pack (`{"p": object, "r": [start, len]}`): a
    // racer's pack stays while its own key is live, though its shared value was overwritten.
    let slots = head["keys"].as_object().unwrap().values();
    let packed = slots.clone().filter(|v| v["p"].is_string()).count();
    assert_eq!(packed, RACERS + 1, "{head}");
    let referenced: BTreeSet<String> = slots
        .filter_map(|v| v.as_str().or_else(|| v["p"].as_str()))
        .map(|s| format!("afk/test/t/run_race/o/{s}"))
        .collect();
    assert_eq!(objs, referenced);
}

#[tokio::test]
async fn racing_claims_hand_out_distinct_epochs_and_fence_all_but_the_last() {
    let Some((store, _)) = common::store("claims").await else {
        return;
    };
    let store = Arc::new(store);
    let (t, r) = (ThreadId::new("t").unwrap(), RunId::new("run_c").unwrap());
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let (store, t, r) = (store.clone(), t.clone(), r.clone());
            tokio::spawn(async move { store.claim(&t, &r).await })
        })
        .collect();
    let mut epochs = BTreeSet::new();
    for task in tasks {
        assert!(
            epochs.insert(task.await.unwrap().unwrap()),
            "duplicate epoch"
        );
    }
    let newest = *epochs.last().unwrap();
    for e in epochs {
        let c = Commit {
            thread: t.clone(),
            run: r.clone(),
            epoch: e,
            puts: vec![],
            latest: Some(b"x".to_vec()),
            attention: None,
        };
        let res = store.commit(&c).await;
        if e == newest {
            res.unwrap();
        } else {
            assert_eq!(res.unwrap_err().kind(), ErrorKind::Fenced);
        }
    }
}

#[tokio::test]
async fn server_answers_412_to_failed_conditions() {
    let Some(cfg) = common::config("", "smoke") else {
        return;
    };
    let raw = common::raw_client(&cfg).await;
    raw.create_bucket()
        .bucket(&cfg.bucket)
        .send()
        .await
        .unwrap();
    let put = |body: &'static str| {
        raw.put_object()
            .bucket(&cfg.bucket)
            .key("k")
            .body(ByteStream::from_static(body.as_bytes()))
    };
    put("a").if_none_match("*").send().await.unwrap();
    let err = put("b").if_none_match("*").send().await.unwrap_err();
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(412),
        "{err:?}"
    );
    let err = put("c")
        .if_match("\"not-the-etag\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(412),
        "{err:?}"
    );
    let got = raw
        .get_object()
        .bucket(&cfg.bucket)
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(&got.body.collect().await.unwrap().into_bytes()[..], b"a");
}
