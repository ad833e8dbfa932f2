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

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::Outcome;
use afk_core::store::{CrashMode, FaultEvent, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore};

use crate::agents::{Calls, Rig, Script, Start, ToolKind, attempt, drive, essence};
use crate::cases::resume::terminal_resume_does_nothing;
use crate::support::{CaseResult, ensure, fail, named_run, unique_thread};

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
    let crash_at = post_llm as u64 + 2;

    let mut fenced_total = 0;
    for round in 0..3 {
        let thread = unique_thread("race");
        let first = Arc::new(FaultStore::from_arc(store.clone()));
        first.crash_after_commits(crash_at, CrashMode::Down);
        let rig = Rig::new(&script, &Calls::default(), Duration::ZERO)?;
        let a = attempt(
            &crate::agents::runner(first),
            &rig.agent,
            &thread,
            &run,
            &Start::Fresh,
        )
        .await;
        ensure!(
            a.result.is_err(),
            "round {round}: the run did not crash after {crash_at} commits"
        );

        let mut rigs = Vec::with_capacity(RESUMERS);
        let mut pending = Vec::with_capacity(RESUMERS);
        for _ in 0..RESUMERS {
            let calls = Calls::default();
            let rig = Rig::new(&script, &calls, Duration::from_millis(20))?;
            let runner = crate::agents::runner(store.clone());
            let (agent, thread, run) = (rig.agent.clone(), thread.clone(), run.clone());
            pending.push(tokio::spawn(async move {
                attempt(&runner, &agent, &thread, &run, &Start::Resume).await
            }));
            rigs.push((rig, calls));
        }
        let mut finished = 0;
        for (i, (join, (rig, calls))) in pending.into_iter().zip(&rigs).enumerate() {
            let a = join
                .await
                .map_err(|e| fail!("round {round}: resumer {i} task failed: {e}"))?;
            match &a.result {
                Ok(Outcome::Completed(r)) => {
                    ensure!(
                        essence(r) == want,
                        "round {round}: resumer {i} returned {}, the uncrashed run {want}",
                        essence(r)
                    );
                    if a.finished() {
                        finished += 1;
                    } else {
                        ensure!(
                            rig.llm.calls() == 0 && calls.snapshot().is_empty(),
                            "round {round}: resumer {i} returned the stored result but made \
                             {} model calls and ran {:?}",
                            rig.llm.calls(),
                            calls.snapshot()
                        );
                    }
                }
                Err(e) if e.kind() == ErrorKind::Fenced => fenced_total += 1,
                other => {
                    return Err(fail!(
                        "round {round}: resumer {i} ended with {other:?}, want the result or \
                         Fenced"
                    ));
                }
            }
        }
        ensure!(
            finished == 1,
            "round {round}: {finished} of {RESUMERS} racing resumers finished the run, want \
             exactly one"
        );
        terminal_resume_does_nothing(&store, &script, &thread, &run, &want)
            .await
            .map_err(|e| fail!("round {round}: {e}"))?;
    }
    ensure!(
        fenced_total > 0,
        "no resumer was fenced in three rounds of {RESUMERS}: they never overlapped"
    );
    Ok(())
}
