//! Deleting keys and whole runs.

use afk_core::{ErrorKind, store::Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, list_all, unique_run, unique_thread,
};

/// `delete` removes exactly the named keys, ignores missing ones, and is not fenced (it works
/// with no claim and after a newer claim).
pub async fn delete_removes_keys_and_ignores_missing(store: &dyn Store) -> CaseResult {
    let t = unique_thread("delete-keys");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let keys: Vec<String> = (0..5).map(|i| format!("effect:{r}:{i}:call")).collect();
    let puts = keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect();
    store
        .commit(&commit(&t, &r, e, puts, Some(b"p".to_vec())))
        .await
        .ctx("commit")?;
    store.claim(&t, &r).await.ctx("second claim")?;
    let doomed = vec![
        keys[1].clone(),
        keys[3].clone(),
        format!("effect:{r}:9:never"),
    ];
    store.delete(&t, &doomed).await.ctx("delete")?;
    expect_value(store, &t, &keys[1], None).await?;
    expect_value(store, &t, &keys[3], None).await?;
    let left = list_all(store, &t, "effect:", 100).await?;
    let want = vec![keys[0].clone(), keys[2].clone(), keys[4].clone()];
    ensure!(
        left == want,
        "after delete: expected {want:?}, got {left:?}"
    );
    store.delete(&t, &[]).await.ctx("delete of nothing")?;
    let other = unique_thread("delete-other");
    store
        .delete(&other, &doomed)
        .await
        .ctx("delete in an empty thread")?;
    Ok(())
}

/// `delete_run` removes every key of the run (records, effects, messages, background tools,
/// latest pointer, fence), returns how many it removed (as many as were listed), leaves other
/// runs alone, and the run can be claimed and written again afterwards.
pub async fn delete_run_removes_everything_of_the_run(store: &dyn Store) -> CaseResult {
    let t = unique_thread("delete-run");
    let (r, keep) = (unique_run(), unique_run());
    for run in [&r, &keep] {
        let e = store.claim(&t, run).await.ctx("claim")?;
        let puts = vec![
            (format!("checkpoint:{run}:0:pre_llm"), b"c".to_vec()),
            (format!("checkpoint:{run}:1:post_llm"), b"c".to_vec()),
            (format!("effect:{run}:1:call_1"), b"e".to_vec()),
            (
                format!("messages:{run}:00000000000000000000"),
                b"m".to_vec(),
            ),
            (format!("bgtool:{run}:job_1"), b"b".to_vec()),
        ];
        store
            .commit(&commit(&t, run, e, puts, Some(b"p".to_vec())))
            .await
            .ctx("commit")?;
    }
    let before = list_all(store, &t, "", 1000).await?;
    let of_run = before
        .iter()
        .filter(|k| afk_core::store::run_of_key(k) == Some(r.as_str()));
    let want_count = of_run.count() as u64;
    ensure!(
        want_count == 7,
        "before delete_run the run lists {want_count} keys, expected 7"
    );
    let removed = store.delete_run(&t, &r).await.ctx("delete_run")?;
    ensure!(
        removed == want_count,
        "delete_run removed {removed} keys, expected {want_count}"
    );
    let after = list_all(store, &t, "", 1000).await?;
    let want: Vec<String> = before
        .iter()
        .filter(|k| afk_core::store::run_of_key(k) != Some(r.as_str()))
        .cloned()
        .collect();
    ensure!(
        after == want,
        "after delete_run: expected {want:?}, got {after:?}"
    );
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), None).await?;
    let again = store.delete_run(&t, &r).await.ctx("second delete_run")?;
    ensure!(again == 0, "deleting a deleted run removed {again} keys");
    // The run starts over: claim, commit, read.
    let e = store.claim(&t, &r).await.ctx("claim after delete_run")?;
    let key = format!("checkpoint:{r}:0:pre_llm");
    let c = commit(&t, &r, e, vec![(key.clone(), b"new".to_vec())], None);
    store.commit(&c).await.ctx("commit after delete_run")?;
    expect_value(store, &t, &key, Some(b"new")).await
}

/// Deleting a malformed key is `InvalidInput` and deletes nothing, not even the valid keys
/// named with it.
pub async fn delete_rejects_malformed_keys(store: &dyn Store) -> CaseResult {
    let t = unique_thread("delete-bad");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let key = format!("effect:{r}:0:x");
    store
        .commit(&commit(&t, &r, e, vec![(key.clone(), b"v".to_vec())], None))
        .await
        .ctx("commit")?;
    expect_kind(
        store.delete(&t, &[key.clone(), "bad key".into()]).await,
        ErrorKind::InvalidInput,
        "delete naming a key with a space",
    )?;
    expect_value(store, &t, &key, Some(b"v")).await
}
