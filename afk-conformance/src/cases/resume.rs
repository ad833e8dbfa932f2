//! The resume level: random scripted agents crashed many times and resumed until done.
//!
//! Each case generates (with proptest) a script of 1 to 4 model turns whose tool calls include
//! parallel batches, failing tools, idempotent and at-most-once tools and a call that pauses
//! for approval. It first runs uncrashed on a [`MemoryStore`], the model. Then it runs on the
//! store under test wrapped in a [`FaultStore`] that crashes at a chosen commit (or aborts the
//! run task with a panic at a chosen journal read), and is continued by new runners on the
//! same store under the SAME run id, approving every pause and settling every uncertain
//! at-most-once call from the tools' ledger (`Runner::resume_settling`: it ran -> its output,
//! else it did not run), until done. After the first crash come up to 49 more, generated:
//! every later process (resumes, settlements, the restart of a run that committed nothing)
//! crashes after a few commits, so a case applies up to 50 crashes. What must hold:
//!
//! * the final result is the model's (text, state, step, usage, counters, tool records,
//!   session): crashes are invisible;
//! * a run is resumable from its first commit: the only crash that leaves nothing to resume
//!   is one before that commit, and then the run starts again under the same id;
//! * no tool call whose successful result was in the store before a resume runs again in it;
//! * no model answer the store held before a resume is requested again in it;
//! * an at-most-once call runs at most once; a resume stops with `EffectUncertain` only when
//!   such a call's intent is stored without a result, and then runs and asks nothing;
//! * the store holds exactly what it acknowledged: at the end, every key but the fences
//!   equals the commits the store accepted (replayed into a mirror, which also answers the
//!   per-process checks without reading the thread back);
//! * resuming the finished run returns the same result with no model or tool call and no
//!   commit: every key but the run's fence `run:<run>` (which the resumer's claim bumps) is
//!   byte-for-byte unchanged.
//!
//! The first crash point cycles through four targets taken from the model run's commit log:
//! right after an effect intent (a crash mid-batch), right after a successful effect result
//! (its replay), right after a snapshot holding a pending model answer (its reuse), and the
//! run's very first commit (before it, or right after it: the first commit alone must be
//! resumable). One case in eight gets a long sequence (40 to 50 crashes), the others up to
//! two more crashes after the first. The level counts
//! what it reached (crashes mid-batch, replays, reused answers, crashes before and right
//! after the first commit, crashes of resumes, settlements, the longest sequence) and, with
//! 8 cases or more, requires each to be reached; random scripts reach each kind only with
//! high probability, so when they missed one, a few extra cases aimed at it with a script
//! that certainly has it are run (`top_up`), keeping the requirement independent of the seed.
//!
//! Seeded: the seed is printed, `AFK_SEED=<seed>` replays it; `PROPTEST_CASES`
//! sets the number of cases (default 16).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use afk_core::normalize::normalize_record;
use afk_core::runner::Outcome;
use afk_core::schema::AgentResult;
use afk_core::store::{CrashMode, FaultEvent, FaultStore, Op, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;

use crate::agents::{
    Attempt, Calls, Durable, Mirror, Rig, Script, Start, ToolKind, attempt, drive, dump,
    durable_in, essence,
};
use crate::support::{
    CaseResult, cases_from_env, ensure, named_run, seed_from_env, test_runner, unique_thread,
};

/// The crashes a long case applies to one run, at least.
pub const LONG: u32 = 40;
/// The most crashes of one run.
const MOST: usize = 50;

/// Random crashed-and-resumed runs give the uncrashed result (see the module docs).
pub async fn crash_and_resume(store: Arc<dyn Store>) -> CaseResult {
    let config = ResumeConfig {
        seed: seed_from_env()?,
        cases: cases_from_env(16),
    };
    let stats = run_resume(store, config).await?;
    if config.cases >= 8 {
        stats.require_coverage()?;
    }
    Ok(())
}

/// Seed and size of a [`run_resume`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeConfig {
    /// Seed of the script and crash-point generator.
    pub seed: u64,
    /// How many scripts to run.
    pub cases: u32,
}

