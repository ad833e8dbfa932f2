//! Threads and runs do not see or disturb each other's keys.

use afk_core::{ErrorKind, store::Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, list_all, named_run, unique_suffix,
    unique_thread,
};

/// The same run id and keys in two threads are two independent namespaces: values, listings,
/// fences and `delete_run` stay in their thread.
pub async fn threads_are_isolated(store: &dyn Store) -> CaseResult {
    let (t1, t2) = (unique_thread("iso-thread-a"), unique_thread("iso-thread-b"));
    let r = named_run(&format!("run_{}", unique_suffix()));
    let key = format!("checkpoint:{r}:0:pre_llm");
    let e1 = store.claim(&t1, &r).await.ctx("claim in thread 1")?;
    let e2 = store.claim(&t2, &r).await.ctx("claim in thread 2")?;
    store
        .commit(&commit(
            &t1,
            &r,
            e1,
            vec![(key.clone(), b"one".to_vec())],
            Some(b"p1".to_vec()),
        ))
        .await
        .ctx("commit in thread 1")?;
    store
        .commit(&commit(
            &t2,
            &r,
            e2,
            vec![(key.clone(), b"two".to_vec())],
            Some(b"p2".to_vec()),
        ))
        .await
        .ctx("commit in thread 2")?;
    expect_value(store, &t1, &key, Some(b"one")).await?;
    expect_value(store, &t2, &key, Some(b"two")).await?;
    // A claim in thread 2 does not fence thread 1.
    store.claim(&t2, &r).await.ctx("second claim in thread 2")?;
    let c = commit(
        &t1,
        &r,
        e1,
        vec![(format!("effect:{r}:0:c"), b"x".to_vec())],
        None,
    );
    store
        .commit(&c)
        .await
        .ctx("thread 1 commits after a claim of the same run id in thread 2")?;
    let removed = store
        .delete_run(&t2, &r)
        .await
        .ctx("delete_run in thread 2")?;
    ensure!(
        removed == 3,
        "delete_run in thread 2 removed {removed} keys, expected 3"
    );
    let left = list_all(store, &t1, "", 100).await?;
    let want = vec![
        key.clone(),
        format!("checkpoint:{r}:latest"),
        format!("effect:{r}:0:c"),
        format!("run:{r}"),
    ];
    ensure!(
        left == want,
        "thread 1 after delete_run in thread 2: expected {want:?}, got {left:?}"
    );
    store
        .delete(&t1, std::slice::from_ref(&key))
        .await
        .ctx("delete in thread 1")?;
    let t2_keys = list_all(store, &t2, "", 100).await?;
    ensure!(t2_keys.is_empty(), "thread 2 after delete_run: {t2_keys:?}");
    expect_value(store, &t1, &key, None).await
}

/// Runs whose ids are prefixes of each other (`run_x_1`, `run_x_10`) have separate fences,
/// separate listings under `family:<run>:`, and `delete_run` of one leaves the other.
pub async fn prefix_sharing_runs_are_isolated(store: &dyn Store) -> CaseResult {
    let t = unique_thread("iso-runs");
    let base = format!("run_{}", unique_suffix());
    let (r1, r10) = (
        named_run(&format!("{base}_1")),
        named_run(&format!("{base}_10")),
    );
    let e1 = store.claim(&t, &r1).await.ctx("claim run 1")?;
    let e10 = store.claim(&t, &r10).await.ctx("claim run 10")?;
    for (r, e) in [(&r1, e1), (&r10, e10)] {
        let puts = vec![
            (
                format!("checkpoint:{r}:0:pre_llm"),
                r.as_str().as_bytes().to_vec(),
            ),
            (format!("effect:{r}:0:call"), b"e".to_vec()),
            (format!("messages:{r}:00000000000000000000"), b"m".to_vec()),
        ];
        store
            .commit(&commit(&t, r, e, puts, Some(b"p".to_vec())))
            .await
            .ctx(format!("commit {r}"))?;
    }
    // Claiming run 10 again fences run 10 only.
    let e10b = store.claim(&t, &r10).await.ctx("claim run 10 again")?;
    store
        .commit(&commit(&t, &r1, e1, vec![], None))
        .await
        .ctx("run 1 commits after run 10 was claimed again")?;
    expect_kind(
        store.commit(&commit(&t, &r10, e10, vec![], None)).await,
        ErrorKind::Fenced,
        "run 10 under its old epoch",
    )?;
    store
        .commit(&commit(&t, &r10, e10b, vec![], None))
        .await
        .ctx("run 10 under its new epoch")?;
    let under_r1 = list_all(store, &t, &format!("checkpoint:{r1}:"), 100).await?;
    let want = vec![
        format!("checkpoint:{r1}:0:pre_llm"),
        format!("checkpoint:{r1}:latest"),
    ];
    ensure!(
        under_r1 == want,
        "listing checkpoint:{r1}: expected {want:?}, got {under_r1:?}"
    );
    let removed = store.delete_run(&t, &r1).await.ctx("delete_run run 1")?;
    ensure!(
        removed == 5,
        "delete_run of {r1} removed {removed} keys, expected 5"
    );
    let left = list_all(store, &t, "", 100).await?;
    let mut want: Vec<String> = vec![
        format!("checkpoint:{r10}:0:pre_llm"),
        format!("checkpoint:{r10}:latest"),
        format!("effect:{r10}:0:call"),
        format!("messages:{r10}:00000000000000000000"),
        format!("run:{r10}"),
    ];
    want.sort();
    ensure!(
        left == want,
        "after delete_run of {r1}: expected {want:?}, got {left:?}"
    );
    expect_value(
        store,
        &t,
        &format!("checkpoint:{r10}:0:pre_llm"),
        Some(r10.as_str().as_bytes()),
    )
    .await
}
