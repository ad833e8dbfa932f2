//! Answering a stopped run without resuming it: [`Runner::settle`] and [`Runner::decide`], the
//! library side of `afk settle` and `afk decide`.
//!
//! Each writes exactly what [`Runner::resume_settling`] or [`Runner::resume_with_decision`]
//! would write before going on (the settled effect row, or the `resumed` record with the
//! decision), durably and under a claim of the run, and then stops. The application's next
//! plain [`Runner::resume`] continues from it: a `ran` settlement is replayed, `did_not_run`
//! runs the call once with the same idempotency key, `failed` is a failed call; a decision is
//! applied to the paused call.
//!
//! Both check first without claiming, so a refused request leaves the run's claim (and any
//! process still working on it) alone; then they claim the run, check again under the claim
//! and write. Claiming fences off whatever process still holds the run.

use serde_json::Value;

use super::api::Runner;
use super::events::Decision;
use super::fork::{self, ForkPoint};
use super::journal::Settlement;
use super::persist::Checkpointer;
use super::resume::{self, Loaded, Restored};
use super::settle;
use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};
use crate::keys;
use crate::normalize::normalize_record;
use crate::schema::{MarkState, PauseRequest, Phase, PhasePayload, RunMark};
use crate::store::{Epoch, latest_key};

/// What [`Runner::settle`] or [`Runner::decide`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The settlement or decision is now durable.
    Written,
    /// The very same settlement or decision was already stored; nothing was written.
    AlreadyStored,
}

impl Runner {
    /// Settle the uncertain tool call `call_id` of a run stopped with
    /// [`ErrorKind::EffectUncertain`](crate::ErrorKind::EffectUncertain), without resuming it.
    ///
    /// The same checks and the same durable row as [`Runner::resume_settling`]; the next plain
    /// [`Runner::resume`] (of any process, with the application's agent) continues from it.
    ///
    /// Errors, with nothing written (and, for those found before claiming, the run not
    /// claimed): `NotFound` for a run without a latest pointer; `Conflict` if the run is
    /// terminal or paused, or the call has no lone intent row; `InvalidInput` if the run has no
    /// pending tool batch or `call_id` is not in it; `Corrupt` for unreadable records; store
    /// errors.
    pub async fn settle(
        &self,
        thread: &ThreadId,
        run: &RunId,
        call_id: &str,
        settlement: Settlement,
    ) -> Result<Recorded> {
        let mut ckpt = self.checkpointer(thread, run, Epoch(0)).await?;
        let restored = restored_for_settling(&mut ckpt, call_id).await?;
        if settle::check(&ckpt, &restored.state, call_id, &settlement)
            .await?
            .is_none()
        {
            return Ok(Recorded::AlreadyStored);
        }
        let epoch = self.shared.store.claim(thread, run).await?;
        let mut ckpt = self.checkpointer(thread, run, epoch).await?;
        let restored = restored_for_settling(&mut ckpt, call_id).await?;
        let state = &restored.state;
        match settle::check(&ckpt, state, call_id, &settlement).await? {
            None => Ok(Recorded::AlreadyStored),
            Some(row) => {
                settle::write(&mut ckpt, state.snap.step, call_id, &settlement, &row).await?;
                let parent = answered(&mut ckpt).await?;
                self.parents_ready(thread, parent).await?;
                Ok(Recorded::Written)
            }
        }
    }

