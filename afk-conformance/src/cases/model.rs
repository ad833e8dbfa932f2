//! Model-based test: random operation sequences replayed against the store under test and a
//! fresh [`MemoryStore`] (the model), comparing every answer.
//!
//! Seeded: the seed is printed, and `AFK_SEED=<seed>` replays it; `PROPTEST_CASES`
//! sets how many sequences run (default 32). Failures are shrunk to a short sequence.

use std::collections::HashMap;

use afk_core::store::{run_of_key, validate_commit};
use afk_core::{
    ErrorKind, MemoryStore, RunId, ThreadId,
    store::{Commit, Epoch, Store},
};
use proptest::test_runner::TestCaseError;

use crate::support::{
    CaseResult, cases_from_env, fail, list_all, named_run, seed_from_env, show_result, test_runner,
    unique_thread,
};

mod ops;
mod reads;

use ops::{CommitSpec, KeySpec, Op, PrefixSpec, ops_strategy};

/// Threads per sequence.
const THREADS: usize = 2;
/// Run ids per thread; `run_1` is a prefix of `run_10`.
const RUNS: [&str; 3] = ["run_1", "run_10", "run_2"];
/// Claimant slots per run (holders of an epoch).
const SLOTS: usize = 2;

/// Random sequences of claims, `claim_if_new`s, commits, batches, gets, `get_many`s (any
/// order, repeated keys), lists, explicit pages (`list` from any cursor with a limit, page by
/// page), deletes and run deletions give the same answers from the store as from the reference
/// model; a failure shrinks to a short named sequence. Epochs are compared by order only, and
/// the value of the fence key by presence only. Needs a multi-thread runtime.
pub async fn model_based(store: &dyn Store) -> CaseResult {
    run_model(store, ModelConfig::from_env()?).await
}

/// Seed and size of a [`run_model`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelConfig {
    /// Seed of the sequence generator.
    pub seed: u64,
    /// How many sequences to replay.
    pub cases: u32,
}

impl ModelConfig {
    /// Seed from `AFK_SEED` (random when unset), cases from `PROPTEST_CASES`
    /// (default 32). `Err` when `AFK_SEED` is not a number.
    pub fn from_env() -> Result<Self, String> {
        let cases = cases_from_env(32);
        Ok(ModelConfig {
            seed: seed_from_env()?,
            cases,
        })
    }
}

/// [`model_based`] with an explicit seed and case count. Needs a multi-thread runtime.
pub async fn run_model(store: &dyn Store, config: ModelConfig) -> CaseResult {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let handle = Handle::current();
    if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
        return Err("model_based needs a multi-thread tokio runtime".into());
    }
    let ModelConfig { seed, cases } = config;
    println!("model_based: seed {seed} ({cases} cases; replay with AFK_SEED={seed})");
    tokio::task::block_in_place(|| {
        let mut runner = test_runner(seed, cases, None);
        runner
            .run(&ops_strategy(), |ops| {
                handle
                    .block_on(replay(store, &ops))
                    .map(|_| ())
                    .map_err(TestCaseError::fail)
            })
            .map_err(|e| fail!("{e}\n(seed {seed}: replay with AFK_SEED={seed})"))
    })
}

/// One side of the comparison: a store and the epochs its claimants hold.
struct Side<'a> {
    store: &'a dyn Store,
    /// (thread, run, slot) -> epoch held by that claimant.
    held: HashMap<(usize, usize, usize), Epoch>,
    /// (thread, run) -> greatest epoch handed out since the run was last reset.
    max: HashMap<(usize, usize), Epoch>,
}

