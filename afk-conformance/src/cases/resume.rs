//! The resume level: random scripted agents crashed at random points and resumed until done.
//!
//! Each case generates (with proptest) a script of 1 to 4 model turns whose tool calls include
//! parallel batches, failing tools, idempotent and at-most-once tools and a call that pauses
//! for approval. It first runs uncrashed on a [`MemoryStore`], the model. Then it runs on the
//! store under test wrapped in a [`FaultStore`] that crashes at a chosen commit (or aborts the
//! run task with a panic at a chosen journal read), and is resumed by new runners on the same
//! store, approving every pause, until done; sometimes a resume crashes too. What must hold:
//!
//! * the final result is the model's (text, state, usage, counters, tool records, session);
//! * no tool call whose successful result was in the store before a resume runs again in it;
//! * no model answer the store held before a resume is requested again in it;
//! * an at-most-once call runs at most once; a resume stops with `EffectUncertain` only when
//!   such a call's intent is stored without a result, and then runs and asks nothing;
//! * resuming the finished run returns the same result with no model or tool call and no
//!   commit: every key but the run's fence `run:<run>` (which the resumer's claim bumps) is
//!   byte-for-byte unchanged.
//!
//! Crash points cycle through four targets taken from the model run's commit log: right after
//! an effect intent (a crash mid-batch), right after a successful effect result (its replay),
//! right after a snapshot holding a pending model answer (its reuse), anywhere. The case
//! counts how often a crash landed mid-batch, a resume replayed an effect and a resume reused a
//! pending answer, and with 8 cases or more requires each count to be positive, so a suite
//! that passes has exercised all three. Random scripts reach each kind only with high
//! probability, so when they missed one, a few extra cases aimed at it with a script that
//! certainly has it are run (`top_up`), keeping the requirement independent of the seed.
//!
//! Seeded: the seed is printed, `AFK_CONFORMANCE_SEED=<seed>` replays it; `PROPTEST_CASES`
//! sets the number of cases (default 16: each case makes a few hundred calls to the store).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use afk_core::normalize::normalize_record;
use afk_core::runner::Outcome;
use afk_core::store::{CrashMode, FaultEvent, Op};
use afk_core::{ErrorKind, FaultStore, MemoryStore, RunId, Store, ThreadId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;

use crate::agents::{Calls, Rig, Script, Start, ToolKind, attempt, drive, dump, durable, essence};
use crate::support::{
    CaseResult, cases_from_env, ensure, named_run, seed_from_env, test_runner, unique_thread,
};

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
    /// Runs restarted because they crashed before their first snapshot.
    pub restarted: u32,
}