    /// Record `decision` for a run paused for approval, without resuming it.
    ///
    /// Writes the `resumed` record [`Runner::resume_with_decision`] writes (moving the latest
    /// pointer to it), durably; the next plain [`Runner::resume`] applies the decision to the
    /// paused call and goes on.
    ///
    /// Errors, with nothing written: `NotFound` for a run without a latest pointer;
    /// `Conflict` if the run is not paused (terminal, in progress, or already decided
    /// differently); `Corrupt` for a paused record that names no tool call or unreadable
    /// records; store errors. The same decision again writes nothing.
    pub async fn decide(
        &self,
        thread: &ThreadId,
        run: &RunId,
        decision: Decision,
    ) -> Result<Recorded> {
        let ckpt = self.checkpointer(thread, run, Epoch(0)).await?;
        if paused_call(&ckpt, &decision).await?.is_none() {
            return Ok(Recorded::AlreadyStored);
        }
        let epoch = self.shared.store.claim(thread, run).await?;
        let mut ckpt = self.checkpointer(thread, run, epoch).await?;
        if paused_call(&ckpt, &decision).await?.is_none() {
            return Ok(Recorded::AlreadyStored);
        }
        // The run is paused and claimed by us: `load` writes the `resumed` record and waits
        // until it is durable, then restores the run (which checks it can go on).
        resume::load(&mut ckpt, Some(decision), None).await?;
        answered(&mut ckpt).await?;
        Ok(Recorded::Written)
    }

    /// Write the first commit of a fork of `source` at `step` as `new_run`, without running
    /// it (the library side of `afk fork`): the state, records and checks of
    /// [`Runner::fork`], with the agent the source's records name. The application's next
    /// [`Runner::resume`] of `new_run` (with that agent, or one declaring its version
    /// compatible) runs it from `step`; on a store with the index of runs that need
    /// attention, its entry says `ready`, so a [`Worker`](super::Worker) that has the agent
    /// runs it.
    ///
    /// Errors, with nothing written: those of [`Runner::fork`] but `AgentMismatch`; `Corrupt`
    /// when the source's records name no agent (a run AFK Python wrote: fork it with
    /// [`Runner::fork`] and the agent at hand).
    pub async fn prepare_fork(
        &self,
        thread: &ThreadId,
        source: &RunId,
        step: impl Into<ForkPoint>,
        new_run: &RunId,
    ) -> Result<()> {
        fork::check_ids(source, new_run)?;
        let src = self.checkpointer(thread, source, Epoch(0)).await?;
        let (mut st, origin) = fork::load(&src, &step.into()).await?;
        let Some(agent) = st.snap.agent() else {
            return Err(Error::corrupt_record(
                latest_key(source),
                format!(
                    "run {source} names no agent in its records; fork it with Runner::fork and \
                     the agent at hand"
                ),
            ));
        };
        let exists = || {
            Error::conflict(format!(
                "run {new_run} already exists in thread {thread}; fork under a new run id"
            ))
            .with_key(latest_key(new_run))
        };
        let Some(epoch) = self.shared.store.claim_if_new(thread, new_run).await? else {
            return Err(exists());
        };
        let mut ckpt = self.checkpointer(thread, new_run, epoch).await?;
        if epoch > Epoch(1)
            && ckpt
                .store()
                .get(thread, &latest_key(new_run))
                .await?
                .is_some()
        {
            return Err(exists()); // started by someone else since the look
        }
        let mut mark = RunMark::new(MarkState::Ready);
        mark.agent.clone_from(&agent.name);
        mark.version = Some(agent.version.clone()).filter(|v| !v.is_empty());
        ckpt.describe(&mark).await;
        let now_s = self.shared.clock.now_s();
        fork::write_start(&mut ckpt, &mut st, &origin, &agent.name, now_s).await?;
        ckpt.mark(MarkState::Ready, 0).await?;
        ckpt.flush().await
    }

    /// A child run was answered: its ancestors, which stopped with it, are ready too (a
    /// worker resumes the top one, which resumes the child). Each is claimed to write its
    /// entry; a store without the index has nothing to do.
    async fn parents_ready(&self, thread: &ThreadId, mut parent: Option<String>) -> Result<()> {
        while let Some(p) = parent.take() {
            let run = RunId::new(p)?;
            let epoch = self.shared.store.claim(thread, &run).await?;
            let mut ckpt = self.checkpointer(thread, &run, epoch).await?;
            parent = answered(&mut ckpt).await?;
        }
        Ok(())
    }

    async fn checkpointer(
        &self,
        thread: &ThreadId,
        run: &RunId,
        epoch: Epoch,
    ) -> Result<Checkpointer> {
        self.shared.checkpointer(thread, run, epoch).await
    }
}

