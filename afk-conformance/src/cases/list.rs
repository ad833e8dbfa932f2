//! Listing: byte order, prefixes, pagination with every limit, the fence key.

use afk_core::store::Store;

use crate::support::{CaseResult, Ctx, commit, ensure, list_all, unique_run, unique_thread};

/// Write `suffixes` as `messages:<run>:<suffix>` in commits of at most 100 keys.
async fn fill(
    store: &dyn Store,
    t: &afk_core::ThreadId,
    r: &afk_core::RunId,
    keys: &[String],
) -> CaseResult {
    let e = store.claim(t, r).await.ctx("claim")?;
    for chunk in keys.chunks(100) {
        let puts = chunk
            .iter()
            .map(|k| (k.clone(), k.as_bytes().to_vec()))
            .collect();
        store
            .commit(&commit(t, r, e, puts, None))
            .await
            .ctx("commit")?;
    }
    Ok(())
}

/// Keys come back sorted by bytes (digits before upper case before `_` before lower case),
/// not by insertion order nor by any numeric reading; the empty prefix lists them all.
pub async fn list_is_sorted_by_bytes(store: &dyn Store) -> CaseResult {
    let t = unique_thread("list-order");
    let r = unique_run();
    let suffixes = [
        "b", "B", "a", "_", "10", "9", "1", "~", "!", "a0", "a:b", "Z", "%41",
    ];
    let keys: Vec<String> = suffixes
        .iter()
        .map(|s| format!("effect:{r}:1:{s}"))
        .collect();
    fill(store, &t, &r, &keys).await?;
    let mut want = keys.clone();
    want.push(format!("run:{r}"));
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for limit in [1000, 1] {
        let got = list_all(store, &t, "", limit).await?;
        ensure!(
            got == want,
            "list all (limit {limit}): expected {want:?}, got {got:?}"
        );
    }
    Ok(())
}

/// Only keys under the prefix are listed, at every granularity: a family, a run, a step, a
/// whole key as prefix, and a prefix that matches nothing.
pub async fn list_filters_by_prefix(store: &dyn Store) -> CaseResult {
    let t = unique_thread("list-prefix");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let keys = [
        format!("checkpoint:{r}:0:pre_llm"),
        format!("checkpoint:{r}:1:pre_llm"),
        format!("checkpoint:{r}:10:pre_llm"),
        format!("effect:{r}:1:c1"),
        format!("messages:{r}:00000000000000000001"),
        format!("bgtool:{r}:job"),
    ];
    let puts = keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect();
    store
        .commit(&commit(&t, &r, e, puts, Some(b"p".to_vec())))
        .await
        .ctx("commit")?;
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            "checkpoint:".into(),
            vec![
                keys[0].clone(),
                keys[2].clone(), // ":10:" sorts before ":1:" because '0' < ':'
                keys[1].clone(),
                format!("checkpoint:{r}:latest"),
            ],
        ),
        (
            format!("checkpoint:{r}:1"),
            vec![keys[2].clone(), keys[1].clone()],
        ),
        (format!("checkpoint:{r}:1:"), vec![keys[1].clone()]),
        (keys[3].clone(), vec![keys[3].clone()]),
        ("messages:".into(), vec![keys[4].clone()]),
        ("run:".into(), vec![format!("run:{r}")]),
        ("effect:nobody:".into(), vec![]),
        ("zzz".into(), vec![]),
    ];
    for (prefix, want) in cases {
        let got = list_all(store, &t, &prefix, 2).await?;
        ensure!(
            got == want,
            "list prefix {prefix:?}: expected {want:?}, got {got:?}"
        );
    }
    Ok(())
}

/// Pages hold at most `limit` keys (0 is clamped to 1, huge limits to `MAX_LIST_LIMIT`), and
/// following cursors yields every key exactly once, in order, for every limit.
pub async fn list_paginates_with_every_limit(store: &dyn Store) -> CaseResult {
    let t = unique_thread("list-pages");
    let r = unique_run();
    let keys: Vec<String> = (0..257).map(|i| format!("messages:{r}:{i:020}")).collect();
    fill(store, &t, &r, &keys).await?;
    for limit in [0, 1, 2, 3, 7, 100, 256, 257, 258, 1000, 5000, usize::MAX] {
        let got = list_all(store, &t, "messages:", limit).await?;
        ensure!(
            got == keys,
            "list with limit {limit}: {} keys came back, expected {} in order (first difference \
             at index {:?})",
            got.len(),
            keys.len(),
            got.iter().zip(&keys).position(|(a, b)| a != b)
        );
    }
    let first = store
        .list(&t, "messages:", None, 10)
        .await
        .ctx("list first page")?;
    ensure!(
        first.keys == keys[..10] && first.next_cursor.is_some(),
        "first page of 10: got {:?}, cursor {:?}",
        first.keys,
        first.next_cursor
    );
    Ok(())
}

/// Listing a thread that has no keys gives an empty, complete page.
pub async fn list_empty_thread(store: &dyn Store) -> CaseResult {
    let t = unique_thread("list-empty");
    let page = store.list(&t, "", None, 10).await.ctx("list")?;
    ensure!(
        page.keys.is_empty(),
        "an unused thread lists {:?}",
        page.keys
    );
    ensure!(
        page.next_cursor.is_none(),
        "an unused thread has cursor {:?}",
        page.next_cursor
    );
    Ok(())
}

/// The fence key `run:<run>` exists and is listed once the run is claimed, and `get` reads it.
pub async fn fence_key_is_listed(store: &dyn Store) -> CaseResult {
    let t = unique_thread("list-fence");
    let r = unique_run();
    store.claim(&t, &r).await.ctx("claim")?;
    let got = list_all(store, &t, "", 10).await?;
    ensure!(
        got == vec![format!("run:{r}")],
        "after a claim the thread lists {got:?}"
    );
    let fence = store.get(&t, &format!("run:{r}")).await.ctx("get fence")?;
    ensure!(
        fence.is_some(),
        "the fence key run:{r} is listed but get says it is missing"
    );
    Ok(())
}
