//! Fencing: claims hand out increasing epochs; only the newest claimant may commit.

use afk_core::{
    ErrorKind,
    store::{Epoch, Store},
};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, fail, list_all, unique_run,
    unique_thread,
};

/// Each claim of a run returns an epoch strictly greater than the previous one, and greater
/// than 0; claims of another run do not disturb it.
pub async fn claim_increases_epoch(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-claim");
    let (r, other) = (unique_run(), unique_run());
    let mut prev = Epoch(0);
    for i in 0..10 {
        let e = store.claim(&t, &r).await.ctx(format!("claim {i}"))?;
        ensure!(
            e > prev,
            "claim {i} returned epoch {e}, not greater than {prev}"
        );
        prev = e;
        store
            .claim(&t, &other)
            .await
            .ctx("claim of the other run")?;
    }
    Ok(())
}

/// `claim_if_new` claims a run with no latest pointer (fresh, claimed before, holding records
/// but no pointer, deleted) like `claim` does, with an epoch above every earlier one; for a
/// run whose pointer exists it answers `None` and claims nothing: the epoch in use still
/// commits.
pub async fn claim_if_new_claims_only_runs_without_a_pointer(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-if-new");
    let r = unique_run();
    let first = store
        .claim_if_new(&t, &r)
        .await
        .ctx("claim_if_new of a fresh run")?;
    let Some(first) = first else {
        return Err(fail!("claim_if_new of a fresh run answered None"));
    };
    ensure!(first > Epoch(0), "claim_if_new returned epoch {first}");
    ensure!(
        store
            .get(&t, &format!("run:{r}"))
            .await
            .ctx("get the fence")?
            .is_some(),
        "claim_if_new claimed the run but its fence key run:{r} is missing"
    );
    // Claimed before, records but no pointer: still new.
    let claimed = store.claim(&t, &r).await.ctx("claim")?;
    let rec0 = format!("checkpoint:{r}:0:pre_llm");
    let c = commit(&t, &r, claimed, vec![(rec0.clone(), b"0".to_vec())], None);
    store
        .commit(&c)
        .await
        .ctx("commit a record without a pointer")?;
    let again = store
        .claim_if_new(&t, &r)
        .await
        .ctx("claim_if_new of a run with no pointer")?;
    let Some(again) = again else {
        return Err(fail!(
            "claim_if_new answered None for a run whose records exist but whose pointer does not"
        ));
    };
    ensure!(
        again > claimed,
        "claim_if_new returned epoch {again}, not above the earlier claim's {claimed}"
    );
    // With a pointer: refused, and the epoch in use is not fenced.
    let c = commit(&t, &r, again, Vec::new(), Some(b"p0".to_vec()));
    store.commit(&c).await.ctx("commit the pointer")?;
    let refused = store
        .claim_if_new(&t, &r)
        .await
        .ctx("claim_if_new of a run with a pointer")?;
    ensure!(
        refused.is_none(),
        "claim_if_new claimed a run whose pointer exists (epoch {refused:?})"
    );
    let rec1 = format!("checkpoint:{r}:1:pre_llm");
    let c = commit(
        &t,
        &r,
        again,
        vec![(rec1.clone(), b"1".to_vec())],
        Some(b"p1".to_vec()),
    );
    store
        .commit(&c)
        .await
        .ctx("commit under the epoch in use after a refused claim_if_new (it must not fence)")?;
    expect_value(store, &t, &rec1, Some(b"1")).await?;
    // Deleted: new again.
    store.delete_run(&t, &r).await.ctx("delete_run")?;
    ensure!(
        store
            .claim_if_new(&t, &r)
            .await
            .ctx("claim_if_new of a deleted run")?
            .is_some(),
        "claim_if_new answered None for a deleted run"
    );
    Ok(())
}

/// After a newer claim, a commit under the old epoch is `Fenced` and writes nothing (no
/// record, no pointer move); the new claimant's commit goes through.
pub async fn stale_epoch_is_fenced_and_writes_nothing(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-stale");
    let r = unique_run();
    let old = store.claim(&t, &r).await.ctx("claim")?;
    let rec0 = format!("checkpoint:{r}:0:pre_llm");
    let c = commit(
        &t,
        &r,
        old,
        vec![(rec0.clone(), b"0".to_vec())],
        Some(b"p0".to_vec()),
    );
    store.commit(&c).await.ctx("commit under the first claim")?;
    let new = store.claim(&t, &r).await.ctx("second claim")?;
    let before = list_all(store, &t, "", 100).await?;
    let rec1 = format!("checkpoint:{r}:1:pre_llm");
    let stale = commit(
        &t,
        &r,
        old,
        vec![
            (rec1.clone(), b"stale".to_vec()),
            (rec0.clone(), b"stale".to_vec()),
        ],
        Some(b"stale".to_vec()),
    );
    expect_kind(
        store.commit(&stale).await,
        ErrorKind::Fenced,
        "commit under the old epoch",
    )?;
    let after = list_all(store, &t, "", 100).await?;
    ensure!(
        after == before,
        "a fenced commit changed the keys: {before:?} -> {after:?}"
    );
    expect_value(store, &t, &rec0, Some(b"0")).await?;
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), Some(b"p0")).await?;
    let c = commit(
        &t,
        &r,
        new,
        vec![(rec1.clone(), b"1".to_vec())],
        Some(b"p1".to_vec()),
    );
    store.commit(&c).await.ctx("commit under the new claim")?;
    expect_value(store, &t, &rec1, Some(b"1")).await
}