impl<'a> Side<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Side {
            store,
            held: HashMap::new(),
            max: HashMap::new(),
        }
    }

    /// Forget the epochs of a run whose fence was deleted: the contract lets a backend restart
    /// its epochs or not, so later claims are not compared with earlier ones.
    fn reset(&mut self, t: usize, r: usize) {
        self.held.retain(|&(ht, hr, _), _| (ht, hr) != (t, r));
        self.max.remove(&(t, r));
    }

    fn build(&self, threads: &[ThreadId], runs: &[RunId], spec: &CommitSpec) -> Commit {
        let epoch = self
            .held
            .get(&(spec.thread, spec.run, spec.slot))
            .copied()
            .unwrap_or(Epoch(0));
        Commit {
            thread: threads[spec.thread].clone(),
            run: runs[spec.run].clone(),
            epoch,
            puts: spec
                .puts
                .iter()
                .map(|(k, v)| (k.render(&runs[spec.run], runs), v.clone()))
                .collect(),
            latest: spec.latest.clone(),
            attention: None,
        }
    }
}

/// Compare a commit's outcome: both Ok, or both errors where the store's kind is one the
/// model's rules allow (a commit can be both invalid and fenced; either answer is right).
fn compare_commit(
    i: usize,
    c: &Commit,
    got: &afk_core::Result<()>,
    want: &afk_core::Result<()>,
    stale: bool,
) -> CaseResult {
    let mut allowed = Vec::new();
    if validate_commit(c).is_err() {
        allowed.push(ErrorKind::InvalidInput);
    }
    if stale {
        allowed.push(ErrorKind::Fenced);
    }
    match (got, want) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(g), Err(_)) if allowed.contains(&g.kind()) => Ok(()),
        _ => Err(fail!(
            "op {i}: commit {c:?}: the store answered {}, the model {}",
            show_result(got, |_| "()".into()),
            show_result(want, |_| "()".into())
        )),
    }
}

fn is_fence(key: &str) -> bool {
    key.starts_with("run:")
}

/// What a replayed sequence reached, for the tests that check the generator gets to the
/// interesting cases.
#[derive(Debug, Default, Clone, Copy)]
struct Reached {
    /// `claim_if_new` answers `None` (the run's pointer existed).
    refused_if_new: u32,
    /// `claim_if_new` answers with an epoch.
    claimed_if_new: u32,
    /// Commits that moved a pointer.
    pointers: u32,
    /// `commit_owned` calls the store applied, and those it refused (handing the commit back).
    owned_applied: u32,
    owned_refused: u32,
}

async fn replay(store: &dyn Store, ops: &[Op]) -> Result<Reached, String> {
    let reached = Reached::default();
    let model_store = MemoryStore::new();
    let threads: Vec<ThreadId> = (0..THREADS)
        .map(|i| unique_thread(&format!("model{i}")))
        .collect();
    let runs: Vec<RunId> = RUNS.iter().map(|r| named_run(r)).collect();
    let mut replay = Replay {
        sut: Side::new(store),
        model: Side::new(&model_store),
        threads,
        runs,
        reached,
    };
    for (i, op) in ops.iter().enumerate() {
        replay.apply(i, op).await?;
    }
    replay.compare_final_keys().await?;
    Ok(replay.reached)
}

/// A replay in progress: both sides, the threads and runs the operations index into, and
/// what the sequence reached so far.
struct Replay<'a> {
    sut: Side<'a>,
    model: Side<'a>,
    threads: Vec<ThreadId>,
    runs: Vec<RunId>,
    reached: Reached,
}

