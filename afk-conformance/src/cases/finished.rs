//! The index of finished runs ([`Store::list_finished`], [`Store::forget_finished`]), an
//! optional capability: a store without
//! [`Capabilities::finished`](afk_core::store::Capabilities::finished) must answer
//! `Unsupported`; a store with it enters every run an applied closing commit closes, stamped
//! with the store's clock, lists the entries below a cutoff oldest first, each once, in pages
//! of at most the limit, and drops exactly the entries it is told to forget.
//!
//! Other cases may write into the same store concurrently, so these cases only make claims
//! about their own (uniquely named) threads and about order and duplicates.

use std::collections::BTreeSet;

use afk_core::store::{Attention, FinishedRun, Store, store_now_ms};
use afk_core::{ErrorKind, RunId, ThreadId};

use crate::support::{
    CaseResult, Ctx, commit_with, ensure, expect_kind, unique_run, unique_thread,
};

/// Every page of a listing below `before_ms` with `limit`, keeping the entries of `threads`:
/// checked for page sizes, order, the cutoff and duplicates (over every entry listed).
async fn walk(
    store: &dyn Store,
    before_ms: u64,
    limit: usize,
    threads: &[&ThreadId],
) -> Result<Vec<FinishedRun>, String> {
    let mut ours = Vec::new();
    let mut last: Option<FinishedRun> = None;
    let mut cursor: Option<String> = None;
    for page_no in 0.. {
        let page = store
            .list_finished(before_ms, cursor.as_deref(), limit)
            .await
            .ctx(format!("list_finished (limit {limit}, page {page_no})"))?;
        ensure!(
            page.runs.len() <= limit.max(1),
            "list_finished with limit {limit} returned {} entries in one page",
            page.runs.len()
        );
        for e in page.runs {
            ensure!(
                e.finished_ms < before_ms,
                "list_finished below {before_ms} listed an entry stamped {}",
                e.finished_ms
            );
            if let Some(prev) = &last {
                ensure!(
                    prev < &e,
                    "list_finished (limit {limit}) is out of order or repeats: {prev:?} then {e:?}"
                );
            }
            last = Some(e.clone());
            if threads.contains(&&e.thread) {
                ours.push(e);
            }
        }
        match page.next_cursor {
            Some(c) => {
                ensure!(
                    cursor.as_deref() != Some(c.as_str()),
                    "list_finished (limit {limit}) handed out the same cursor twice: {c:?}"
                );
                cursor = Some(c);
            }
            None => break,
        }
    }
    Ok(ours)
}

/// `Ok(false)` (after checking both answers are `Unsupported`) when the store keeps no index.
async fn supported(store: &dyn Store) -> Result<bool, String> {
    if store.capabilities().finished {
        return Ok(true);
    }
    expect_kind(
        store.list_finished(u64::MAX, None, 10).await,
        ErrorKind::Unsupported,
        "list_finished on a store without the finished capability",
    )?;
    expect_kind(
        store.forget_finished(&[]).await,
        ErrorKind::Unsupported,
        "forget_finished on a store without the finished capability",
    )?;
    Ok(false)
}

/// Runs closed by a closing commit and by [`Store::finish_run`], in two threads whose ids
/// extend one another, are each listed once, stamped between the times taken before and
/// after their closes, oldest first, at every page size; runs still open or never closed are
/// not listed; a cutoff at or before the closes lists none of them.
pub async fn closed_runs_are_listed_by_when_they_closed(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let base = unique_thread("fin-list");
    let t2 = ThreadId::new(format!("{base}-b")).map_err(|e| e.to_string())?;
    let before = store_now_ms();
    let mut closed = BTreeSet::new();
    for t in [&base, &t2] {
        for (i, how) in ["commit", "finish_run", "open", "never"].iter().enumerate() {
            let r = RunId::new(format!("{}{i}", unique_run())).map_err(|e| e.to_string())?;
            let e = store.claim(t, &r).await.ctx("claim")?;
            let open = Some(Attention::Open(b"running".to_vec()));
            let first = if *how == "never" { None } else { open };
            store
                .commit(&commit_with(t, &r, e, 0, first))
                .await
                .ctx("first commit")?;
            match *how {
                "commit" => {
                    let c = commit_with(t, &r, e, 1, Some(Attention::Closed));
                    store.commit(&c).await.ctx("closing commit")?;
                    closed.insert((t.clone(), r));
                }
                "finish_run" => {
                    store.finish_run(t, &r, e).await.ctx("finish_run")?;
                    closed.insert((t.clone(), r));
                }
                _ => {}
            }
        }
    }
    let after = store_now_ms();
    for limit in [1000, 3, 0] {
        let listed = walk(store, after + 1, limit, &[&base, &t2]).await?;
        let ids: BTreeSet<_> = listed
            .iter()
            .map(|e| (e.thread.clone(), e.run.clone()))
            .collect();
        ensure!(
            ids == closed && listed.len() == closed.len(),
            "list_finished (limit {limit}) of our threads gave {:?}, expected the {} closed runs {:?}",
            listed,
            closed.len(),
            closed
        );
        for e in &listed {
            ensure!(
                (before..=after).contains(&e.finished_ms),
                "run {} was stamped {}, not between {before} and {after} (taken around its close)",
                e.run,
                e.finished_ms
            );
        }
    }
    let early = walk(store, before, 1000, &[&base, &t2]).await?;
    ensure!(
        early.is_empty(),
        "list_finished below {before} (before any of our closes) listed {early:?}"
    );
    expect_kind(
        store
            .list_finished(after + 1, Some("not a cursor"), 10)
            .await,
        ErrorKind::InvalidInput,
        "list_finished with a cursor the store did not hand out",
    )?;
    Ok(())
}

