//! The large case: 100,000 keys in one thread. Slow on remote backends; opt out with
//! `store_suite!(factory(), skip_large)`.

use afk_core::store::Store;

use crate::support::{CaseResult, Ctx, commit, ensure, list_all, unique_run, unique_thread};

/// How many keys the large case writes (plus the fence).
pub const LARGE_KEYS: usize = 100_000;

/// A thread with 100,000 keys lists completely and in order, with the maximum page size and
/// with an odd one, and by prefix; `delete_run` removes them all and says so.
pub async fn hundred_thousand_keys_list_in_order(store: &dyn Store) -> CaseResult {
    let t = unique_thread("large");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let chunk = store
        .capabilities()
        .max_commit_keys
        .unwrap_or(1000)
        .clamp(1, 1000);
    // Written in a shuffled order (a stride coprime to the count) so sorting is the store's job.
    let keys: Vec<String> = (0..LARGE_KEYS)
        .map(|i| format!("messages:{r}:{i:020}"))
        .collect();
    let order: Vec<usize> = (0..LARGE_KEYS).map(|i| (i * 7919) % LARGE_KEYS).collect();
    let batch: Vec<_> = order
        .chunks(chunk)
        .map(|idx| {
            let puts = idx
                .iter()
                .map(|&i| (keys[i].clone(), (i as u32).to_be_bytes().to_vec()));
            commit(&t, &r, e, puts.collect(), None)
        })
        .collect();
    for commits in batch.chunks(16) {
        for (i, res) in store.commit_batch(commits).await.into_iter().enumerate() {
            res.ctx(format!("commit of chunk {i}"))?;
        }
    }
    let mut want = keys.clone();
    want.push(format!("run:{r}"));
    for limit in [1000, 777] {
        let got = list_all(store, &t, "", limit).await?;
        ensure!(
            got == want,
            "listing {} keys with limit {limit}: got {} keys, first difference at {:?}",
            want.len(),
            got.len(),
            got.iter().zip(&want).position(|(a, b)| a != b)
        );
    }
    let tail_prefix = format!("messages:{r}:0000000000000009");
    let got = list_all(store, &t, &tail_prefix, 1000).await?;
    ensure!(
        got == keys[90_000..],
        "listing prefix {tail_prefix:?} got {} keys, expected 10000",
        got.len()
    );
    let removed = store.delete_run(&t, &r).await.ctx("delete_run")?;
    ensure!(
        removed == LARGE_KEYS as u64 + 1,
        "delete_run removed {removed} keys, expected {}",
        LARGE_KEYS + 1
    );
    let left = list_all(store, &t, "", 1000).await?;
    ensure!(
        left.is_empty(),
        "after delete_run {} keys are left",
        left.len()
    );
    Ok(())
}
