//! The concurrency level: racing resumers of one run.
//!
//! A three-step run (parallel batches, tools that take 20 ms) is crashed right after its first
//! model answer is stored, then [`RESUMERS`] runners (separate [`Runner`](afk_core::runner::Runner)s
//! on the same store, each with its own model and tools) resume it at once. Each resumer
//! claims the run first, so the claims order them. What must hold:
//!
//! * every resumer ends with either the finished run's result or an error of kind `Fenced`;
//! * exactly one resumer finishes the run (writes its terminal record, emits `Finished`),
//!   and its result is the uncrashed run's;
//! * a resumer that ends with a result without finishing (it claimed after the run finished)
//!   returns that same result with no model or tool call;
//! * resuming the finished run afterwards does nothing.
//!
//! Three rounds; over them at least one resumer must have been fenced, so the case proves the
//! resumers really overlapped.
//!
//! Racing starters of one run id ([`racing_starters_run_it_once`]): a start checks that the run
//! does not exist, then claims it, and another runner can start the run in between. The
//! runner settles it under its claim, with a `get` of the latest pointer, so the case needs
//! of the store what a resume needs too: a read after a claim sees every commit made before
//! the claim (no stale cache, no lagging replica), and the claim fences the runner that made
//! them.

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::Outcome;
use afk_core::store::{CrashMode, FaultEvent, FaultStore, Hold, Op, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use serde_json::Value;

use crate::agents::{Calls, Rig, Script, Start, ToolKind, attempt, drive, essence};
use crate::cases::resume::terminal_resume_does_nothing;
use crate::support::{CaseResult, ensure, fail, named_run, show_result, unique_thread};

/// How many runners resume the run at once.
pub const RESUMERS: usize = 4;

fn script() -> Script {
    use ToolKind::{Add, Echo};
    Script {
        batches: vec![
            vec![(Add, 1), (Echo, 2)],
            vec![(Add, 3), (Echo, 4)],
            vec![(Echo, 5)],
        ],
    }
}

/// Racing resumers of one run: exactly one finishes, the others are fenced or return the
/// finished result (see the module docs).
pub async fn racing_resumers_one_finishes(store: Arc<dyn Store>) -> CaseResult {
    let script = script();
    let run = named_run("run_race");
    let model = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let want = essence(&drive(model.clone(), &script, &unique_thread("model"), &run).await?);
    let crash_at = crash_point(&model)?;

    let mut fenced_total = 0;
    for round in 0..3 {
        let race = Round {
            store: &store,
            script: &script,
            run: &run,
            thread: unique_thread("race"),
            round,
        };
        race.crash_start(crash_at).await?;
        fenced_total += race.resume_at_once(&want).await?;
        terminal_resume_does_nothing(&store, &script, &race.thread, &run, &want)
            .await
            .map_err(|e| fail!("round {round}: {e}"))?;
    }
    ensure!(
        fenced_total > 0,
        "no resumer was fenced in three rounds of {RESUMERS}: they never overlapped"
    );
    Ok(())
}

/// How many commits of the model run the crashed start makes.
fn crash_point(model: &FaultStore) -> Result<u64, String> {
    // Crash right after the first snapshot that holds a model answer: commits of the log up
    // to and including the first commit with a `runtime_state` pointer after a `post_llm`.
    let commits: Vec<_> = model
        .log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) => Some(c),
            FaultEvent::Claim { .. } => None,
        })
        .collect();
    let post_llm = commits
        .iter()
        .position(|c| c.puts.iter().any(|(k, _)| k.ends_with(":post_llm")))
        .ok_or("the model run wrote no post_llm record")?;
    Ok(post_llm as u64 + 2)
}

/// One round of the racing resumers, on a thread of its own.
struct Round<'a> {
    store: &'a Arc<dyn Store>,
    script: &'a Script,
    run: &'a RunId,
    thread: ThreadId,
    round: u32,
}

/// A runner resuming the run in a task of its own, with its own model and tools.
struct Resumer {
    rig: Rig,
    calls: Calls,
    task: tokio::task::JoinHandle<crate::agents::Attempt>,
}