/// A closing commit that is refused (fenced, or with another run's key) enters nothing.
pub async fn refused_closing_commits_enter_nothing(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let t = unique_thread("fin-refused");
    let r = unique_run();
    let old = store.claim(&t, &r).await.ctx("claim")?;
    let open = Some(Attention::Open(b"running".to_vec()));
    store
        .commit(&commit_with(&t, &r, old, 0, open))
        .await
        .ctx("open commit")?;
    let new = store.claim(&t, &r).await.ctx("second claim")?;
    expect_kind(
        store
            .commit(&commit_with(&t, &r, old, 1, Some(Attention::Closed)))
            .await,
        ErrorKind::Fenced,
        "a closing commit under the older claim",
    )?;
    expect_kind(
        store.finish_run(&t, &r, old).await,
        ErrorKind::Fenced,
        "finish_run under the older claim",
    )?;
    let mut bad_key = commit_with(&t, &r, new, 1, Some(Attention::Closed));
    bad_key
        .puts
        .push(("checkpoint:someone_else:1:x".into(), b"x".to_vec()));
    expect_kind(
        store.commit(&bad_key).await,
        ErrorKind::InvalidInput,
        "a closing commit with another run's key",
    )?;
    let listed = walk(store, u64::MAX, 1000, &[&t]).await?;
    ensure!(
        listed.is_empty(),
        "refused closing commits entered {listed:?} into the index of finished runs"
    );
    Ok(())
}

/// [`Store::forget_finished`] drops exactly the entries it names (an entry of the same run
/// closed again stays, as do other runs'), ignores entries it does not have, and leaves the
/// runs' records alone.
pub async fn forget_drops_only_what_it_names(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let t = unique_thread("fin-forget");
    let (a, b) = (unique_run(), unique_run());
    for r in [&a, &b] {
        let e = store.claim(&t, r).await.ctx("claim")?;
        let open = Some(Attention::Open(b"running".to_vec()));
        store
            .commit(&commit_with(&t, r, e, 0, open))
            .await
            .ctx("open commit")?;
        let c = commit_with(&t, r, e, 1, Some(Attention::Closed));
        store.commit(&c).await.ctx("closing commit")?;
    }
    let first = walk(store, u64::MAX, 1000, &[&t]).await?;
    ensure!(
        first.len() == 2,
        "two closed runs gave the entries {first:?}"
    );
    let of_a: Vec<FinishedRun> = first.iter().filter(|e| e.run == a).cloned().collect();
    let mut ghost = of_a[0].clone();
    ghost.finished_ms = ghost.finished_ms.saturating_sub(1);
    let mut named = of_a.clone();
    named.push(ghost);
    store.forget_finished(&named).await.ctx("forget_finished")?;
    let left = walk(store, u64::MAX, 1000, &[&t]).await?;
    ensure!(
        left.len() == 1 && left[0].run == b,
        "after forgetting run {a}'s entry (and one never there) the index holds {left:?}, \
         expected only run {b}'s"
    );
    let latest = store
        .get(&t, &format!("checkpoint:{a}:latest"))
        .await
        .ctx("get")?;
    ensure!(
        latest.as_deref() == Some(&b"{\"step\":1}"[..]),
        "forgetting an entry changed the run's pointer to {latest:?}"
    );
    store.forget_finished(&[]).await.ctx("forget nothing")?;
    Ok(())
}