/// What a [`run_resume`] run exercised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeStats {
    /// Scripts run.
    pub cases: u32,
    /// Processes that crashed or were aborted.
    pub crashes: u32,
    /// Crashes that left an effect intent without its result (a crash mid-batch).
    pub mid_batch: u32,
    /// Resumes that replayed a tool result from the effect journal.
    pub replayed: u32,
    /// Resumes that used a stored pending model answer instead of asking the model.
    pub reused_pending: u32,
    /// Resumes that stopped with `EffectUncertain` (an at-most-once call cut by a crash).
    pub uncertain: u32,
    /// Uncertain calls settled by the operator (each then continued).
    pub settled: u32,
    /// Crashes before the run's first commit (nothing to resume: started again, same id).
    pub before_first_commit: u32,
    /// Crashes that left the run's first commit alone (no step-1 snapshot yet): resumed.
    pub first_commit_only: u32,
    /// Crashes of a resume, an approval or a settlement (not of the fresh start).
    pub resume_crashes: u32,
    /// The most crashes applied to one run.
    pub longest: u32,
}

impl ResumeStats {
    /// `Err` unless a crash landed mid-batch, an effect was replayed, a pending answer was
    /// reused, a crash came before the first commit and one right after it, resumes crashed
    /// and one run took at least [`LONG`] crashes.
    pub fn require_coverage(&self) -> CaseResult {
        ensure!(
            self.mid_batch > 0
                && self.replayed > 0
                && self.reused_pending > 0
                && self.before_first_commit > 0
                && self.first_commit_only > 0
                && self.resume_crashes > 0
                && self.longest >= LONG,
            "the resume cases missed an interesting crash: {self:?}"
        );
        Ok(())
    }
}

/// [`crash_and_resume`] with an explicit seed and case count; returns what was exercised.
/// Needs a multi-thread runtime.
pub async fn run_resume(
    store: Arc<dyn Store>,
    config: ResumeConfig,
) -> Result<ResumeStats, String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let handle = Handle::current();
    if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
        return Err("the resume level needs a multi-thread tokio runtime".into());
    }
    let ResumeConfig { seed, cases } = config;
    println!("crash_and_resume: seed {seed} ({cases} cases; replay with AFK_SEED={seed})");
    let stats = std::sync::Mutex::new(ResumeStats::default());
    let index = AtomicU32::new(0);
    tokio::task::block_in_place(|| {
        let mut runner = test_runner(seed, cases, Some(16));
        runner
            .run(&input_strategy(), |input| {
                let i = index.fetch_add(1, Ordering::Relaxed);
                let mut s = ResumeStats::default();
                let res = handle.block_on(one_case(store.clone(), &input, i, &mut s));
                let mut all = stats
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *all = merge(&all, &s);
                res.map_err(TestCaseError::fail)
            })
            .map_err(|e| format!("{e}\n(seed {seed}: replay with AFK_SEED={seed})"))
    })?;
    let mut stats = stats
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    top_up(&store, seed, cases, &mut stats).await?;
    println!("crash_and_resume: {stats:?}");
    Ok(stats)
}

/// Random scripts reach every interesting crash only with high probability (an empty script,
/// an abort or a failing tool can take a case's target away). When the random cases missed
/// one, run a few more cases aimed at it with a script that has it for certain (a batch of two
/// idempotent calls, a crash and no abort), so the coverage the suite requires does not depend
/// on the seed's luck. Deterministic for a seed; bounded.
async fn top_up(
    store: &Arc<dyn Store>,
    seed: u64,
    cases: u32,
    stats: &mut ResumeStats,
) -> CaseResult {
    const ATTEMPTS: u64 = 6;
    let script = Script {
        batches: vec![
            vec![(ToolKind::Add, 2), (ToolKind::Echo, 3)],
            vec![(ToolKind::Add, 5)],
        ],
    };
    // Target index modulo 4 in `first_fault`: 0 mid-batch, 1 replay, 2 pending answer,
    // 3 the first commit (4: a long sequence after a random first crash).
    for target in 0..5u32 {
        let missing = |s: &ResumeStats| match target {
            0 => s.mid_batch == 0,
            1 => s.replayed == 0,
            2 => s.reused_pending == 0,
            3 => s.before_first_commit == 0 || s.first_commit_only == 0,
            _ => s.longest < LONG || s.resume_crashes == 0,
        };
        let mut attempt = 0;
        while missing(stats) && attempt < ATTEMPTS {
            let input = Input {
                script: script.clone(),
                pick: seed.wrapping_add(attempt),
                more: Vec::new(),
                long: vec![0; MOST - 1],
                abort: false,
            };
            // Case indexes past the random ones with the target's residue (`long_case` for
            // target 4).
            let base = cases.div_ceil(8) * 8 + 8 * attempt as u32;
            let i = base
                + match target {
                    // Alternately before and right after the first commit.
                    3 => 3 + 4 * (attempt as u32 % 2),
                    4 => 5,
                    t => t,
                };
            let mut s = ResumeStats::default();
            one_case(store.clone(), &input, i, &mut s)
                .await
                .map_err(|e| format!("{e}\n(top-up case; seed {seed})"))?;
            *stats = merge(stats, &s);
            attempt += 1;
        }
    }
    Ok(())
}