impl Replay<'_> {
    /// Apply operation `i` to both sides and compare their answers.
    async fn apply(&mut self, i: usize, op: &Op) -> CaseResult {
        match op {
            Op::Claim { thread, run, slot } => self.claim(i, (*thread, *run, *slot)).await,
            Op::ClaimIfNew { thread, run, slot } => {
                self.claim_if_new(i, (*thread, *run, *slot)).await
            }
            Op::Commit(spec) => self.commit(i, spec).await,
            Op::CommitOwned(spec) => self.commit_owned(i, spec).await,
            Op::Batch(specs) => self.batch(i, specs).await,
            Op::Get { thread, key } => self.get(i, *thread, key).await,
            Op::List {
                thread,
                prefix,
                limit,
            } => self.list(i, *thread, prefix, *limit).await,
            Op::GetMany { thread, keys } => {
                let runs = &self.runs;
                let ks: Vec<String> = keys.iter().map(|k| k.render(&runs[0], runs)).collect();
                let (store, model) = (self.sut.store, self.model.store);
                reads::get_many(i, store, model, &self.threads[*thread], &ks).await
            }
            Op::Page {
                thread,
                prefix,
                cursor,
                limit,
            } => {
                let p = prefix.render(&self.runs);
                let c = cursor.render(&self.runs);
                let (store, model) = (self.sut.store, self.model.store);
                reads::page(i, store, model, &self.threads[*thread], &p, c, *limit).await
            }
            Op::Delete { thread, keys } => self.delete(i, *thread, keys).await,
            Op::DeleteRun { thread, run } => self.delete_run(i, *thread, *run).await,
        }
    }

    async fn claim(&mut self, i: usize, (thread, run, slot): (usize, usize, usize)) -> CaseResult {
        let (t, r) = (&self.threads[thread], &self.runs[run]);
        let got = self
            .sut
            .store
            .claim(t, r)
            .await
            .map_err(|e| fail!("op {i}: claim {r}: {e}"))?;
        let want = self
            .model
            .store
            .claim(t, r)
            .await
            .map_err(|e| fail!("op {i}: model claim: {e}"))?;
        claimed(
            &mut self.sut,
            &mut self.model,
            (thread, run, slot),
            (got, want),
        )
        .map_err(|prev| fail!("op {i}: claim {r} returned {got}, not above {prev}"))
    }

    async fn claim_if_new(
        &mut self,
        i: usize,
        (thread, run, slot): (usize, usize, usize),
    ) -> CaseResult {
        let (t, r) = (&self.threads[thread], &self.runs[run]);
        let got = self
            .sut
            .store
            .claim_if_new(t, r)
            .await
            .map_err(|e| fail!("op {i}: claim_if_new {r}: {e}"))?;
        let want = self
            .model
            .store
            .claim_if_new(t, r)
            .await
            .map_err(|e| fail!("op {i}: model claim_if_new: {e}"))?;
        match (got, want) {
            (None, None) => self.reached.refused_if_new += 1,
            (Some(got), Some(want)) => {
                self.reached.claimed_if_new += 1;
                claimed(
                    &mut self.sut,
                    &mut self.model,
                    (thread, run, slot),
                    (got, want),
                )
                .map_err(|prev| {
                    fail!("op {i}: claim_if_new {r} returned {got}, not above {prev}")
                })?;
            }
            (got, want) => {
                return Err(fail!(
                    "op {i}: claim_if_new {r}: the store answered {got:?}, the model \
                     {want:?} (None: the run's pointer exists)"
                ));
            }
        }
        Ok(())
    }

    async fn commit(&mut self, i: usize, spec: &CommitSpec) -> CaseResult {
        let stale = self.model.is_stale(spec);
        let (c, mc) = (
            self.sut.build(&self.threads, &self.runs, spec),
            self.model.build(&self.threads, &self.runs, spec),
        );
        let got = self.sut.store.commit(&c).await;
        let want = self.model.store.commit(&mc).await;
        compare_commit(i, &c, &got, &want, stale)?;
        if want.is_ok() && mc.latest.is_some() {
            self.reached.pointers += 1;
        }
        Ok(())
    }

    async fn commit_owned(&mut self, i: usize, spec: &CommitSpec) -> CaseResult {
        let stale = self.model.is_stale(spec);
        let (c, mc) = (
            self.sut.build(&self.threads, &self.runs, spec),
            self.model.build(&self.threads, &self.runs, spec),
        );
        let got = match self.sut.store.commit_owned(c.clone()).await {
            Ok(()) => {
                self.reached.owned_applied += 1;
                Ok(())
            }
            Err(rejected) if *rejected.commit == c => {
                self.reached.owned_refused += 1;
                Err(rejected.error)
            }
            Err(rejected) => {
                return Err(fail!(
                    "op {i}: commit_owned {c:?} refused ({}) handed back another \
                     commit: {:?}",
                    rejected.error,
                    rejected.commit
                ));
            }
        };
        let want = self.model.store.commit(&mc).await;
        compare_commit(i, &c, &got, &want, stale)
    }

    async fn batch(&mut self, i: usize, specs: &[CommitSpec]) -> CaseResult {
        let mut stale = Vec::new();
        for s in specs {
            stale.push(self.model.is_stale(s));
        }
        let cs: Vec<Commit> = specs
            .iter()
            .map(|s| self.sut.build(&self.threads, &self.runs, s))
            .collect();
        let ms: Vec<Commit> = specs
            .iter()
            .map(|s| self.model.build(&self.threads, &self.runs, s))
            .collect();
        let got = self.sut.store.commit_batch(&cs).await;
        let want = self.model.store.commit_batch(&ms).await;
        if got.len() != want.len() {
            return Err(fail!(
                "op {i}: commit_batch of {} answered {} results",
                cs.len(),
                got.len()
            ));
        }
        for (j, c) in cs.iter().enumerate() {
            compare_commit(i, c, &got[j], &want[j], stale[j])?;
        }
        Ok(())
    }

    async fn get(&self, i: usize, thread: usize, key: &KeySpec) -> CaseResult {
        let k = key.render(&self.runs[0], &self.runs);
        let t = &self.threads[thread];
        let got = self
            .sut
            .store
            .get(t, &k)
            .await
            .map_err(|e| fail!("op {i}: get {k}: {e}"))?;
        let want = self
            .model
            .store
            .get(t, &k)
            .await
            .map_err(|e| fail!("op {i}: model get: {e}"))?;
        let same = if is_fence(&k) {
            got.is_some() == want.is_some()
        } else {
            got == want
        };
        if !same {
            return Err(fail!(
                "op {i}: get {k}: the store has {}, the model {}",
                crate::support::show(&got),
                crate::support::show(&want)
            ));
        }
        Ok(())
    }

    async fn list(&self, i: usize, thread: usize, prefix: &PrefixSpec, limit: usize) -> CaseResult {
        let t = &self.threads[thread];
        let p = prefix.render(&self.runs);
        let got = list_all(self.sut.store, t, &p, limit)
            .await
            .map_err(|e| fail!("op {i}: {e}"))?;
        let want = list_all(self.model.store, t, &p, limit)
            .await
            .map_err(|e| fail!("op {i}: model: {e}"))?;
        if got != want {
            return Err(fail!(
                "op {i}: list {p:?}: the store has {got:?}, the model {want:?}"
            ));
        }
        Ok(())
    }

    async fn delete(&mut self, i: usize, thread: usize, keys: &[KeySpec]) -> CaseResult {
        let t = &self.threads[thread];
        let runs = &self.runs;
        let ks: Vec<String> = keys.iter().map(|k| k.render(&runs[0], runs)).collect();
        self.sut
            .store
            .delete(t, &ks)
            .await
            .map_err(|e| fail!("op {i}: delete {ks:?}: {e}"))?;
        self.model
            .store
            .delete(t, &ks)
            .await
            .map_err(|e| fail!("op {i}: model delete: {e}"))?;
        for k in ks.iter().filter(|k| is_fence(k)) {
            if let Some(r) = runs.iter().position(|r| run_of_key(k) == Some(r.as_str())) {
                self.sut.reset(thread, r);
                self.model.reset(thread, r);
            }
        }
        Ok(())
    }

    async fn delete_run(&mut self, i: usize, thread: usize, run: usize) -> CaseResult {
        let (t, r) = (&self.threads[thread], &self.runs[run]);
        let got = self
            .sut
            .store
            .delete_run(t, r)
            .await
            .map_err(|e| fail!("op {i}: delete_run {r}: {e}"))?;
        let want = self
            .model
            .store
            .delete_run(t, r)
            .await
            .map_err(|e| fail!("op {i}: model delete_run: {e}"))?;
        if got != want {
            return Err(fail!(
                "op {i}: delete_run {r}: the store removed {got} keys, the model {want}"
            ));
        }
        self.sut.reset(thread, run);
        self.model.reset(thread, run);
        Ok(())
    }

    /// Final check: both sides hold the same keys in every thread.
    async fn compare_final_keys(&self) -> CaseResult {
        let (store, model_store) = (self.sut.store, self.model.store);
        for t in &self.threads {
            let got = list_all(store, t, "", 1000).await?;
            let want = list_all(model_store, t, "", 1000).await?;
            if got != want {
                return Err(fail!(
                    "at the end: the store holds {got:?}, the model {want:?}"
                ));
            }
            for k in got.iter().filter(|k| !is_fence(k)) {
                let (g, w) = (store.get(t, k).await, model_store.get(t, k).await);
                if g.as_ref().ok() != w.as_ref().ok() {
                    return Err(fail!("at the end: {k} differs from the model"));
                }
            }
            let _ = store.delete(t, &got).await; // tidy up a shared server; best effort
        }
        Ok(())
    }
}

