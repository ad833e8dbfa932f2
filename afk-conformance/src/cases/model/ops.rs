//! The operations of the model-based test and their random generation.

use afk_core::RunId;
use proptest::prelude::*;

use super::{RUNS, SLOTS, THREADS};

/// A key family, including the keys a commit may not put.
#[derive(Debug, Clone, Copy)]
pub(super) enum Family {
    Checkpoint,
    Effect,
    Messages,
    Bgtool,
    /// `checkpoint:<run>:latest`: readable, never a put.
    Latest,
    /// `run:<run>`: readable, never a put.
    Fence,
    /// A key of no run.
    Foreign,
}

/// A key: a family, a run (`None`: the commit's own run) and a small suffix, so keys collide.
#[derive(Debug, Clone)]
pub(super) struct KeySpec {
    family: Family,
    run: Option<usize>,
    suffix: u8,
}

impl KeySpec {
    pub(super) fn render(&self, own: &RunId, runs: &[RunId]) -> String {
        let r = self.run.map_or(own, |i| &runs[i]);
        let n = self.suffix;
        match self.family {
            Family::Checkpoint => {
                let phase = ["pre_llm", "post_llm", "pre_tool"][usize::from(n % 3)];
                format!("checkpoint:{r}:{}:{phase}", n / 3)
            }
            Family::Effect => format!("effect:{r}:1:c%3A{n}"),
            Family::Messages => format!("messages:{r}:{n:020}"),
            Family::Bgtool => format!("bgtool:{r}:j{n}"),
            Family::Latest => format!("checkpoint:{r}:latest"),
            Family::Fence => format!("run:{r}"),
            Family::Foreign => format!("other:{n}"),
        }
    }
}