fn merge(a: &ResumeStats, b: &ResumeStats) -> ResumeStats {
    ResumeStats {
        cases: a.cases + 1,
        crashes: a.crashes + b.crashes,
        mid_batch: a.mid_batch + b.mid_batch,
        replayed: a.replayed + b.replayed,
        reused_pending: a.reused_pending + b.reused_pending,
        uncertain: a.uncertain + b.uncertain,
        settled: a.settled + b.settled,
        before_first_commit: a.before_first_commit + b.before_first_commit,
        first_commit_only: a.first_commit_only + b.first_commit_only,
        resume_crashes: a.resume_crashes + b.resume_crashes,
        longest: a.longest.max(b.longest),
    }
}

/// One generated case: the script and the raw choices of the crash plan.
#[derive(Debug, Clone)]
struct Input {
    script: Script,
    pick: u64,
    /// Crash points (commits) of the processes after the first crash, in order: a few for
    /// most cases, ...
    more: Vec<u64>,
    /// ... and 39 to 49 for one case in eight (`long_case`).
    long: Vec<u64>,
    abort: bool,
}

fn input_strategy() -> impl Strategy<Value = Input> {
    let kind = prop_oneof![
        3 => Just(ToolKind::Add),
        2 => Just(ToolKind::Echo),
        1 => Just(ToolKind::Fail),
        1 => Just(ToolKind::Charge),
        1 => Just(ToolKind::Wire),
    ];
    let batch = prop::collection::vec((kind, 1i64..100), 1..=3);
    let script = prop::collection::vec(batch, 0..=3).prop_map(|batches| Script { batches });
    // Mostly a few commits into a process (such a crash costs the run its progress, so a long
    // sequence is applied in full), sometimes further; short or long sequences.
    let point = prop_oneof![3 => 0u64..4, 1 => 0u64..24];
    let more = prop::collection::vec(point.clone(), 0..=2);
    let long = prop::collection::vec(point, (LONG as usize - 1)..MOST);
    (script, any::<u64>(), more, long, prop::bool::weighted(0.2)).prop_map(
        |(script, pick, more, long, abort)| Input {
            script,
            pick,
            more,
            long,
            abort,
        },
    )
}

/// How the next process fails, if it does.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Crash (every later call `Unavailable`) after this many commits.
    CrashAfter(u64),
    /// Panic on this (1-based) `get_many`, aborting the run task.
    AbortAtRead(u64),
}

fn wrap(store: &Arc<dyn Store>, fault: Option<Fault>) -> Arc<FaultStore> {
    let f = Arc::new(FaultStore::from_arc(store.clone()));
    match fault {
        Some(Fault::CrashAfter(k)) => f.crash_after_commits(k, CrashMode::Down),
        Some(Fault::AbortAtRead(n)) => f.panic_on_nth(Op::GetMany, n),
        None => {}
    }
    f
}