impl ResumeStats {
    /// `Err` unless a crash landed mid-batch, an effect was replayed and a pending answer was
    /// reused at least once.
    pub fn require_coverage(&self) -> CaseResult {
        ensure!(
            self.mid_batch > 0 && self.replayed > 0 && self.reused_pending > 0,
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
    println!(
        "crash_and_resume: seed {seed} ({cases} cases; replay with AFK_CONFORMANCE_SEED={seed})"
    );
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
            .map_err(|e| format!("{e}\n(seed {seed}: replay with AFK_CONFORMANCE_SEED={seed})"))
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
    // Target index modulo 4 in `first_fault`: 0 mid-batch, 1 replay, 2 pending answer.
    for target in 0..3u32 {
        let missing = |s: &ResumeStats| match target {
            0 => s.mid_batch == 0,
            1 => s.replayed == 0,
            _ => s.reused_pending == 0,
        };
        let mut attempt = 0;
        while missing(stats) && attempt < ATTEMPTS {
            let input = Input {
                script: script.clone(),
                pick: seed.wrapping_add(attempt),
                second: None,
                abort: false,
            };
            let i = cases.div_ceil(4) * 4 + 4 * attempt as u32 + target;
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
        restarted: a.restarted + b.restarted,
    }
}

/// One generated case: the script and the raw choices of the crash plan.
#[derive(Debug, Clone)]
struct Input {
    script: Script,
    pick: u64,
    second: Option<u64>,
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
    (
        script,
        any::<u64>(),
        prop::option::weighted(0.3, any::<u64>()),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(script, pick, second, abort)| Input {
            script,
            pick,
            second,
            abort,
        })
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
    let effect_status = |c: &afk_core::Commit, want: &str| {
        c.puts.iter().any(|(k, v)| {
            k.starts_with("effect:")
                && serde_json::from_slice::<Value>(v).is_ok_and(|row| {
                    let status = row.get("status").and_then(Value::as_str).unwrap_or("done");
                    status == want && (want == "intent" || row.get("success") == Some(&true.into()))
                })
        })
    };
    let pending = |c: &afk_core::Commit| {
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
            2 => pending(c),
            _ => false,
        })
        .map(|(idx, _)| idx as u64 + 1)
        .collect();
    if points.is_empty() {
        Fault::CrashAfter(input.pick % (commits.len() as u64 + 1))
    } else {
        Fault::CrashAfter(points[(input.pick % points.len() as u64) as usize])
    }
}

async fn one_case(
    store: Arc<dyn Store>,
    input: &Input,
    i: u32,
    stats: &mut ResumeStats,
) -> CaseResult {
    let script = &input.script;
    let mut run = named_run("run_conf");
    let model = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let model_thread = unique_thread("model");
    let want = essence(&drive(model.clone(), script, &model_thread, &run).await?);
    let mut faults = vec![Some(first_fault(input, i, &model, &model_thread))];
    if let Some(j) = input.second {
        faults.push(Some(Fault::CrashAfter(
            1 + j % (model.persisted_commits() / 2).max(1),
        )));
    }
    faults.reverse();

    let thread = unique_thread("resume");
    let calls = Calls::default();
    let mut start = Start::Fresh;
    let mut fault = wrap(&store, faults.pop().flatten());
    let ctx = |what: String| format!("script {script:?}: {what}");
    let mut result = None;
    for _ in 0..16 {
        let before = durable(&*store, &thread, &run).await.map_err(ctx)?;
        let ran_before = calls.snapshot();
        let rig = Rig::new(script, &calls, Duration::ZERO)?;
        let runner = crate::agents::runner(fault.clone());
        let a = attempt(&runner, &rig.agent, &thread, &run, &start).await;
        let ran = calls.since(&ran_before);
        let asked = rig.llm.asked();
        if start != Start::Fresh {
            for id in &before.results {
                ensure!(
                    !ran.contains_key(id),
                    "{}",
                    ctx(format!("call {id} had a stored result and ran again"))
                );
            }
            for k in &asked {
                ensure!(
                    !before.answers.contains(k),
                    "{}",
                    ctx(format!(
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
        }
        for (id, n) in calls.snapshot() {
            let charge = script.is_charge(&id);
            ensure!(
                !charge || n <= 1,
                "{}",
                ctx(format!("at-most-once call {id} ran {n} times"))
            );
        }
        let crashed = fault.crashed()
            || matches!(&a.result, Err(e) if e.kind() == ErrorKind::Unexpected
                && e.message().contains("panicked"));
        match a.result {
            Ok(Outcome::Completed(r)) => {
                result = Some(r);
                break;
            }
            Ok(Outcome::Paused { .. }) => start = Start::Approve,
            Err(_) if crashed => {
                stats.crashes += 1;
                let after = durable(&*store, &thread, &run).await.map_err(ctx)?;
                if !after.intents.is_empty() {
                    stats.mid_batch += 1;
                }
                fault = wrap(&store, faults.pop().flatten());
                start = Start::Resume;
            }
            Err(e) if e.kind() == ErrorKind::EffectUncertain => {
                ensure!(
                    script.has_charge() && ran.is_empty() && asked.is_empty(),
                    "{}",
                    ctx(format!(
                        "EffectUncertain ({e}) but ran {ran:?} and asked {asked:?}"
                    ))
                );
                let charged = before.intents.iter().any(|id| script.is_charge(id));
                ensure!(
                    charged,
                    "{}",
                    ctx(format!(
                        "EffectUncertain ({e}) without a stored at-most-once intent: {before:?}"
                    ))
                );
                stats.uncertain += 1;
                return Ok(());
            }
            Err(e)
                if start == Start::Resume
                    && matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Corrupt)
                    && before.answers.is_empty()
                    && before.pending_step.is_none()
                    && !has_snapshot(&*store, &thread, &run).await? =>
            {
                // Crashed before the first snapshot: the input was never durable, nothing may
                // run, and the caller starts the run again, under a new run id (a run id that
                // has records is refused for a fresh run).
                ensure!(
                    ran.is_empty() && asked.is_empty(),
                    "{}",
                    ctx(format!(
                        "resume without a snapshot ({e}) ran {ran:?}, asked {asked:?}"
                    ))
                );
                stats.restarted += 1;
                run = named_run(&format!("run_conf_{}", stats.restarted));
                start = Start::Fresh;
            }
            Err(e) => return Err(ctx(format!("{start:?} failed: {e}"))),
        }
    }
    let Some(got) = result else {
        return Err(ctx("did not finish in 16 processes".into()));
    };
    ensure!(
        essence(&got) == want,
        "{}",
        ctx(format!(
            "result after crashes {}\n  differs from the uncrashed {want}",
            essence(&got)
        ))
    );
    terminal_resume_does_nothing(&store, script, &thread, &run, &want)
        .await
        .map_err(ctx)
}

async fn has_snapshot(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<bool, String> {
    let suffix = format!(":{}", afk_core::schema::Phase::RuntimeState.as_str());
    Ok(dump(store, thread)
        .await?
        .keys()
        .any(|k| k.starts_with(&format!("checkpoint:{run}:")) && k.ends_with(&suffix)))
}

/// Resuming a finished run returns its result and changes nothing but the fence.
pub(crate) async fn terminal_resume_does_nothing(
    store: &Arc<dyn Store>,
    script: &Script,
    thread: &ThreadId,
    run: &RunId,
    want: &Value,
) -> CaseResult {
    let fence = afk_core::store::run_key(run);
    let without_fence = |mut m: std::collections::BTreeMap<String, Vec<u8>>| {
        m.remove(&fence);
        m
    };
    let before = without_fence(dump(&**store, thread).await?);
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
