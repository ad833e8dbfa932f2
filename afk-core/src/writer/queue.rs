//! The writer's queue: accepted commits in arrival order, each run claim's entries found
//! without a scan.
//!
//! `submit` looks up its run claim's newest entry (to merge into it), a barrier its oldest (to
//! write it), and a write's end whether the claim has more: with thousands of runs in flight
//! the queue holds thousands of entries, and a scan per lookup made each commit cost
//! O(entries) key comparisons. Entries live in a map ordered by arrival (the background task
//! hands them over oldest first), and each claim keeps the arrival numbers of its own entries,
//! oldest first.

use std::collections::{BTreeMap, HashSet, VecDeque};

use super::state::{RunKey, RunMap};
use super::worker::Queued;

#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Arrival number of the next entry.
    next: u64,
    /// Every entry, by arrival number.
    entries: BTreeMap<u64, Queued>,
    /// Each run claim's arrival numbers, oldest first; a claim with none has no key.
    by_run: RunMap<VecDeque<u64>>,
}

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Append `q` (the newest entry of its run claim).
    pub(crate) fn push_back(&mut self, q: Queued) {
        let at = self.next;
        self.next += 1;
        self.by_run
            .entry(q.entry.key.clone())
            .or_default()
            .push_back(at);
        self.entries.insert(at, q);
    }

    /// The newest entry of run claim `key`.
    pub(crate) fn newest(&self, key: &RunKey) -> Option<&Queued> {
        let at = self.by_run.get(key)?.back()?;
        self.entries.get(at)
    }

    /// The newest entry of run claim `key`, to merge into.
    pub(crate) fn newest_mut(&mut self, key: &RunKey) -> Option<&mut Queued> {
        let at = self.by_run.get(key)?.back()?;
        self.entries.get_mut(at)
    }

    /// Whether run claim `key` has an entry queued.
    pub(crate) fn has(&self, key: &RunKey) -> bool {
        self.by_run.contains_key(key)
    }

    /// Take the oldest entry of run claim `key`.
    pub(crate) fn take_oldest(&mut self, key: &RunKey) -> Option<Queued> {
        let slots = self.by_run.get_mut(key)?;
        let at = slots.pop_front()?;
        if slots.is_empty() {
            self.by_run.remove(key);
        }
        self.entries.remove(&at)
    }

    /// Drop every entry of the run claims in `runs`; returns how many were dropped.
    pub(crate) fn drop_runs(&mut self, runs: &HashSet<RunKey>) -> usize {
        let mut dropped = 0;
        for key in runs {
            for at in self.by_run.remove(key).unwrap_or_default() {
                dropped += usize::from(self.entries.remove(&at).is_some());
            }
        }
        dropped
    }

    /// Every entry, oldest first, with its arrival number (for [`Queue::take`]).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Queued)> {
        self.entries.iter().map(|(&at, q)| (at, q))
    }

    /// Take the entry with arrival number `at`, which must be the oldest of its run claim
    /// (the background task takes a claim's entries in order).
    pub(crate) fn take(&mut self, at: u64) -> Option<Queued> {
        let q = self.entries.remove(&at)?;
        if let Some(slots) = self.by_run.get_mut(&q.entry.key) {
            debug_assert_eq!(
                slots.front(),
                Some(&at),
                "a run claim's entries leave in order"
            );
            slots.retain(|&s| s != at);
            if slots.is_empty() {
                self.by_run.remove(&q.entry.key);
            }
        }
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    //! The queue against the plain list it replaced: every lookup answers what a scan of the
    //! entries in arrival order answers.

    use std::collections::{HashSet, VecDeque};

    use proptest::prelude::*;

    use super::Queue;
    use crate::store::{Commit, Epoch};
    use crate::writer::state::RunKey;
    use crate::writer::worker::{Entry, Queued};

    fn key(run: u8) -> RunKey {
        let thread = crate::ids::ThreadId::new("t").unwrap_or_else(|e| panic!("{e}"));
        let id = crate::ids::RunId::new(format!("r{}", run % 4)).unwrap_or_else(|e| panic!("{e}"));
        (thread, id, Epoch(u64::from(run / 4) + 1))
    }

    fn queued(run: u8, seq: u64) -> Queued {
        let (thread, id, epoch) = key(run);
        Queued::new(Entry {
            key: (thread.clone(), id.clone(), epoch),
            seq,
            commit: Commit {
                thread,
                run: id,
                epoch,
                puts: Vec::new(),
                latest: None,
                attention: None,
            },
            latest_put: None,
        })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8),
        Newest(u8),
        TakeOldest(u8),
        Drop(Vec<u8>),
        /// Take the oldest entry of the claim of the `n`th entry in arrival order.
        TakeNth(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8).prop_map(Op::Push),
            2 => (0u8..8).prop_map(Op::Newest),
            2 => (0u8..8).prop_map(Op::TakeOldest),
            1 => proptest::collection::vec(0u8..8, 0..3).prop_map(Op::Drop),
            2 => (0usize..12).prop_map(Op::TakeNth),
        ]
    }

    /// (key, seq) of an entry, to compare the two.
    fn id(q: &Queued) -> (RunKey, u64) {
        (q.entry.key.clone(), q.entry.seq)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn answers_as_a_scan_of_the_entries_in_arrival_order(ops in proptest::collection::vec(op(), 1..60)) {
            let mut queue = Queue::default();
            let mut list: VecDeque<(RunKey, u64)> = VecDeque::new();
            for (seq, op) in (0u64..).zip(ops) {
                match op {
                    Op::Push(r) => {
                        queue.push_back(queued(r, seq));
                        list.push_back((key(r), seq));
                    }
                    Op::Newest(r) => {
                        let want = list.iter().rev().find(|(k, _)| *k == key(r)).cloned();
                        prop_assert_eq!(queue.newest(&key(r)).map(id), want.clone());
                        prop_assert_eq!(queue.newest_mut(&key(r)).map(|q| id(q)), want);
                        prop_assert_eq!(queue.has(&key(r)), list.iter().any(|(k, _)| *k == key(r)));
                    }
                    Op::TakeOldest(r) => {
                        let want = list.iter().position(|(k, _)| *k == key(r)).and_then(|i| list.remove(i));
                        prop_assert_eq!(queue.take_oldest(&key(r)).map(|q| id(&q)), want);
                    }
                    Op::Drop(rs) => {
                        let runs: HashSet<RunKey> = rs.into_iter().map(key).collect();
                        let before = list.len();
                        list.retain(|(k, _)| !runs.contains(k));
                        prop_assert_eq!(queue.drop_runs(&runs), before - list.len());
                    }
                    Op::TakeNth(n) => {
                        let Some((k, _)) = list.get(n).cloned() else { continue };
                        let i = list.iter().position(|(o, _)| *o == k).unwrap_or(n);
                        let at = queue.iter().find(|(_, q)| q.entry.key == k).map(|(at, _)| at);
                        let got = at.and_then(|at| queue.take(at)).map(|q| id(&q));
                        prop_assert_eq!(got, list.remove(i));
                    }
                }
                prop_assert_eq!(queue.len(), list.len());
                prop_assert_eq!(queue.is_empty(), list.is_empty());
                let order: Vec<(RunKey, u64)> = queue.iter().map(|(_, q)| id(q)).collect();
                prop_assert_eq!(order, Vec::from(list.clone()));
            }
        }
    }
}