/// The crash point of case `i`, aimed by the model run's commit log (see the module docs).
fn first_fault(input: &Input, i: u32, model: &FaultStore, thread: &ThreadId) -> Fault {
    if i % 4 == 3 {
        // Before the first commit, or right after it (alternating with the case index).
        return Fault::CrashAfter(u64::from((i / 4) % 2));
    }
    let reads = model.calls(Op::GetMany);
    if input.abort && reads > 0 {
        return Fault::AbortAtRead(1 + input.pick % reads);
    }
    let commits: Vec<_> = model
        .log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) => Some(c),
            FaultEvent::Claim { .. } => None,
        })
        .collect();
    let effect_status = |c: &afk_core::store::Commit, want: &str| {
        c.puts.iter().any(|(k, v)| {
            k.starts_with("effect:")
                && serde_json::from_slice::<Value>(v).is_ok_and(|row| {
                    let status = row.get("status").and_then(Value::as_str).unwrap_or("done");
                    status == want && (want == "intent" || row.get("success") == Some(&true.into()))
                })
        })
    };
    let pending = |c: &afk_core::store::Commit| {
        let key = format!("checkpoint:{}:latest", c.run);
        c.latest.as_ref().is_some_and(|b| {
            normalize_record(b, thread, &key).is_ok_and(|r| {
                r.snapshot()
                    .is_some_and(|s| s.pending_llm_response.is_some())
            })
        })
    };
    let points: Vec<u64> = commits
        .iter()
        .enumerate()
        .filter(|(_, c)| match i % 4 {
            0 => effect_status(c, "intent"),
            1 => effect_status(c, "done"),
            _ => pending(c),
        })
        .map(|(idx, _)| idx as u64 + 1)
        .collect();
    if points.is_empty() {
        Fault::CrashAfter(input.pick % (commits.len() as u64 + 1))
    } else {
        Fault::CrashAfter(points[(input.pick % points.len() as u64) as usize])
    }
}

/// Whether case `i` gets a long crash sequence (one in eight; long sequences cost a store
/// with ~7 ms requests a few seconds each).
fn long_case(i: u32) -> bool {
    i % 8 == 5
}

async fn one_case(
    store: Arc<dyn Store>,
    input: &Input,
    i: u32,
    stats: &mut ResumeStats,
) -> CaseResult {
    let script = &input.script;
    let run = named_run("run_conf");
    let model = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let model_thread = unique_thread("model");
    let want = essence(&drive(model.clone(), script, &model_thread, &run).await?);
    let faults = crash_plan(input, i, &model, &model_thread);

    let mut case = Resumed {
        store: &store,
        script,
        thread: unique_thread("resume"),
        run: &run,
        calls: Calls::default(),
        mirror: Mirror::default(),
    };
    let (result, crashes) = case.until_done(faults, stats).await?;
    stats.longest = stats.longest.max(crashes);
    let Some(got) = result else {
        return Err(case.ctx(format!("did not finish in {} processes", MOST + 24)));
    };
    ensure!(
        essence(&got) == want,
        "{}",
        case.ctx(format!(
            "result after {crashes} crashes {}\n  differs from the uncrashed {want}",
            essence(&got)
        ))
    );
    let stored = stored_as_acknowledged(&*store, &case.thread, &case.mirror)
        .await
        .map_err(|e| case.ctx(e))?;
    terminal_resume_keeps(&store, script, &case.thread, &run, &want, stored)
        .await
        .map_err(|e| case.ctx(e))
}

/// The faults of case `i`'s processes, in order: the first crash, aimed by the model run,
/// then the generated crash points of the later processes (the long sequence in a
/// `long_case`).
fn crash_plan(
    input: &Input,
    i: u32,
    model: &FaultStore,
    model_thread: &ThreadId,
) -> VecDeque<Fault> {
    std::iter::once(first_fault(input, i, model, model_thread))
        .chain(
            if long_case(i) {
                &input.long
            } else {
                &input.more
            }
            .iter()
            .map(|&k| Fault::CrashAfter(k)),
        )
        .collect()
}

/// A case's run on the store under test, continued by new processes under the same run id,
/// and what those processes left behind.
struct Resumed<'a> {
    store: &'a Arc<dyn Store>,
    script: &'a Script,
    thread: ThreadId,
    run: &'a RunId,
    /// How often each tool call ran, across all processes.
    calls: Calls,
    /// What the store under test acknowledged, across all processes.
    mirror: Mirror,
}

/// What one process found and did, as the checks after it need.
struct Observed {
    /// What the run had stored before the process.
    before: Durable,
    /// The tool calls the process ran.
    ran: BTreeMap<String, u64>,
    /// The model answers the process asked for.
    asked: Vec<usize>,
}

