//! The retention sweep through the runner ([`sweep_finished`]), on a store of its own: the
//! sweep deletes every finished run of the store, so it cannot share a store with other cases.

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::{Outcome, sweep_finished};
use afk_core::store::{Attention, Commit, Store, latest_key, store_now_ms};
use afk_core::{ErrorKind, RunId, ThreadId};

use crate::agents::{Calls, Rig, Script, Start, ToolKind, attempt, drive, runner};
use crate::support::{CaseResult, Ctx, ensure, expect_kind, fail, unique_run, unique_thread};

/// Whether `run` has any key left in `thread`.
async fn has_keys(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<bool, String> {
    let keys = crate::support::list_all(store, thread, "", 1000).await?;
    let mine = [
        format!("checkpoint:{run}:"),
        format!("effect:{run}:"),
        format!("messages:{run}:"),
        format!("run:{run}"),
    ];
    Ok(keys
        .iter()
        .any(|k| mine.iter().any(|m| k.starts_with(m.as_str()))))
}

/// On a store of its own (the sweep deletes every finished run in it): runs that finished
/// before the cutoff are deleted, every key of them; a run paused for a human, a run
/// finished after the cutoff, and a run the index lists as finished whose latest record is
/// not terminal are kept; the paused run still resumes and completes; a second sweep with a
/// later cutoff deletes the runs finished since, and the index holds none of them after.
/// A store without [`Capabilities::finished`](afk_core::store::Capabilities::finished) must
/// answer the sweep `Unsupported` (its server expires finished runs, or it keeps them).
pub async fn sweep_deletes_finished_runs_and_nothing_else(store: Arc<dyn Store>) -> CaseResult {
    if !store.capabilities().finished {
        return expect_kind(
            sweep_finished(store.as_ref(), u64::MAX).await,
            ErrorKind::Unsupported,
            "sweep_finished on a store without the finished capability",
        );
    }
    let s = Scene::set_up(store.clone()).await?;
    let swept = sweep_finished(store.as_ref(), s.cutoff)
        .await
        .ctx("sweep_finished")?;
    ensure!(
        swept.deleted == 1 && swept.kept == 1,
        "the first sweep reported {swept:?}: expected 1 run deleted (finished before the \
         cutoff) and 1 kept (listed, not terminal)"
    );
    ensure!(
        !has_keys(store.as_ref(), &s.thread, &s.done).await?,
        "the run finished before the cutoff still has keys after the sweep"
    );
    for (run, what) in [
        (&s.paused, "the paused run"),
        (&s.liar, "the run whose record is not terminal"),
        (&s.late, "the run finished after the cutoff"),
    ] {
        let latest = store.get(&s.thread, &latest_key(run)).await.ctx("get")?;
        ensure!(latest.is_some(), "{what} lost its pointer to the sweep");
    }
    let a = attempt(
        &s.runner,
        &s.rig.agent,
        &s.thread,
        &s.paused,
        &Start::Approve,
    )
    .await;
    ensure!(
        matches!(a.result, Ok(Outcome::Completed(_))),
        "the paused run, approved after the sweep, ended {:?}",
        a.result
    );
    s.second_sweep(store.as_ref()).await
}

/// The runs of the scenario, and the cutoff between the first finished ones and the last.
struct Scene {
    thread: ThreadId,
    done: RunId,
    paused: RunId,
    liar: RunId,
    late: RunId,
    cutoff: u64,
    rig: Rig,
    runner: afk_core::runner::Runner,
}

impl Scene {
    /// A run finished, one paused, one the index lists as finished with a record that is not
    /// terminal (the paused run's), the cutoff, then a run finished after it.
    async fn set_up(store: Arc<dyn Store>) -> Result<Scene, String> {
        let thread = unique_thread("retention");
        let (done, paused, liar, late) = (unique_run(), unique_run(), unique_run(), unique_run());
        let adds = Script {
            batches: vec![vec![(ToolKind::Add, 1)]],
        };
        drive(store.clone(), &adds, &thread, &done).await?;
        let wire = Script {
            batches: vec![vec![(ToolKind::Wire, 2)]],
        };
        let rig = Rig::new(&wire, &Calls::default(), Duration::ZERO)?;
        let runner = runner(store.clone());
        let a = attempt(&runner, &rig.agent, &thread, &paused, &Start::Fresh).await;
        ensure!(
            matches!(a.result, Ok(Outcome::Paused { .. })),
            "the run with a gated call ended {:?}, expected paused",
            a.result
        );
        let record = store
            .get(&thread, &latest_key(&paused))
            .await
            .ctx("get")?
            .ok_or_else(|| fail!("the paused run has no pointer"))?;
        let e = store.claim(&thread, &liar).await.ctx("claim")?;
        let commit = Commit {
            thread: thread.clone(),
            run: liar.clone(),
            epoch: e,
            puts: vec![(format!("checkpoint:{liar}:1:paused"), record.clone())],
            latest: Some(record),
            attention: Some(Attention::Closed),
        };
        store.commit(&commit).await.ctx("closing commit")?;
        let cutoff = store_now_ms() + 1;
        while store_now_ms() <= cutoff + 2 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drive(store.clone(), &adds, &thread, &late).await?;
        Ok(Scene {
            thread,
            done,
            paused,
            liar,
            late,
            cutoff,
            rig,
            runner,
        })
    }

    /// A sweep with no cutoff deletes the runs finished since (the approved one and the
    /// late one), keeps the one that is not terminal, and leaves no entry of the thread.
    async fn second_sweep(&self, store: &dyn Store) -> CaseResult {
        let swept = sweep_finished(store, u64::MAX)
            .await
            .ctx("second sweep_finished")?;
        ensure!(
            swept.deleted == 2,
            "the second sweep reported {swept:?}: expected the 2 runs finished since deleted"
        );
        for run in [&self.paused, &self.late] {
            ensure!(
                !has_keys(store, &self.thread, run).await?,
                "run {run} finished and swept, still has keys"
            );
        }
        let liar = store
            .get(&self.thread, &latest_key(&self.liar))
            .await
            .ctx("get")?;
        ensure!(
            liar.is_some(),
            "the run whose record is not terminal was deleted by the second sweep"
        );
        let left = store
            .list_finished(u64::MAX, None, 1000)
            .await
            .ctx("list_finished")?;
        ensure!(
            left.runs.iter().all(|e| e.thread != self.thread),
            "after the sweeps the index still lists {:?}",
            left.runs
        );
        Ok(())
    }
}