/// Record a claim the store (`got`) and the model (`want`) made for `(thread, run, slot)`;
/// `Err` with the earlier epoch when the store's is not above every epoch it handed out for
/// the run since it was last reset.
fn claimed(
    sut: &mut Side<'_>,
    model: &mut Side<'_>,
    (thread, run, slot): (usize, usize, usize),
    (got, want): (Epoch, Epoch),
) -> Result<(), Epoch> {
    if let Some(prev) = sut.max.get(&(thread, run))
        && got <= *prev
    {
        return Err(*prev);
    }
    sut.max.insert((thread, run), got);
    sut.held.insert((thread, run, slot), got);
    model.held.insert((thread, run, slot), want);
    Ok(())
}

impl Side<'_> {
    /// Whether this side fences `spec`: its slot holds no epoch, or not the newest one (the
    /// newest claim of a run is always held by the slot that made it).
    fn is_stale(&self, spec: &CommitSpec) -> bool {
        let held = self.held.get(&(spec.thread, spec.run, spec.slot)).copied();
        let newest = self
            .held
            .iter()
            .filter(|((t, r, _), _)| (*t, *r) == (spec.thread, spec.run))
            .map(|(_, e)| *e)
            .max();
        held.is_none() || held != newest
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::{Strategy, ValueTree};

    use super::*;

    /// The generator reaches both answers of `claim_if_new` within the default 32 sequences
    /// (a refusal needs a claim, a commit of the pointer under it, then `claim_if_new` of the
    /// same run), so the model compares both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sequences_reach_both_answers_of_claim_if_new_and_commit_owned() {
        let mut runner = test_runner(20261201, 32, None);
        let mut total = Reached::default();
        for _ in 0..32 {
            let ops = ops_strategy().new_tree(&mut runner).unwrap().current();
            let r = replay(&MemoryStore::new(), &ops).await.unwrap();
            total.refused_if_new += r.refused_if_new;
            total.claimed_if_new += r.claimed_if_new;
            total.pointers += r.pointers;
            total.owned_applied += r.owned_applied;
            total.owned_refused += r.owned_refused;
        }
        assert!(total.refused_if_new >= 3, "{total:?}");
        assert!(total.claimed_if_new >= 3, "{total:?}");
        assert!(total.owned_applied >= 3, "{total:?}");
        assert!(total.owned_refused >= 3, "{total:?}");
    }
}