impl Resumed<'_> {
    /// A failure message naming the case's script.
    fn ctx(&self, what: String) -> String {
        format!("script {:?}: {what}", self.script)
    }

    /// Run processes, each failing as the next of `faults` says (an approval after a pause
    /// goes on with the paused process's fault), until the run completes: its result (`None`
    /// when it did not finish) and the crashes it took.
    async fn until_done(
        &mut self,
        mut faults: VecDeque<Fault>,
        stats: &mut ResumeStats,
    ) -> Result<(Option<Box<AgentResult>>, u32), String> {
        let mut start = Start::Fresh;
        let mut fault = wrap(self.store, faults.pop_front());
        let mut result = None;
        let mut crashes = 0;
        // Every crash costs one process; pauses and settlements a few more.
        for _ in 0..MOST + 24 {
            let (a, seen) = self.process(&fault, &start).await?;
            if start != Start::Fresh {
                self.check_no_rework(&start, &a, &seen, stats)?;
            }
            self.check_at_most_once()?;
            let crashed = fault.crashed()
                || matches!(&a.result, Err(e) if e.kind() == ErrorKind::Unexpected
                    && e.message().contains("panicked"));
            match a.result {
                Ok(Outcome::Completed(r)) => {
                    result = Some(r);
                    break;
                }
                Ok(Outcome::Paused { .. }) => start = Start::Approve,
                Ok(other) => return Err(self.ctx(format!("the run ended {other:?}"))),
                Err(_) if crashed => {
                    crashes += 1;
                    start = self.after_crash(&start, stats)?;
                }
                Err(e) if e.kind() == ErrorKind::EffectUncertain => {
                    start = self.settle(&e, &seen, stats)?;
                }
                Err(e) => return Err(self.ctx(format!("{start:?} failed: {e}"))),
            }
            if !matches!(start, Start::Approve) || crashed {
                fault = wrap(self.store, faults.pop_front());
            }
        }
        Ok((result, crashes))
    }

    /// Run one process started as `start` on the store under test through `fault`, and
    /// mirror the commits it got accepted.
    async fn process(
        &mut self,
        fault: &Arc<FaultStore>,
        start: &Start,
    ) -> Result<(Attempt, Observed), String> {
        let before =
            durable_in(&self.mirror.keys, &self.thread, self.run).map_err(|e| self.ctx(e))?;
        let ran_before = self.calls.snapshot();
        let rig = Rig::new(self.script, &self.calls, Duration::ZERO)?;
        let runner = crate::agents::runner(fault.clone());
        let a = attempt(&runner, &rig.agent, &self.thread, self.run, start).await;
        self.mirror.apply(&fault.log());
        let ran = self.calls.since(&ran_before);
        let asked = rig.llm.asked();
        Ok((a, Observed { before, ran, asked }))
    }

    /// A process continuing the run (`start` is not fresh) ran no call whose successful
    /// result was stored before it and asked for no model answer stored before it; counts
    /// the stored pending answers it used and the results it replayed.
    fn check_no_rework(
        &self,
        start: &Start,
        a: &Attempt,
        seen: &Observed,
        stats: &mut ResumeStats,
    ) -> CaseResult {
        let Observed { before, ran, asked } = seen;
        for id in &before.results {
            ensure!(
                !ran.contains_key(id),
                "{}",
                self.ctx(format!("call {id} had a stored result and ran again"))
            );
        }
        for k in asked {
            ensure!(
                !before.answers.contains(k),
                "{}",
                self.ctx(format!(
                    "model answer #{k} was stored and was requested again by {start:?} \
                     (stored before: {before:?}; events {:?})",
                    a.events
                ))
            );
        }
        if let Some(step) = before.pending_step
            && a.answered(step)
        {
            stats.reused_pending += 1;
        }
        if a.replayed() {
            stats.replayed += 1;
        }
        Ok(())
    }

    /// No at-most-once call ran more than once, in all processes so far.
    fn check_at_most_once(&self) -> CaseResult {
        for (id, n) in self.calls.snapshot() {
            let charge = self.script.is_charge(&id);
            ensure!(
                !charge || n <= 1,
                "{}",
                self.ctx(format!("at-most-once call {id} ran {n} times"))
            );
        }
        Ok(())
    }

    /// Count a crash of a process started as `start`, and how the next process continues.
    fn after_crash(&self, start: &Start, stats: &mut ResumeStats) -> Result<Start, String> {
        stats.crashes += 1;
        if *start != Start::Fresh {
            stats.resume_crashes += 1;
        }
        let after =
            durable_in(&self.mirror.keys, &self.thread, self.run).map_err(|e| self.ctx(e))?;
        if !after.intents.is_empty() {
            stats.mid_batch += 1;
        }
        // The SAME run id goes on: resumed from whatever it committed, or, when it
        // committed nothing, started again.
        Ok(if self.mirror.exists(self.run) {
            if !self.mirror.has_snapshot(self.run, 1) {
                stats.first_commit_only += 1;
            }
            Start::Resume
        } else {
            stats.before_first_commit += 1;
            Start::Fresh
        })
    }

    /// A process stopped with `EffectUncertain` (`e`) only for a stored at-most-once intent,
    /// having run and asked nothing; the operator settles the call from the tools' ledger.
    fn settle(
        &self,
        e: &afk_core::Error,
        seen: &Observed,
        stats: &mut ResumeStats,
    ) -> Result<Start, String> {
        let Observed { before, ran, asked } = seen;
        ensure!(
            self.script.has_charge() && ran.is_empty() && asked.is_empty(),
            "{}",
            self.ctx(format!(
                "EffectUncertain ({e}) but ran {ran:?} and asked {asked:?}"
            ))
        );
        let call = e
            .key()
            .and_then(|k| k.rsplit(':').next())
            .unwrap_or_default()
            .to_owned();
        ensure!(
            self.script.is_charge(&call) && before.intents.contains(&call),
            "{}",
            self.ctx(format!(
                "EffectUncertain ({e}) without a stored at-most-once intent for its \
                 call: {before:?}"
            ))
        );
        stats.uncertain += 1;
        stats.settled += 1;
        // The operator reads the ledger: did the call run?
        let output = if self.calls.snapshot().get(&call).copied().unwrap_or(0) > 0 {
            self.script.charge_output(&call)
        } else {
            None
        };
        Ok(Start::Settle { call, output })
    }
}

