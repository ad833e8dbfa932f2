//! A store wrapper that counts what is written and how often the store is called: every trait
//! method call is one call (one round trip on Redis, where a commit or a batch of commits is
//! one script or pipeline); the sum of [`Commit::byte_len`] over applied commits, per step (the step of a commit is the `<step>` of its `checkpoint:<run>:<step>:…`
//! keys; a commit without one belongs to the step of the commit before it).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use afk::{
    Result,
    store::{Commit, Store},
};
use afk_core::store::{Call, Done, HookStore, Hooks};
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

/// A store wrapper that counts bytes of applied commits and store calls; optionally keeps
/// the commits themselves. Construct with `CountingStore::new(inner, Counter::default())`;
/// the counts are its [`HookStore::hooks`].
pub type CountingStore = HookStore<Counter, dyn Store>;

/// The counts of a [`CountingStore`].
#[derive(Debug, Default)]
pub struct Counter {
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

impl Counter {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep a copy of every applied commit (for [`Counter::commits`]).
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
#[derive(Debug)]
pub struct Tally {
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

/// Every call is counted before it is forwarded; a commit's tally (and copy, when keeping
/// commits) is taken before it is handed over and added once it was applied.
#[async_trait]
impl Hooks for Counter {
    /// The tally of each commit of the call, and its copy when keeping commits.
    type Note = Vec<(Tally, Option<Commit>)>;

    async fn before(&self, call: Call<'_>) -> Result<Self::Note> {
        let keeping = {
            let mut c = self.counts();
            c.calls += 1;
            c.kept.is_some()
        };
        let commits = match call {
            Call::Commit(c) | Call::CommitOwned(c) => std::slice::from_ref(c),
            Call::CommitBatch(cs) => cs,
            _ => &[],
        };
        Ok(commits
            .iter()
            .map(|c| (Tally::of(c), keeping.then(|| c.clone())))
            .collect())
    }

    fn after(&self, tallies: Self::Note, done: Done<'_>) {
        match done {
            Done::Ok => tallies.into_iter().for_each(|(t, kept)| self.add(t, kept)),
            Done::Batch(results) => {
                for ((t, kept), r) in tallies.into_iter().zip(results) {
                    if r.is_ok() {
                        self.add(t, kept);
                    }
                }
            }
            Done::Err(_) => {}
        }
    }
}