/// A listing prefix.
#[derive(Debug, Clone)]
pub(super) enum PrefixSpec {
    All,
    /// `family:`
    Family(&'static str),
    /// `family:<run>` (also matches runs that extend the id: `run_1` matches `run_10`).
    Run(&'static str, usize),
    /// `family:<run>:`
    RunColon(&'static str, usize),
}

impl PrefixSpec {
    pub(super) fn render(&self, runs: &[RunId]) -> String {
        match self {
            PrefixSpec::All => String::new(),
            PrefixSpec::Family(f) => format!("{f}:"),
            PrefixSpec::Run(f, r) => format!("{f}:{}", runs[*r]),
            PrefixSpec::RunColon(f, r) => format!("{f}:{}:", runs[*r]),
        }
    }
}

/// Where an explicit listing starts: no cursor, or a cursor that is any key (under the prefix,
/// before it or after it; there or not).
#[derive(Debug, Clone)]
pub(super) enum CursorSpec {
    None,
    Key(KeySpec),
}

impl CursorSpec {
    pub(super) fn render(&self, runs: &[RunId]) -> Option<String> {
        match self {
            CursorSpec::None => None,
            CursorSpec::Key(k) => Some(k.render(&runs[0], runs)),
        }
    }
}

/// A commit: which claimant slot's epoch it carries (none held: epoch 0), its puts and pointer.
#[derive(Debug, Clone)]
pub(super) struct CommitSpec {
    pub(super) thread: usize,
    pub(super) run: usize,
    pub(super) slot: usize,
    pub(super) puts: Vec<(KeySpec, Vec<u8>)>,
    pub(super) latest: Option<Vec<u8>>,
}

/// One step of a sequence.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Claim {
        thread: usize,
        run: usize,
        slot: usize,
    },
    /// `claim_if_new`: claims like [`Op::Claim`] only while the run has no pointer.
    ClaimIfNew {
        thread: usize,
        run: usize,
        slot: usize,
    },
    Commit(CommitSpec),
    /// The same commit through `commit_owned`: `commit`'s outcome, and a refused commit handed
    /// back unchanged.
    CommitOwned(CommitSpec),
    Batch(Vec<CommitSpec>),
    Get {
        thread: usize,
        key: KeySpec,
    },
    List {
        thread: usize,
        prefix: PrefixSpec,
        limit: usize,
    },
    /// `get_many` of keys in any order, repeats included.
    GetMany {
        thread: usize,
        keys: Vec<KeySpec>,
    },
    /// Explicit paging: `list` from a cursor with a limit, page by page, each page compared
    /// with the model's next keys.
    Page {
        thread: usize,
        prefix: PrefixSpec,
        cursor: CursorSpec,
        limit: usize,
    },
    Delete {
        thread: usize,
        keys: Vec<KeySpec>,
    },
    DeleteRun {
        thread: usize,
        run: usize,
    },
}

fn family(puttable: bool) -> BoxedStrategy<Family> {
    let common = prop_oneof![
        4 => Just(Family::Checkpoint),
        3 => Just(Family::Effect),
        2 => Just(Family::Messages),
        1 => Just(Family::Bgtool),
    ];
    if puttable {
        prop_oneof![
            40 => common,
            1 => Just(Family::Latest),
            1 => Just(Family::Fence),
            1 => Just(Family::Foreign),
        ]
        .boxed()
    } else {
        prop_oneof![
            10 => common,
            3 => Just(Family::Latest),
            2 => Just(Family::Fence),
            1 => Just(Family::Foreign),
        ]
        .boxed()
    }
}

fn run() -> impl Strategy<Value = usize> {
    0..RUNS.len()
}

fn thread() -> impl Strategy<Value = usize> {
    0..THREADS
}

/// A key to read or delete: any family, any run.
fn any_key() -> impl Strategy<Value = KeySpec> {
    (family(false), run(), 0u8..9).prop_map(|(family, r, suffix)| KeySpec {
        family,
        run: Some(r),
        suffix,
    })
}

/// A key to put: mostly the commit's own run, sometimes another (an invalid commit).
fn put_key() -> impl Strategy<Value = KeySpec> {
    (family(true), prop::option::weighted(0.05, run()), 0u8..9).prop_map(|(family, run, suffix)| {
        KeySpec {
            family,
            run,
            suffix,
        }
    })
}

/// A key for `get_many`: few families and suffixes, so a list often repeats a key.
fn read_key() -> impl Strategy<Value = KeySpec> {
    (family(false), run(), 0u8..4).prop_map(|(family, r, suffix)| KeySpec {
        family,
        run: Some(r),
        suffix,
    })
}

fn cursor() -> impl Strategy<Value = CursorSpec> {
    prop_oneof![
        1 => Just(CursorSpec::None),
        4 => any_key().prop_map(CursorSpec::Key),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..24)
}

fn commit_spec() -> impl Strategy<Value = CommitSpec> {
    (
        thread(),
        run(),
        0..SLOTS,
        prop::collection::vec((put_key(), value()), 0..4),
        prop::option::of(value()),
    )
        .prop_map(|(thread, run, slot, puts, latest)| CommitSpec {
            thread,
            run,
            slot,
            puts,
            latest,
        })
}

fn prefix() -> impl Strategy<Value = PrefixSpec> {
    let fam = prop::sample::select(vec!["checkpoint", "effect", "messages", "bgtool", "run"]);
    prop_oneof![
        2 => Just(PrefixSpec::All),
        1 => fam.clone().prop_map(PrefixSpec::Family),
        1 => (fam.clone(), run()).prop_map(|(f, r)| PrefixSpec::Run(f, r)),
        1 => (fam, run()).prop_map(|(f, r)| PrefixSpec::RunColon(f, r)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (thread(), run(), 0..SLOTS).prop_map(|(thread, run, slot)| Op::Claim { thread, run, slot }),
        3 => (thread(), run(), 0..SLOTS).prop_map(|(thread, run, slot)| Op::ClaimIfNew { thread, run, slot }),
        6 => commit_spec().prop_map(Op::Commit),
        3 => commit_spec().prop_map(Op::CommitOwned),
        1 => prop::collection::vec(commit_spec(), 1..4).prop_map(Op::Batch),
        4 => (thread(), any_key()).prop_map(|(thread, key)| Op::Get { thread, key }),
        2 => (thread(), prefix(), prop::sample::select(vec![1usize, 2, 3, 1000]))
            .prop_map(|(thread, prefix, limit)| Op::List { thread, prefix, limit }),
        2 => (thread(), prop::collection::vec(read_key(), 0..7))
            .prop_map(|(thread, keys)| Op::GetMany { thread, keys }),
        2 => (thread(), prefix(), cursor(), prop::sample::select(vec![0usize, 1, 2, 3, 5]))
            .prop_map(|(thread, prefix, cursor, limit)| Op::Page { thread, prefix, cursor, limit }),
        1 => (thread(), prop::collection::vec(any_key(), 0..3)).prop_map(|(thread, keys)| Op::Delete { thread, keys }),
        1 => (thread(), run()).prop_map(|(thread, run)| Op::DeleteRun { thread, run }),
    ]
}

/// Sequences of 1 to 60 operations.
pub(super) fn ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..60)
}