/// Every key of the thread but the fences is what the accepted commits wrote, byte for byte.
/// Returns those keys.
async fn stored_as_acknowledged(
    store: &dyn Store,
    thread: &ThreadId,
    mirror: &Mirror,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, String> {
    let mut stored = dump(store, thread).await?;
    stored.retain(|k, _| !k.starts_with("run:"));
    let differ: Vec<&String> = stored
        .iter()
        .filter(|(k, v)| mirror.keys.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .chain(mirror.keys.keys().filter(|k| !stored.contains_key(*k)))
        .collect();
    ensure!(
        differ.is_empty(),
        "the store does not hold what it acknowledged; keys differing: {differ:?}"
    );
    Ok(stored)
}

/// Resuming a finished run returns its result and changes nothing but the fence.
pub(crate) async fn terminal_resume_does_nothing(
    store: &Arc<dyn Store>,
    script: &Script,
    thread: &ThreadId,
    run: &RunId,
    want: &Value,
) -> CaseResult {
    let mut before = dump(&**store, thread).await?;
    before.remove(&afk_core::store::run_key(run));
    terminal_resume_keeps(store, script, thread, run, want, before).await
}

/// [`terminal_resume_does_nothing`] given what the thread held before (without the run's
/// fence).
async fn terminal_resume_keeps(
    store: &Arc<dyn Store>,
    script: &Script,
    thread: &ThreadId,
    run: &RunId,
    want: &Value,
    before: std::collections::BTreeMap<String, Vec<u8>>,
) -> CaseResult {
    let fence = afk_core::store::run_key(run);
    let without_fence = |mut m: std::collections::BTreeMap<String, Vec<u8>>| {
        m.remove(&fence);
        m
    };
    let calls = Calls::default();
    let rig = Rig::new(script, &calls, Duration::ZERO)?;
    let watch = wrap(store, None);
    let a = attempt(
        &crate::agents::runner(watch.clone()),
        &rig.agent,
        thread,
        run,
        &Start::Resume,
    )
    .await;
    let Ok(Outcome::Completed(r)) = &a.result else {
        return Err(format!("resuming the finished run gave {:?}", a.result));
    };
    ensure!(
        essence(r) == *want,
        "resuming the finished run gave another result {}",
        essence(r)
    );
    let commits = watch.calls(Op::Commit) + watch.calls(Op::CommitBatch);
    ensure!(
        rig.llm.calls() == 0 && calls.snapshot().is_empty() && commits == 0 && !a.finished(),
        "resuming the finished run made {} model calls, ran {:?}, made {commits} commits",
        rig.llm.calls(),
        calls.snapshot()
    );
    let after = without_fence(dump(&**store, thread).await?);
    ensure!(
        before == after,
        "resuming the finished run changed keys: {:?}",
        after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, _)| k)
            .chain(before.keys().filter(|k| !after.contains_key(*k)))
            .collect::<Vec<_>>()
    );
    Ok(())
}