/// A run that was never claimed accepts no commit (epoch 0 or any other), and an epoch newer
/// than the last one handed out is `Fenced` too.
pub async fn unclaimed_or_future_epoch_is_fenced(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-unclaimed");
    let r = unique_run();
    let key = format!("checkpoint:{r}:0:pre_llm");
    for epoch in [Epoch(0), Epoch(1), Epoch(7)] {
        let c = commit(
            &t,
            &r,
            epoch,
            vec![(key.clone(), b"v".to_vec())],
            Some(b"p".to_vec()),
        );
        expect_kind(
            store.commit(&c).await,
            ErrorKind::Fenced,
            &format!("commit to an unclaimed run under epoch {epoch}"),
        )?;
    }
    let keys = list_all(store, &t, "", 10).await?;
    ensure!(
        keys.is_empty(),
        "fenced commits to an unclaimed run wrote {keys:?}"
    );
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let future = Epoch(e.0 + 1000);
    let c = commit(&t, &r, future, vec![(key.clone(), b"v".to_vec())], None);
    expect_kind(
        store.commit(&c).await,
        ErrorKind::Fenced,
        "commit under an epoch never handed out",
    )?;
    expect_value(store, &t, &key, None).await
}

/// Two claimants interleaved: A claims, B claims, A is fenced, B commits, A claims again, B is
/// fenced, A commits. Only the newest claimant's writes are ever visible.
pub async fn interleaved_claimants_only_newest_commits(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-interleave");
    let r = unique_run();
    let key = |who: &str, step: u32| format!("checkpoint:{r}:{step}:{who}");
    let a1 = store.claim(&t, &r).await.ctx("A claims")?;
    let b1 = store.claim(&t, &r).await.ctx("B claims")?;
    let c = commit(
        &t,
        &r,
        a1,
        vec![(key("a", 1), b"a".to_vec())],
        Some(b"a1".to_vec()),
    );
    expect_kind(
        store.commit(&c).await,
        ErrorKind::Fenced,
        "A commits after B claimed",
    )?;
    let c = commit(
        &t,
        &r,
        b1,
        vec![(key("b", 1), b"b".to_vec())],
        Some(b"b1".to_vec()),
    );
    store.commit(&c).await.ctx("B commits under its claim")?;
    let a2 = store.claim(&t, &r).await.ctx("A claims again")?;
    let c = commit(
        &t,
        &r,
        b1,
        vec![(key("b", 2), b"b".to_vec())],
        Some(b"b2".to_vec()),
    );
    expect_kind(
        store.commit(&c).await,
        ErrorKind::Fenced,
        "B commits after A claimed again",
    )?;
    let c = commit(
        &t,
        &r,
        a2,
        vec![(key("a", 2), b"a".to_vec())],
        Some(b"a2".to_vec()),
    );
    store
        .commit(&c)
        .await
        .ctx("A commits under its new claim")?;
    let got = list_all(store, &t, "checkpoint:", 100).await?;
    let mut want = vec![key("a", 2), key("b", 1), format!("checkpoint:{r}:latest")];
    want.sort();
    ensure!(
        got == want,
        "after the interleaving: expected {want:?}, got {got:?}"
    );
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), Some(b"a2")).await
}

/// Several claimants race: all claim at once, then all commit at once. Exactly one commit
/// succeeds, the one holding the greatest epoch; the others are `Fenced`.
pub async fn racing_claimants_exactly_one_commits(store: &dyn Store) -> CaseResult {
    let t = unique_thread("fence-race");
    let r = unique_run();
    let n = 8;
    let claims = futures::future::join_all((0..n).map(|_| store.claim(&t, &r))).await;
    let mut epochs = Vec::with_capacity(n);
    for (i, c) in claims.into_iter().enumerate() {
        epochs.push(c.ctx(format!("claim {i}"))?);
    }
    let mut sorted = epochs.clone();
    sorted.sort();
    sorted.dedup();
    ensure!(
        sorted.len() == n,
        "{n} concurrent claims handed out duplicate epochs: {epochs:?}"
    );
    let commits: Vec<_> = epochs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            commit(
                &t,
                &r,
                *e,
                vec![(format!("checkpoint:{r}:0:c{i}"), b"v".to_vec())],
                Some(format!("c{i}").into_bytes()),
            )
        })
        .collect();
    let results = futures::future::join_all(commits.iter().map(|c| store.commit(c))).await;
    let newest = epochs
        .iter()
        .enumerate()
        .max_by_key(|(_, e)| **e)
        .map(|(i, _)| i)
        .unwrap_or(0);
    for (i, res) in results.into_iter().enumerate() {
        if i == newest {
            res.ctx(format!(
                "the newest claimant ({i}, epoch {}) commits",
                epochs[i]
            ))?;
        } else {
            expect_kind(
                res,
                ErrorKind::Fenced,
                &format!("claimant {i} with stale epoch {}", epochs[i]),
            )?;
        }
    }
    let got = list_all(store, &t, "checkpoint:", 100).await?;
    let want = vec![
        format!("checkpoint:{r}:0:c{newest}"),
        format!("checkpoint:{r}:latest"),
    ];
    ensure!(
        got == want,
        "after the race: expected {want:?}, got {got:?}"
    );
    Ok(())
}