/// How a racing resumer may end.
enum Ended {
    /// With the result, having finished the run.
    Finished,
    /// With the result the run already had.
    Returned,
    Fenced,
}

impl Round<'_> {
    /// Start the run and crash it after `crash_at` commits.
    async fn crash_start(&self, crash_at: u64) -> CaseResult {
        let round = self.round;
        let first = Arc::new(FaultStore::from_arc(self.store.clone()));
        first.crash_after_commits(crash_at, CrashMode::Down);
        let rig = Rig::new(self.script, &Calls::default(), Duration::ZERO)?;
        let a = attempt(
            &crate::agents::runner(first),
            &rig.agent,
            &self.thread,
            self.run,
            &Start::Fresh,
        )
        .await;
        ensure!(
            a.result.is_err(),
            "round {round}: the run did not crash after {crash_at} commits"
        );
        Ok(())
    }

    /// [`RESUMERS`] runners resume the crashed run at once and exactly one finishes it, with
    /// the uncrashed result `want`. Returns how many were fenced.
    async fn resume_at_once(&self, want: &Value) -> Result<u32, String> {
        let round = self.round;
        let mut resumers = Vec::with_capacity(RESUMERS);
        for _ in 0..RESUMERS {
            resumers.push(self.spawn_resumer()?);
        }
        let (mut finished, mut fenced) = (0, 0);
        for (i, resumer) in resumers.iter_mut().enumerate() {
            let a = (&mut resumer.task)
                .await
                .map_err(|e| fail!("round {round}: resumer {i} task failed: {e}"))?;
            match self.ended(i, &a, resumer, want)? {
                Ended::Finished => finished += 1,
                Ended::Returned => {}
                Ended::Fenced => fenced += 1,
            }
        }
        ensure!(
            finished == 1,
            "round {round}: {finished} of {RESUMERS} racing resumers finished the run, want \
             exactly one"
        );
        Ok(fenced)
    }

    fn spawn_resumer(&self) -> Result<Resumer, String> {
        let calls = Calls::default();
        let rig = Rig::new(self.script, &calls, Duration::from_millis(20))?;
        let runner = crate::agents::runner(self.store.clone());
        let (agent, thread, run) = (rig.agent.clone(), self.thread.clone(), self.run.clone());
        let task =
            tokio::spawn(
                async move { attempt(&runner, &agent, &thread, &run, &Start::Resume).await },
            );
        Ok(Resumer { rig, calls, task })
    }

    /// How resumer `i` ended (`a`): with the uncrashed result `want` (having finished the run,
    /// or with no model or tool call) or fenced; `Err` for anything else.
    fn ended(
        &self,
        i: usize,
        a: &crate::agents::Attempt,
        resumer: &Resumer,
        want: &Value,
    ) -> Result<Ended, String> {
        let round = self.round;
        let Resumer { rig, calls, .. } = resumer;
        match &a.result {
            Ok(Outcome::Completed(r)) => {
                ensure!(
                    essence(r) == *want,
                    "round {round}: resumer {i} returned {}, the uncrashed run {want}",
                    essence(r)
                );
                if a.finished() {
                    Ok(Ended::Finished)
                } else {
                    ensure!(
                        rig.llm.calls() == 0 && calls.snapshot().is_empty(),
                        "round {round}: resumer {i} returned the stored result but made \
                         {} model calls and ran {:?}",
                        rig.llm.calls(),
                        calls.snapshot()
                    );
                    Ok(Ended::Returned)
                }
            }
            Err(e) if e.kind() == ErrorKind::Fenced => Ok(Ended::Fenced),
            other => Err(fail!(
                "round {round}: resumer {i} ended with {other:?}, want the result or \
                 Fenced"
            )),
        }
    }
}

/// The script of the racing starters: an at-most-once `charge` alone (so the order of its
/// commits does not depend on how parallel calls interleave), then an `add` and an `echo`.
fn start_script() -> Script {
    use ToolKind::{Add, Charge, Echo};
    Script {
        batches: vec![vec![(Charge, 7)], vec![(Add, 1), (Echo, 2)]],
    }
}

