//! Commits are all or nothing, and the latest pointer never runs ahead of its record. A live
//! reader beside a writer is [`super::torn`]; a writer killed mid-commit is [`super::crash`].

use afk_core::{ErrorKind, store::Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, list_all, unique_run, unique_thread,
};

/// A commit with one bad key among good ones (another run's key, the latest pointer as a put,
/// the fence as a put, a malformed key, a repeated key) is `InvalidInput` and writes nothing:
/// no good key, no pointer move.
pub async fn rejected_commit_writes_nothing(store: &dyn Store) -> CaseResult {
    let t = unique_thread("atomic-reject");
    let r = unique_run();
    let other = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let c = commit(
        &t,
        &r,
        e,
        vec![(format!("checkpoint:{r}:0:a"), b"v0".to_vec())],
        Some(b"p0".to_vec()),
    );
    store.commit(&c).await.ctx("first commit")?;
    let before = list_all(store, &t, "", 100).await?;
    let good = format!("checkpoint:{r}:1:pre_llm");
    let bad_keys = [
        format!("checkpoint:{other}:1:pre_llm"),
        format!("checkpoint:{r}:latest"),
        format!("run:{r}"),
        format!("effect:{r}:1:a b"),
        String::new(),
        "nofamily".to_string(),
        good.clone(),
    ];
    for bad in bad_keys {
        let puts = vec![
            (good.clone(), b"new".to_vec()),
            (format!("effect:{r}:1:ok"), b"new".to_vec()),
            (bad.clone(), b"new".to_vec()),
        ];
        let c = commit(&t, &r, e, puts, Some(b"moved".to_vec()));
        expect_kind(
            store.commit(&c).await,
            ErrorKind::InvalidInput,
            &format!("commit with bad key {bad:?}"),
        )?;
        let after = list_all(store, &t, "", 100).await?;
        ensure!(
            after == before,
            "a rejected commit (bad key {bad:?}) changed the keys: {before:?} -> {after:?}"
        );
        let latest = store
            .get(&t, &format!("checkpoint:{r}:latest"))
            .await
            .ctx("get latest")?;
        ensure!(
            latest.as_deref() == Some(b"p0".as_slice()),
            "a rejected commit (bad key {bad:?}) moved the pointer"
        );
    }
    Ok(())
}

/// After every commit the pointer names a record that is there with the committed bytes, over
/// many steps with several records per step.
pub async fn pointer_moves_with_its_record(store: &dyn Store) -> CaseResult {
    let t = unique_thread("atomic-pointer");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    for step in 0..12 {
        let rec = format!("checkpoint:{r}:{step}:post_llm");
        let puts = vec![
            (
                format!("messages:{r}:{step:020}"),
                format!("msg {step}").into_bytes(),
            ),
            (rec.clone(), format!("rec {step}").into_bytes()),
        ];
        store
            .commit(&commit(&t, &r, e, puts, Some(rec.clone().into_bytes())))
            .await
            .ctx(format!("commit step {step}"))?;
        let pointer = store
            .get(&t, &format!("checkpoint:{r}:latest"))
            .await
            .ctx("get latest")?;
        ensure!(
            pointer.as_deref() == Some(rec.as_bytes()),
            "step {step}: pointer is {:?}, expected {rec:?}",
            pointer.map(|p| String::from_utf8_lossy(&p).into_owned())
        );
        let record = store.get(&t, &rec).await.ctx("get record")?;
        ensure!(
            record == Some(format!("rec {step}").into_bytes()),
            "step {step}: the pointer names {rec:?} but the record reads {record:?}"
        );
        let msg = store
            .get(&t, &format!("messages:{r}:{step:020}"))
            .await
            .ctx("get message")?;
        ensure!(
            msg.is_some(),
            "step {step}: the commit's message entry is missing"
        );
    }
    Ok(())
}
