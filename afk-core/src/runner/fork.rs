//! Forking a run: a new run that starts from another run's state at the start of a chosen
//! step, the original left untouched.
//!
//! The state at the start of step `k` is the source's snapshot of step `k - 1` as that step
//! left it (`checkpoint:<source>:<k-1>:runtime_state`, after its tool batch; the step-0
//! snapshot of the first commit for `k = 1`), with its transcript read from the source's log
//! and verified like a resume's. Only a step the source has begun can be chosen (its
//! `step_started` record exists): then step `k - 1`'s snapshot is final, since a step's
//! snapshot is only rewritten by a later write of the same step. That makes a fork of a run
//! that is still running consistent: it reads only records the source no longer changes and
//! never claims the source, so the source goes on undisturbed.
//!
//! The new run's first commit holds its `run_started` record (with `forked_from`), one log
//! entry with the whole restored transcript and records, and the snapshot of step `k - 1`
//! naming `forked_from`. From there it runs step `k` as a run of its own: a new model call, its
//! own effect journal. Steps before `k` are not run again (their results are in the
//! transcript). An at-most-once call of a step the source had reached may be an effect the
//! source already made: the fork asks a human first (a pause for approval) instead of making it
//! a second time.

use std::sync::Arc;

use serde_json::{Value, json};

pub use super::events::ForkPoint;
use super::persist::Checkpointer;
use super::prompt::text_message;
use super::resume;
use super::state::RunState;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::RunId;
use crate::keys;
use crate::normalize::normalize_record;
use crate::schema::{AGENT_KEY, Phase, PhasePayload, Role, RunStartedPayload, RunStatus};
use crate::store::latest_key;

/// The snapshot field (and `run_started` payload field) naming the run a fork came from:
/// `{"run_id": …, "step": k, "source_step": s}` (`s`: the step the source had reached).
pub const FORKED_FROM_KEY: &str = "forked_from";

/// Where a forked run came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) run: String,
    /// The step the fork starts at (its first step of its own).
    pub(crate) step: u64,
    /// The newest step the source had begun when it was forked.
    pub(crate) source_step: u64,
    /// Whether the fork replaced the run's last user message.
    pub(crate) edited: bool,
}

impl Origin {
    pub(crate) fn to_value(&self) -> Value {
        let mut v = json!({"run_id": self.run, "step": self.step, "source_step": self.source_step});
        if self.edited {
            v["user_message_edited"] = Value::Bool(true);
        }
        v
    }

    /// The origin a run's snapshot names, if it is a fork.
    pub(crate) fn of(st: &RunState) -> Option<Origin> {
        let v = st.snap.extra.get(FORKED_FROM_KEY)?;
        Some(Origin {
            run: v.get("run_id")?.as_str()?.to_owned(),
            step: v.get("step")?.as_u64()?,
            source_step: v.get("source_step")?.as_u64()?,
            edited: v.get("user_message_edited").and_then(Value::as_bool) == Some(true),
        })
    }

    /// Whether an at-most-once call of `step` needs a human before it runs: the source had
    /// reached that step, so it may have made the same effect.
    pub(crate) fn guards(&self, step: u64) -> bool {
        step >= self.step && step <= self.source_step
    }
}

/// The state the fork of `source` at `point` starts from (read through `src`, a reader of the
/// source run that never commits).
///
/// Errors: `InvalidInput` for step 0; `NotFound` for a source without records; `Conflict`
/// when the source has not begun `step`; `Corrupt` for unusable records.
pub(crate) async fn load(src: &Checkpointer, point: &ForkPoint) -> Result<(RunState, Origin)> {
    let (thread, source) = (&src.thread, &src.run);
    let step = point.step;
    if step == 0 {
        return Err(Error::invalid_input(
            "a fork starts at a step of the source run, from 1 on (step 1: its input again)",
        ));
    }
    let store = src.store();
    let lk = latest_key(source);
    let Some(latest) = store.get(thread, &lk).await? else {
        return Err(Error::not_found(format!(
            "No checkpoint found for run_id={source} thread_id={thread}"
        ))
        .with_key(lk));
    };
    let latest = normalize_record(&latest, thread, &lk)?;
    let began = keys::checkpoint_key(source, step, Phase::StepStarted);
    if store.get(thread, &began).await?.is_none() {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "run {source} has not begun step {step} (its newest record is of step {}); \
                 fork it at a step it began",
                latest.step
            ),
        )
        .with_key(began));
    }
    let key = keys::checkpoint_key(source, step - 1, Phase::RuntimeState);
    let Some(bytes) = store.get(thread, &key).await? else {
        return Err(Error::corrupt_record(
            key,
            format!(
                "run {source} began step {step} but has no snapshot of step {}",
                step - 1
            ),
        ));
    };
    let rec = normalize_record(&bytes, thread, &key)?;
    let (mut st, _) = resume::restore(src, &rec).await?;
    if st.snap.step != step - 1 || st.snap.pending_llm_response.is_some() || st.step_open {
        return Err(Error::corrupt_record(
            key,
            format!(
                "the snapshot of step {} of run {source} is not the end of that step",
                step - 1
            ),
        ));
    }
    let origin = Origin {
        run: source.to_string(),
        step,
        source_step: latest.step.max(step),
        edited: point.user_message.is_some(),
    };
    if let Some(text) = &point.user_message {
        let messages = Arc::make_mut(&mut st.messages);
        let Some(last) = messages.iter_mut().rev().find(|m| m.role == Role::User) else {
            return Err(Error::invalid_input(format!(
                "run {source} has no user message before step {step} to replace"
            )));
        };
        *last = text_message(Role::User, text.clone(), last.name.clone());
    }
    st.snap.state = RunStatus::Running;
    st.snap
        .extra
        .insert(FORKED_FROM_KEY.to_owned(), origin.to_value());
    st.suspension = None;
    st.suspensions_before = 0;
    Ok((st, origin))
}

/// The fork's first commit: its `run_started` record naming the source (and the agent, as
/// the snapshot names it), one log entry with the whole restored transcript and records, and
/// the snapshot of the step before the fork's first, with the latest pointer on it. From this
/// commit on the new run resumes like any other. Its clock starts now (`now_s`): the source's
/// active time is not the fork's.
pub(crate) async fn write_start(
    ckpt: &mut Checkpointer,
    st: &mut RunState,
    origin: &Origin,
    agent_name: &str,
    now_s: f64,
) -> Result<()> {
    st.snap.started_at_s = now_s;
    st.active_ms_before = 0;
    let mut started = RunStartedPayload {
        agent_name: agent_name.to_owned(),
        resumed: false,
        extra: Default::default(),
    };
    started
        .extra
        .insert(FORKED_FROM_KEY.to_owned(), origin.to_value());
    if let Some(v) = st.snap.extra.get(AGENT_KEY) {
        started.extra.insert(AGENT_KEY.to_owned(), v.clone());
    }
    let step = st.snap.step;
    let (entry, tref) = ckpt.log_entry(
        step,
        &st.messages,
        &st.tool_executions,
        &st.subagent_executions,
    )?;
    let bytes = ckpt.snapshot_record(st, tref, 0)?;
    ckpt.first_commit_at(step, PhasePayload::RunStarted(started), entry, bytes)
        .await
}

/// The source run of a fork request, checked: not the new run itself.
pub(crate) fn check_ids(source: &RunId, new_run: &RunId) -> Result<()> {
    if source == new_run {
        return Err(Error::invalid_input(format!(
            "a fork needs a new run id (got the source's, {source})"
        )));
    }
    Ok(())
}