/// A run's outcome for messages: `Ok(completed: <text>)`, `Ok(paused)` or `Err(<kind>: …)`.
fn show_outcome(r: &afk_core::Result<Outcome>) -> String {
    show_result(r, |o| match o {
        Outcome::Completed(r) => format!("{}: {}", r.state, r.final_text),
        Outcome::Paused { .. } => "paused".to_owned(),
        other => format!("{other:?}"),
    })
}

/// A runner starting the run in a task of its own, through a store wrapper that holds one of
/// its calls.
struct HeldStarter {
    hold: Hold,
    calls: Calls,
    rig: Rig,
    task: tokio::task::JoinHandle<crate::agents::Attempt>,
}

impl HeldStarter {
    fn spawn(
        store: &Arc<dyn Store>,
        script: &Script,
        thread: &ThreadId,
        run: &RunId,
        op: Op,
        n: u64,
    ) -> Result<HeldStarter, String> {
        let held = Arc::new(FaultStore::from_arc(store.clone()));
        let hold = held.hold_nth(op, n);
        let calls = Calls::default();
        let rig = Rig::new(script, &calls, Duration::ZERO)?;
        let runner = crate::agents::runner(held);
        let (agent, thread, run) = (rig.agent.clone(), thread.clone(), run.clone());
        let task =
            tokio::spawn(
                async move { attempt(&runner, &agent, &thread, &run, &Start::Fresh).await },
            );
        Ok(HeldStarter {
            hold,
            calls,
            rig,
            task,
        })
    }
}

/// How long a case waits for a held call to arrive before it fails (instead of hanging).
const HOLD_WAIT: Duration = Duration::from_secs(60);

/// Racing starters of one run id: runner B checks that the run does not exist and is held
/// right before its claim; runner A starts the run, runs the at-most-once `charge` and is
/// held right before committing its result. Then B claims: it must find A's run and end with
/// `Conflict` having run nothing (no model call, no tool), and A, released, must be `Fenced`.
/// The charge ran once, so a resume stops with `EffectUncertain`; settled as ran, the run
/// ends with the uncrashed run's result.
pub async fn racing_starters_run_it_once(store: Arc<dyn Store>) -> CaseResult {
    let script = start_script();
    let run = named_run("run_start_race");
    let charge = Script::call_id(0, 0);
    let model = Arc::new(FaultStore::from_arc(
        Arc::new(MemoryStore::new()) as Arc<dyn Store>
    ));
    let want = essence(&drive(model.clone(), &script, &unique_thread("model"), &run).await?);
    let result_commit = charge_result_commit(&model, &charge)?;

    let thread = unique_thread("start_race");
    let b = HeldStarter::spawn(&store, &script, &thread, &run, Op::Claim, 1)?;
    tokio::time::timeout(HOLD_WAIT, b.hold.reached())
        .await
        .map_err(|_| fail!("runner B never reached its claim"))?;
    let a = HeldStarter::spawn(&store, &script, &thread, &run, Op::Commit, result_commit)?;
    tokio::time::timeout(HOLD_WAIT, a.hold.reached())
        .await
        .map_err(|_| fail!("runner A never reached the commit of its charge's result"))?;
    let (a_calls, b_calls) = (a.calls.clone(), b.calls.clone());
    ensure!(
        a_calls.snapshot().get(&charge) == Some(&1),
        "runner A is held before its charge's result, but ran {:?}",
        a_calls.snapshot()
    );

    b_conflicts(b).await?;
    a_is_fenced(a).await?;
    let calls = Calls::default();
    let after = AfterRace {
        store: &store,
        script: &script,
        thread: &thread,
        run: &run,
        charge: &charge,
    };
    after.resume_and_settle(&calls, &want).await?;
    let total: u64 = [&a_calls, &b_calls, &calls]
        .iter()
        .filter_map(|c| c.snapshot().get(&charge).copied())
        .sum();
    ensure!(total == 1, "the charge ran {total} times, want once");
    terminal_resume_does_nothing(&store, &script, &thread, &run, &want).await
}