/// The run's index entry says a human answered: a worker continues it (a run without an
/// entry is left as it is).
/// Returns the run's parent, for a child run.
async fn answered(ckpt: &mut Checkpointer) -> Result<Option<String>> {
    let stored = ckpt.describe_as_stored().await;
    if stored.is_none() {
        return Ok(None); // no index, or no entry: nothing waits on it
    }
    ckpt.mark(MarkState::Ready, 0).await?;
    ckpt.flush().await?;
    Ok(stored.and_then(|m| m.parent))
}

/// Restore the run (writing nothing) and refuse what `resume_settling` refuses.
async fn restored_for_settling(ckpt: &mut Checkpointer, id: &str) -> Result<Box<Restored>> {
    match resume::load(ckpt, None, None).await? {
        Loaded::Terminal(_) => Err(settle::terminal_refusal(&ckpt.run, id)),
        Loaded::Paused(_) => Err(settle::paused_refusal(&ckpt.run, id)),
        Loaded::Continue(r) => Ok(r),
    }
}

/// The paused call `decision` answers (`Some(id)`), or `None` if exactly this decision was
/// already recorded for it and nothing happened since. Refuses everything else.
async fn paused_call(ckpt: &Checkpointer, decision: &Decision) -> Result<Option<String>> {
    let (store, thread, run) = (ckpt.store(), &ckpt.thread, &ckpt.run);
    let lk = latest_key(run);
    let Some(bytes) = store.get(thread, &lk).await? else {
        return Err(Error::not_found(format!(
            "No checkpoint found for run_id={run} thread_id={thread}"
        ))
        .with_key(lk));
    };
    let latest = normalize_record(&bytes, thread, &lk)?;
    let not_paused = |what: String| {
        Error::conflict(format!(
            "run {run} is not paused ({what}); nothing to decide"
        ))
        .with_key(lk.clone())
    };
    match &latest.payload {
        PhasePayload::Paused(p) => {
            let request = p.request.clone().unwrap_or_else(|| PauseRequest {
                kind: p.kind,
                ..Default::default()
            });
            match request.tool_call_id {
                Some(id) => Ok(Some(id)),
                None => Err(Error::corrupt_record(
                    lk,
                    "paused record names no tool call to decide about",
                )),
            }
        }
        PhasePayload::Resumed(p) => {
            // Decided, not resumed yet: the same decision again is fine, another is not.
            let pk = keys::checkpoint_key(run, latest.step, Phase::Paused);
            let paused = match store.get(thread, &pk).await? {
                Some(b) => normalize_record(&b, thread, &pk)?,
                None => return Err(not_paused("its latest record is `resumed`".to_owned())),
            };
            let id = match &paused.payload {
                PhasePayload::Paused(pp) => {
                    pp.request.as_ref().and_then(|r| r.tool_call_id.clone())
                }
                _ => None,
            };
            let stored = id
                .as_deref()
                .and_then(|id| p.decision.as_ref()?.get(id))
                .map(decision_of);
            match stored {
                Some(d) if d == *decision => Ok(None),
                Some(d) => Err(Error::conflict(format!(
                    "run {run} was already decided ({}) for tool call {}; it is no longer paused",
                    describe(&d),
                    id.unwrap_or_default()
                ))
                .with_key(lk)),
                None => Err(not_paused("its latest record is `resumed`".to_owned())),
            }
        }
        PhasePayload::RunTerminal(_) => Err(not_paused("it is terminal".to_owned())),
        _ => Err(not_paused(format!(
            "its latest record is `{}` at step {}",
            latest.phase, latest.step
        ))),
    }
}

/// A decision as `resume.rs` stores it (`{"approved": bool, "reason": …}`).
fn decision_of(v: &Value) -> Decision {
    if v.get("approved").and_then(Value::as_bool).unwrap_or(false) {
        Decision::Approve
    } else {
        let reason = v.get("reason").and_then(Value::as_str).unwrap_or("");
        Decision::Deny(reason.to_owned())
    }
}

fn describe(d: &Decision) -> String {
    match d {
        Decision::Approve => "approved".to_owned(),
        Decision::Deny(r) => format!("denied: {r}"),
    }
}
