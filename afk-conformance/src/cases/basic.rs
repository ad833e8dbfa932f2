//! Reading and writing through commits: get, get_many, overwrite, empty commits, batches.

use afk_core::{ErrorKind, store::Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, show, unique_run, unique_thread,
};

/// A key that was never written reads as `None`, in a thread that has no keys at all and in
/// one that has some.
pub async fn get_missing_key_is_none(store: &dyn Store) -> CaseResult {
    let t = unique_thread("basic-missing");
    let r = unique_run();
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), None).await?;
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let c = commit(
        &t,
        &r,
        e,
        vec![(format!("checkpoint:{r}:0:a"), b"x".to_vec())],
        None,
    );
    store.commit(&c).await.ctx("commit")?;
    expect_value(store, &t, &format!("checkpoint:{r}:0:b"), None).await?;
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), None).await
}

/// A commit's puts and latest pointer are all readable after it returns, with `get` and with
/// `get_many` (answers in the order asked, `None` for missing keys); three commits in a row.
pub async fn commit_then_get(store: &dyn Store) -> CaseResult {
    let t = unique_thread("basic-commit");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    for step in 0..3 {
        let rec = format!("checkpoint:{r}:{step}:pre_llm");
        let eff = format!("effect:{r}:{step}:call_{step}");
        let puts = vec![
            (rec.clone(), format!("record {step}").into_bytes()),
            (eff.clone(), format!("effect {step}").into_bytes()),
        ];
        let c = commit(&t, &r, e, puts, Some(rec.clone().into_bytes()));
        store.commit(&c).await.ctx(format!("commit step {step}"))?;
        expect_value(store, &t, &rec, Some(format!("record {step}").as_bytes())).await?;
        expect_value(store, &t, &eff, Some(format!("effect {step}").as_bytes())).await?;
        expect_value(
            store,
            &t,
            &format!("checkpoint:{r}:latest"),
            Some(rec.as_bytes()),
        )
        .await?;
        let asked = vec![eff.clone(), format!("effect:{r}:{step}:nope"), rec.clone()];
        let got = store.get_many(&t, &asked).await.ctx("get_many")?;
        let want = vec![
            Some(format!("effect {step}").into_bytes()),
            None,
            Some(format!("record {step}").into_bytes()),
        ];
        ensure!(
            got == want,
            "get_many {asked:?}: expected {:?}, got {:?}",
            want.iter().map(show).collect::<Vec<_>>(),
            got.iter().map(show).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// Putting a key again replaces its value, and moving the pointer again replaces it; a
/// commit without `latest` leaves the pointer where it was.
pub async fn overwrite_replaces_value(store: &dyn Store) -> CaseResult {
    let t = unique_thread("basic-overwrite");
    let r = unique_run();
    let key = format!("effect:{r}:1:call_a");
    let latest = format!("checkpoint:{r}:latest");
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let c = commit(
        &t,
        &r,
        e,
        vec![(key.clone(), b"intent".to_vec())],
        Some(b"p1".to_vec()),
    );
    store.commit(&c).await.ctx("first commit")?;
    let c = commit(
        &t,
        &r,
        e,
        vec![(key.clone(), b"result".to_vec())],
        Some(b"p2".to_vec()),
    );
    store.commit(&c).await.ctx("second commit")?;
    expect_value(store, &t, &key, Some(b"result")).await?;
    expect_value(store, &t, &latest, Some(b"p2")).await?;
    let c = commit(&t, &r, e, vec![(key.clone(), b"third".to_vec())], None);
    store.commit(&c).await.ctx("commit without latest")?;
    expect_value(store, &t, &key, Some(b"third")).await?;
    expect_value(store, &t, &latest, Some(b"p2")).await
}

/// A commit with no puts and no pointer succeeds under the current epoch and writes nothing
/// but leaves the fence; under a stale epoch it is `Fenced`.
pub async fn empty_commit_checks_fence_only(store: &dyn Store) -> CaseResult {
    let t = unique_thread("basic-empty");
    let r = unique_run();
    let e1 = store.claim(&t, &r).await.ctx("claim")?;
    store
        .commit(&commit(&t, &r, e1, vec![], None))
        .await
        .ctx("empty commit")?;
    let keys = crate::support::list_all(store, &t, "", 100).await?;
    ensure!(
        keys == vec![format!("run:{r}")],
        "after an empty commit the thread holds {keys:?}"
    );
    let _e2 = store.claim(&t, &r).await.ctx("second claim")?;
    expect_kind(
        store.commit(&commit(&t, &r, e1, vec![], None)).await,
        ErrorKind::Fenced,
        "empty commit under a stale epoch",
    )
}

/// `commit_batch` answers one result per commit, in order; each commit is fenced on its own
/// (a stale one in the middle fails alone) and the others are applied in order.
pub async fn commit_batch_applies_each_in_order(store: &dyn Store) -> CaseResult {
    let t = unique_thread("basic-batch");
    let (r1, r2) = (unique_run(), unique_run());
    let e1 = store.claim(&t, &r1).await.ctx("claim r1")?;
    let stale = store.claim(&t, &r2).await.ctx("claim r2")?;
    let e2 = store.claim(&t, &r2).await.ctx("claim r2 again")?;
    let key1 = format!("checkpoint:{r1}:0:pre_llm");
    let key2 = format!("checkpoint:{r2}:0:pre_llm");
    let batch = vec![
        commit(
            &t,
            &r1,
            e1,
            vec![(key1.clone(), b"a".to_vec())],
            Some(b"a".to_vec()),
        ),
        commit(
            &t,
            &r2,
            stale,
            vec![(key2.clone(), b"stale".to_vec())],
            None,
        ),
        commit(&t, &r2, e2, vec![(key2.clone(), b"b".to_vec())], None),
        commit(
            &t,
            &r1,
            e1,
            vec![(key1.clone(), b"c".to_vec())],
            Some(b"c".to_vec()),
        ),
    ];
    let results = store.commit_batch(&batch).await;
    ensure!(
        results.len() == 4,
        "commit_batch of 4 answered {} results",
        results.len()
    );
    let kinds: Vec<Option<ErrorKind>> = results
        .iter()
        .map(|r| r.as_ref().err().map(afk_core::Error::kind))
        .collect();
    ensure!(
        kinds == vec![None, Some(ErrorKind::Fenced), None, None],
        "commit_batch results: expected [ok, fenced, ok, ok], got {kinds:?}"
    );
    expect_value(store, &t, &key1, Some(b"c")).await?;
    expect_value(store, &t, &format!("checkpoint:{r1}:latest"), Some(b"c")).await?;
    expect_value(store, &t, &key2, Some(b"b")).await
}
