//! A store wrapper that counts what is written and how often the store is called: every trait
//! method call is one call (one round trip on Redis, where a commit or a batch of commits is
//! one script or pipeline); the sum of [`Commit::byte_len`] over applied commits, per step (the step of a commit is the `<step>` of its `checkpoint:<run>:<step>:…`
//! keys; a commit without one belongs to the step of the commit before it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use afk::{
    Result, RunId, ThreadId,
    store::{Commit, CommitRejected, Epoch, ListPage, Store},
};
use async_trait::async_trait;

#[derive(Debug, Default)]
struct Counts {
    /// Calls of any store method.
    calls: u64,
    commits: u64,
    bytes: u64,
    step: u64,
    /// Bytes per step, indexed by step (index 0: commits before the first step record).
    per_step: Vec<u64>,
    /// Bytes per step and kind of key (see [`kind_of`]).
    per_kind: BTreeMap<(u64, String), u64>,
    kept: Option<Vec<Commit>>,
}

/// Counts bytes of applied commits; optionally keeps the commits themselves.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counts: Mutex<Counts>,
}

fn step_of(commit: &Commit) -> Option<u64> {
    commit
        .puts
        .iter()
        .filter_map(|(k, _)| {
            let mut f = k.split(':');
            (f.next() == Some("checkpoint"))
                .then(|| f.nth(1).and_then(|s| s.parse::<u64>().ok()))
                .flatten()
        })
        .max()
}

/// The kind of a key for the breakdown: `checkpoint:<phase>`, `messages`, `effect`, ….
fn kind_of(key: &str) -> String {
    let mut f = key.split(':');
    match f.next() {
        Some("checkpoint") => format!("checkpoint:{}", f.next_back().unwrap_or("")),
        Some(family) => family.to_owned(),
        None => String::new(),
    }
}

impl CountingStore {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        CountingStore {
            inner,
            counts: Mutex::new(Counts::default()),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep a copy of every applied commit (for [`CountingStore::commits`]).
    pub fn keep_commits(&self, keep: bool) {
        self.counts().kept = keep.then(Vec::new);
    }

    /// The kept commits, in the order they were applied.
    pub fn commits(&self) -> Vec<Commit> {
        self.counts().kept.clone().unwrap_or_default()
    }

    /// Store calls so far (every method).
    pub fn calls(&self) -> u64 {
        self.counts().calls
    }

    fn call(&self) {
        self.counts().calls += 1;
    }

    /// Applied commits and their total bytes.
    pub fn totals(&self) -> (u64, u64) {
        let c = self.counts();
        (c.commits, c.bytes)
    }

    /// Bytes written in `step` (0 if none).
    pub fn step_bytes(&self, step: u64) -> u64 {
        let c = self.counts();
        usize::try_from(step)
            .ok()
            .and_then(|i| c.per_step.get(i).copied())
            .unwrap_or(0)
    }

    /// Bytes written in `step` by kind of key, the latest pointer as `latest`.
    pub fn step_kinds(&self, step: u64) -> Vec<(String, u64)> {
        self.counts()
            .per_kind
            .range((step, String::new())..(step + 1, String::new()))
            .map(|((_, k), b)| (k.clone(), *b))
            .collect()
    }

    fn record(&self, commit: &Commit) {
        let kept = self.keeping().then(|| commit.clone());
        self.add(Tally::of(commit), kept);
    }

    fn keeping(&self) -> bool {
        self.counts().kept.is_some()
    }

    /// Count an applied commit (`tally` of it, and the commit itself when keeping them).
    fn add(&self, tally: Tally, kept: Option<Commit>) {
        let mut c = self.counts();
        c.commits += 1;
        c.bytes += tally.len;
        if let Some(s) = tally.step {
            c.step = s;
        }
        let i = usize::try_from(c.step).unwrap_or(usize::MAX);
        if c.per_step.len() <= i {
            c.per_step.resize(i + 1, 0);
        }
        c.per_step[i] += tally.len;
        let step = c.step;
        for (kind, bytes) in tally.kinds {
            *c.per_kind.entry((step, kind)).or_insert(0) += bytes;
        }
        if let (Some(all), Some(commit)) = (c.kept.as_mut(), kept) {
            all.push(commit);
        }
    }
}

/// What a commit adds to the counts, taken before it is handed over.
struct Tally {
    len: u64,
    step: Option<u64>,
    /// Bytes by kind of key, the latest pointer as `latest`.
    kinds: Vec<(String, u64)>,
}

impl Tally {
    fn of(commit: &Commit) -> Self {
        let mut kinds: Vec<(String, u64)> = commit
            .puts
            .iter()
            .map(|(k, v)| (kind_of(k), (k.len() + v.len()) as u64))
            .collect();
        if let Some(l) = &commit.latest {
            kinds.push(("latest".into(), l.len() as u64));
        }
        Tally {
            len: commit.byte_len() as u64,
            step: step_of(commit),
            kinds,
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for CountingStore {
    fn capabilities(&self) -> afk::store::Capabilities {
        self.inner.capabilities()
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        self.call();
        self.inner.get(thread, key).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.call();
        self.inner.get_many(thread, keys).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        self.call();
        self.inner.list(thread, prefix, cursor, limit).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        self.call();
        self.inner.delete(thread, keys).await
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        self.call();
        self.inner.delete_run(thread, run).await
    }

    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk::store::ThreadPage> {
        self.call();
        self.inner.list_threads(cursor, limit).await
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        self.call();
        self.inner.claim(thread, run).await
    }

    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        self.call();
        self.inner.claim_if_new(thread, run).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        self.call();
        self.inner.commit(commit).await?;
        self.record(commit);
        Ok(())
    }

    /// Counted as `commit` is; handed to the inner store's `commit_owned` (copied first only
    /// when keeping commits).
    async fn commit_owned(&self, commit: Commit) -> std::result::Result<(), CommitRejected> {
        self.call();
        let tally = Tally::of(&commit);
        let kept = self.keeping().then(|| commit.clone());
        self.inner.commit_owned(commit).await?;
        self.add(tally, kept);
        Ok(())
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        self.call();
        let out = self.inner.commit_batch(commits).await;
        for (c, r) in commits.iter().zip(&out) {
            if r.is_ok() {
                self.record(c);
            }
        }
        out
    }
}