/// The commit of the model run that holds the result of the `charge` call (1-based).
fn charge_result_commit(model: &FaultStore, charge: &str) -> Result<u64, String> {
    // A's commit that holds the charge's result: the second one writing its effect row (the
    // intent is the first). The runner commits synchronously, so A makes the same commits.
    let effect = format!(":{charge}");
    model
        .log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) => Some(c),
            FaultEvent::Claim { .. } => None,
        })
        .enumerate()
        .filter(|(_, c)| {
            c.puts
                .iter()
                .any(|(k, _)| k.starts_with("effect:") && k.ends_with(&effect))
        })
        .nth(1)
        .map(|(i, _)| i as u64 + 1)
        .ok_or_else(|| "the model run wrote no result row for its charge".to_owned())
}

/// Release runner B, held before its claim: it ends with `Conflict`, having run nothing.
async fn b_conflicts(b: HeldStarter) -> CaseResult {
    b.hold.release();
    let llm = b.rig.llm.clone();
    let b_calls = b.calls;
    let b = b
        .task
        .await
        .map_err(|e| fail!("runner B's task failed: {e}"))?;
    let b_llm_calls = llm.calls();
    match &b.result {
        Err(e) if e.kind() == ErrorKind::Conflict => {}
        other => {
            return Err(fail!(
                "runner B claimed after runner A had started the run and charged, and ended \
                 with {}, want Conflict (a read after its claim must see A's commits)",
                show_outcome(other)
            ));
        }
    }
    ensure!(
        b_llm_calls == 0 && b_calls.snapshot().is_empty(),
        "runner B lost the race but made {b_llm_calls} model calls and ran {:?}",
        b_calls.snapshot()
    );
    Ok(())
}

/// Release runner A, held before committing its charge's result after B's claim: it ends
/// `Fenced`.
async fn a_is_fenced(a: HeldStarter) -> CaseResult {
    a.hold.release();
    let a = a
        .task
        .await
        .map_err(|e| fail!("runner A's task failed: {e}"))?;
    match &a.result {
        Err(e) if e.kind() == ErrorKind::Fenced => Ok(()),
        other => Err(fail!(
            "runner A committed after runner B's claim and ended with {}, want Fenced",
            show_outcome(other)
        )),
    }
}

/// The raced run, once both starters ended.
struct AfterRace<'a> {
    store: &'a Arc<dyn Store>,
    script: &'a Script,
    thread: &'a ThreadId,
    run: &'a RunId,
    charge: &'a str,
}

impl AfterRace<'_> {
    /// A resume stops with `EffectUncertain` (the charge ran, its result was fenced); settled
    /// as ran, the run ends with the uncrashed result `want`. The tools count their calls in
    /// `calls`.
    async fn resume_and_settle(&self, calls: &Calls, want: &Value) -> CaseResult {
        let (thread, run) = (self.thread, self.run);
        let rig = Rig::new(self.script, calls, Duration::ZERO)?;
        let runner = crate::agents::runner(self.store.clone());
        let resumed = attempt(&runner, &rig.agent, thread, run, &Start::Resume).await;
        match &resumed.result {
            Err(e) if e.kind() == ErrorKind::EffectUncertain => {}
            other => {
                return Err(fail!(
                    "a resume after the race ended with {}, want EffectUncertain (the charge \
                     ran; its result was fenced)",
                    show_outcome(other)
                ));
            }
        }
        let output: Option<Value> = self.script.charge_output(self.charge);
        let settle = Start::Settle {
            call: self.charge.to_owned(),
            output,
        };
        let settled = attempt(&runner, &rig.agent, thread, run, &settle).await;
        match &settled.result {
            Ok(Outcome::Completed(r)) => ensure!(
                essence(r) == *want,
                "the settled run returned {}, the uncrashed run {want}",
                essence(r)
            ),
            other => {
                return Err(fail!(
                    "the settled resume ended with {}",
                    show_outcome(other)
                ));
            }
        }
        Ok(())
    }
}
