//! The index of runs that need attention ([`Store::list_attention`], [`Store::attention`]), an
//! optional capability: a store without
//! [`Capabilities::attention`](afk_core::store::Capabilities::attention) must answer
//! `Unsupported`; a store with it lists exactly the runs whose last commit carrying an
//! [`Attention`] opened them, with that entry, once each, in pages of at most the limit, and
//! moves a run in and out only with a commit that is applied.
//!
//! Other cases may write into the same store concurrently, so these cases only make claims
//! about their own (uniquely named) threads and about duplicates.

use std::collections::BTreeMap;

use afk_core::store::{Attention, Epoch, MAX_ATTENTION_LEN, Store};
use afk_core::{ErrorKind, RunId, ThreadId};

use crate::support::{
    CaseResult, Ctx, commit_with, ensure, expect_kind, unique_run, unique_thread,
};

fn open(entry: &str) -> Option<Attention> {
    Some(Attention::Open(entry.as_bytes().to_vec()))
}

/// Every page of a listing with `limit`, keeping the runs of `threads`: checked for page sizes
/// and duplicates (over every run listed, not only ours).
async fn walk(
    store: &dyn Store,
    limit: usize,
    threads: &[&ThreadId],
) -> Result<BTreeMap<(ThreadId, RunId), Vec<u8>>, String> {
    let mut ours = BTreeMap::new();
    let mut seen = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for page_no in 0.. {
        let page = store
            .list_attention(cursor.as_deref(), limit)
            .await
            .ctx(format!("list_attention (limit {limit}, page {page_no})"))?;
        ensure!(
            page.runs.len() <= limit.max(1),
            "list_attention with limit {limit} returned {} runs in one page",
            page.runs.len()
        );
        for r in page.runs {
            let id = (r.thread.clone(), r.run.clone());
            if let Some(first) = seen.insert(id.clone(), page_no) {
                return Err(format!(
                    "list_attention (limit {limit}) listed run {} of thread {} twice (pages \
                     {first} and {page_no})",
                    r.run, r.thread
                ));
            }
            if threads.contains(&&r.thread) {
                ours.insert(id, r.entry);
            }
        }
        match page.next_cursor {
            Some(c) => {
                ensure!(
                    cursor.as_deref() != Some(c.as_str()),
                    "list_attention (limit {limit}) handed out the same cursor twice: {c:?}"
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
    if store.capabilities().attention {
        return Ok(true);
    }
    expect_kind(
        store.list_attention(None, 10).await,
        ErrorKind::Unsupported,
        "list_attention on a store without the attention capability",
    )?;
    let (t, r) = (unique_thread("attn-unsupported"), unique_run());
    expect_kind(
        store.attention(&t, &r).await,
        ErrorKind::Unsupported,
        "attention on a store without the attention capability",
    )?;
    Ok(false)
}

/// The entry `attention(thread, run)` answers, as text for messages.
async fn entry_of(store: &dyn Store, t: &ThreadId, r: &RunId) -> Result<Option<String>, String> {
    let v = store.attention(t, r).await.ctx("attention")?;
    Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Runs opened in two threads whose ids extend one another (and runs whose ids do) are each
/// listed once with their newest entry, whatever the page size; a commit without an
/// [`Attention`] keeps the entry; a run committed without ever being opened is not listed.
pub async fn open_runs_are_listed_with_their_entry(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let base = unique_thread("attn-open");
    let t2 = ThreadId::new(format!("{base}-b")).map_err(|e| e.to_string())?;
    let base_run = unique_run();
    let mut expected = BTreeMap::new();
    for t in [&base, &t2] {
        for suffix in ["", "0", "-x"] {
            let r = RunId::new(format!("{base_run}{suffix}")).map_err(|e| e.to_string())?;
            let e = store.claim(t, &r).await.ctx("claim")?;
            let first = format!("first {t}/{r}");
            let c = commit_with(t, &r, e, 0, open(&first));
            store.commit(&c).await.ctx("open commit")?;
            // A later commit without an attention keeps it; one with an entry replaces it.
            let c = commit_with(t, &r, e, 1, None);
            store.commit(&c).await.ctx("plain commit")?;
            let newest = if suffix == "0" {
                first
            } else {
                let newest = format!("newest {t}/{r}");
                let c = commit_with(t, &r, e, 2, open(&newest));
                store.commit(&c).await.ctx("second open commit")?;
                newest
            };
            expected.insert((t.clone(), r), newest.into_bytes());
        }
    }
    let never = unique_run();
    let e = store.claim(&base, &never).await.ctx("claim")?;
    let c = commit_with(&base, &never, e, 0, None);
    store.commit(&c).await.ctx("commit without attention")?;
    for limit in [1000, 4, 1, 0] {
        let listed = walk(store, limit, &[&base, &t2]).await?;
        ensure!(
            listed == expected,
            "list_attention (limit {limit}) of our threads gave {} runs, expected {}: {:?}",
            listed.len(),
            expected.len(),
            listed
                .iter()
                .map(|((t, r), v)| format!("{t}/{r}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>()
        );
    }
    for ((t, r), v) in &expected {
        let got = store.attention(t, r).await.ctx("attention")?;
        ensure!(
            got.as_deref() == Some(v.as_slice()),
            "attention({t}, {r}) gave {:?}, expected {:?}",
            got.map(|b| String::from_utf8_lossy(&b).into_owned()),
            String::from_utf8_lossy(v)
        );
    }
    ensure!(
        entry_of(store, &base, &never).await?.is_none(),
        "a run committed without an attention has an entry"
    );
    Ok(())
}

/// A run leaves the index with a commit carrying [`Attention::Closed`], with
/// [`Store::finish_run`], and with [`Store::delete_run`]; opened again, it is back.
pub async fn finished_and_deleted_runs_leave_the_index(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let t = unique_thread("attn-close");
    let (closed, finished, deleted) = (unique_run(), unique_run(), unique_run());
    let mut epochs = BTreeMap::new();
    for r in [&closed, &finished, &deleted] {
        let e = store.claim(&t, r).await.ctx("claim")?;
        let c = commit_with(&t, r, e, 0, open("running"));
        store.commit(&c).await.ctx("open commit")?;
        epochs.insert(r.clone(), e);
    }
    let c = commit_with(&t, &closed, epochs[&closed], 1, Some(Attention::Closed));
    store.commit(&c).await.ctx("closing commit")?;
    store
        .finish_run(&t, &finished, epochs[&finished])
        .await
        .ctx("finish_run")?;
    store.delete_run(&t, &deleted).await.ctx("delete_run")?;
    let listed = walk(store, 1000, &[&t]).await?;
    ensure!(
        listed.is_empty(),
        "closed, finished and deleted runs are still listed: {:?}",
        listed.keys().collect::<Vec<_>>()
    );
    for r in [&closed, &finished, &deleted] {
        let got = entry_of(store, &t, r).await?;
        ensure!(
            got.is_none(),
            "run {r} left the index but attention gives {got:?}"
        );
    }
    // The closed run's records are all still there: leaving the index deletes nothing.
    let latest = store
        .get(&t, &format!("checkpoint:{closed}:latest"))
        .await
        .ctx("get")?;
    ensure!(
        latest.as_deref() == Some(&b"{\"step\":1}"[..]),
        "the closing commit's pointer is {latest:?}"
    );
    let e = store.claim(&t, &closed).await.ctx("claim again")?;
    let c = commit_with(&t, &closed, e, 2, open("again"));
    store.commit(&c).await.ctx("reopen")?;
    ensure!(
        entry_of(store, &t, &closed).await?.as_deref() == Some("again"),
        "a reopened run is not back in the index"
    );
    Ok(())
}

/// A commit that is refused (fenced, an invalid key, an entry over [`MAX_ATTENTION_LEN`])
/// moves nothing in the index: an open run stays with its entry, a run never opened stays out.
pub async fn refused_commits_leave_the_index_alone(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    let t = unique_thread("attn-refused");
    let (r, fresh) = (unique_run(), unique_run());
    let old = store.claim(&t, &r).await.ctx("claim")?;
    let c = commit_with(&t, &r, old, 0, open("kept"));
    store.commit(&c).await.ctx("open commit")?;
    let new = store.claim(&t, &r).await.ctx("second claim")?;
    for attention in [Some(Attention::Closed), open("stale")] {
        expect_kind(
            store.commit(&commit_with(&t, &r, old, 1, attention)).await,
            ErrorKind::Fenced,
            "a commit under the older claim",
        )?;
    }
    let mut bad_key = commit_with(&t, &r, new, 1, Some(Attention::Closed));
    bad_key
        .puts
        .push(("checkpoint:someone_else:1:x".into(), b"x".to_vec()));
    expect_kind(
        store.commit(&bad_key).await,
        ErrorKind::InvalidInput,
        "a commit with another run's key",
    )?;
    let huge = "x".repeat(MAX_ATTENTION_LEN + 1);
    expect_kind(
        store
            .commit(&commit_with(&t, &r, new, 1, open(&huge)))
            .await,
        ErrorKind::InvalidInput,
        "a commit with an entry over the limit",
    )?;
    let got = entry_of(store, &t, &r).await?;
    ensure!(
        got.as_deref() == Some("kept"),
        "refused commits changed the entry to {:?}",
        got.map(|g| g.chars().take(40).collect::<String>())
    );
    let e = store.claim(&t, &fresh).await.ctx("claim fresh")?;
    expect_kind(
        store
            .commit(&commit_with(&t, &fresh, Epoch(e.0 + 1), 0, open("x")))
            .await,
        ErrorKind::Fenced,
        "a commit under a future epoch",
    )?;
    let listed = walk(store, 1000, &[&t]).await?;
    let want: Vec<_> = vec![(t.clone(), r.clone())];
    ensure!(
        listed.keys().cloned().collect::<Vec<_>>() == want,
        "after refused commits the index holds {:?}, expected only {r}",
        listed.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// The entry moves with the commit that carries it, for a reader that looks while commits go
/// on: read after the pointer, it is at least as new as the pointer; read before, never newer.
pub async fn the_entry_moves_with_its_commit(store: &dyn Store) -> CaseResult {
    if !supported(store).await? {
        return Ok(());
    }
    const STEPS: u64 = 40;
    let t = unique_thread("attn-atomic");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let step_of = |b: &[u8]| -> Result<u64, String> {
        let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
        let digits: String = s.chars().filter(char::is_ascii_digit).collect();
        digits.parse().map_err(|_| format!("no step in {s:?}"))
    };
    store
        .commit(&commit_with(&t, &r, e, 0, open("0")))
        .await
        .ctx("first commit")?;
    let writer = async {
        for step in 1..=STEPS {
            let entry = step.to_string();
            store
                .commit(&commit_with(&t, &r, e, step, open(&entry)))
                .await
                .ctx("commit")?;
        }
        Ok::<_, String>(())
    };
    let latest = format!("checkpoint:{r}:latest");
    let reader = async {
        let mut looks = 0u32;
        loop {
            let before = store.attention(&t, &r).await.ctx("attention")?;
            let pointer = store.get(&t, &latest).await.ctx("get")?;
            let after = store.attention(&t, &r).await.ctx("attention")?;
            let (Some(before), Some(pointer), Some(after)) = (before, pointer, after) else {
                return Err("the open run lost its entry or pointer".to_owned());
            };
            let (b, p, a) = (step_of(&before)?, step_of(&pointer)?, step_of(&after)?);
            ensure!(
                b <= p && p <= a,
                "entry {b} read before pointer {p}, entry {a} after it: the entry does not \
                 move with its commit"
            );
            looks += 1;
            if p == STEPS {
                return Ok(looks);
            }
        }
    };
    let (w, looks) = tokio::join!(writer, reader);
    w?;
    looks?;
    Ok(())
}

/// [`Store::claim_if`] (stores with
/// [`Capabilities::claim_if`](afk_core::store::Capabilities::claim_if)) claims only while the
/// run is still at the epoch the caller saw: of two takers that saw the same epoch, exactly
/// one gets a claim, racing or one after the other; a refused one fences nothing.
pub async fn claim_if_claims_only_at_the_seen_epoch(store: &dyn Store) -> CaseResult {
    let (t, r) = (unique_thread("claim-if"), unique_run());
    if !store.capabilities().claim_if {
        return expect_kind(
            store.claim_if(&t, &r, Epoch(0)).await,
            ErrorKind::Unsupported,
            "claim_if on a store without the claim_if capability",
        );
    }
    let seen = store.claim(&t, &r).await.ctx("claim")?;
    let won = store.claim_if(&t, &r, seen).await.ctx("claim_if")?;
    let Some(won) = won else {
        return Err(format!(
            "claim_if at the current epoch {seen} claimed nothing"
        ));
    };
    ensure!(won > seen, "claim_if gave epoch {won}, not above {seen}");
    let late = store.claim_if(&t, &r, seen).await.ctx("late claim_if")?;
    ensure!(
        late.is_none(),
        "claim_if at the older epoch {seen} claimed {late:?}"
    );
    // The refused claim fenced nothing: the winner still commits.
    store
        .commit(&commit_with(&t, &r, won, 0, None))
        .await
        .ctx("the winner's commit after a refused claim_if")?;
    for _ in 0..20 {
        let seen = store.claim(&t, &r).await.ctx("claim")?;
        let (a, b) = tokio::join!(store.claim_if(&t, &r, seen), store.claim_if(&t, &r, seen));
        let (a, b) = (a.ctx("claim_if a")?, b.ctx("claim_if b")?);
        ensure!(
            a.is_some() != b.is_some(),
            "two racing claim_if at epoch {seen} gave {a:?} and {b:?}: exactly one must win"
        );
    }
    Ok(())
}
