//! The resume rules, all in one place.
//!
//! 1. The caller has claimed the run (a new fencing epoch): an older process still working on
//!    it is fenced off from here on.
//! 2. Read `checkpoint:<run>:latest`. Missing -> `NotFound`
//!    ("No checkpoint found for run_id=… thread_id=…"). Normalize it; unusable -> `Corrupt`.
//! 3. `run_terminal` with a `terminal_result` -> return that result: nothing executes, nothing
//!    is written. This holds for failed and cancelled runs too, as in AFK.
//! 4. `paused` -> without a decision, return the stored request again (nothing written); with
//!    a decision, commit a `resumed` record carrying it (decisions of the step accumulate in
//!    `checkpoint:<run>:<step>:resumed`, so a crash after this point keeps them).
//! 5. The snapshot: the latest record if it is a `runtime_state`; otherwise the
//!    `checkpoint:<run>:<s>:runtime_state` with the highest `s`, found by *listing* the run's
//!    checkpoint keys. AFK scans down from the latest pointer's step, which fails when AFK's
//!    own resume moved the pointer back to `run_started` at step 0 (AFK writes its resumed run's
//!    `run_started` record at step 0 and moves the pointer there; see the `a-double-crash-*`
//!    fixtures); the highest-step snapshot is the run's real progress,
//!    because a step's snapshot is only ever rewritten by a later write of the same step.
//!    No snapshot at all -> `Corrupt` ("No runtime_state checkpoint found for …"). That only
//!    happens to AFK v1 records (AFK's fixtures expect it): the first commit of a v2 run
//!    carries its step-0 snapshot (the system and user messages in the log's first entry),
//!    so a v2 run is resumable from its first commit on, under the same run id. A crash
//!    before that commit leaves no latest pointer (`NotFound`): nothing of the run exists,
//!    and `Runner::run_with_id` starts it under the same id.
//! 6. Restore everything: the transcript and the execution records (inline for AFK v1
//!    records; for v2 the append-only log `messages:<run>:<i>`, read with one `get_many` and
//!    verified against the snapshot's length, counts and digest chain; records a v2 snapshot
//!    written before they moved into the log still carries inline come first), counters, usage, cost, tokens, records, the replayed-effect
//!    count (AFK does not restore it) and the active time (AFK counts wall time from the run's
//!    first start, pauses and outages included).
//! 7. A pending LLM response is reused for the same step without a model call (the loop does
//!    this); an undecodable one was already rejected as `Corrupt` by normalization (never
//!    call the model again for it, as AFK does). A v2 snapshot taken at the top of a step, before
//!    its model answer was saved (`"step_open": true`), is redone as the *same* step: a crash
//!    inside a model turn does not add a step, so `max_steps` counts logical steps and the
//!    result after any number of crashes equals the uncrashed one (AFK v1 snapshots carry no
//!    marker and keep AFK's behaviour: the next step). The model call the crash may have
//!    spent is counted for `max_llm_calls` from the step's `pre_llm` record
//!    (`"llm_request"`, the call's ordinal; see `Limits`).
//! 8. The latest pointer never moves backwards: the resumed run's `run_started` record is
//!    written without moving it.
//!
//! Effect replay during the resumed step follows the rules of [`super::journal`]; settling an
//! uncertain effect before the resume (`Runner::resume_settling`) is in [`super::settle`].
//!
//! # Rules and the tests that pin them
//!
//! | Rule | Tests |
//! |---|---|
//! | 1 claim (fencing) | `writer::tests::claim`, `tests/it/runner_abort.rs` (an aborted attempt's queued commits fail `Fenced`, the resume goes on), `afk-conformance` fencing |
//! | 2 missing latest -> `NotFound`; unusable -> `Corrupt` | `tests/it/fixtures_resume.rs` (`corrupt-latest-missing`, `corrupt-schema-v999`, `corrupt-payload-not-map`), `tests/it/runner_errors.rs::a_corrupt_pointer_is_corrupt_and_calls_nothing` |
//! | 3 terminal result returned, nothing runs | fixtures `terminal-completed`, `terminal-failed`, `*-run_terminal-*`; the terminal re-resume in `tests/it/runner_crash.rs` and `tests/it/runner_abort.rs`; `tests/it/runner_policies.rs`, `tests/it/runner_budgets.rs`, `tests/it/runner_control.rs::cancel_writes_a_cancelled_record_that_resume_returns` |
//! | 4 paused: request again / decision recorded and applied | `tests/it/runner_pause.rs` |
//! | 5 snapshot: latest, else the highest-step one by listing | fixtures `a-double-crash-*` and every `*-latest-<non-snapshot>-*`; `tests/it/resume_v1_v2.rs` (`a-double-crash-k15-k13` migrated) |
//! | 6 restore everything incl. replayed count and active time; v2 log verified | fixtures (`replayed_effect_count`, counters); `tests/it/resume_v1_v2.rs` (v1 vs migrated v2); `tests/it/resume_rules.rs::a_tampered_transcript_log_is_corrupt_and_calls_nothing`; active time: `tests/it/runner_pause.rs`, `tests/it/runner_control.rs::interrupt_writes_nothing_terminal_and_a_later_resume_continues` |
//! | 7 pending response reused without a model call; undecodable -> `Corrupt` | fixtures `*-post_llm-*`, `corrupt-pending-garbage`; the "no durable answer requested again" checks of `tests/it/runner_crash.rs` and `tests/it/runner_abort.rs` |
//! | 5 a v2 run is resumable from its first commit (step-0 snapshot), same run id | `tests/it/runner_crash.rs` (crash after every commit), `tests/it/runner_abort.rs` (abort at every await point), `tests/it/resume_crashes.rs` (up to 50 crashes per run), `tests/it/runner_errors.rs::a_child_crashed_right_after_its_first_commit_is_resumed`; `afk-conformance` resume level |
//! | 7 open step redone as the same step; `max_steps` logical, `max_llm_calls` counts lost calls, cost counts recorded answers | `tests/it/resume_budgets.rs`; the `step` in every crash test's result comparison |
//! | 8 pointer never moves backwards | `tests/it/resume_rules.rs::a_resume_crashing_after_its_run_started_record_leaves_the_pointer_where_it_was` |
//! | effects: replay / `Corrupt` on hash mismatch / intent -> re-run or `EffectUncertain` | fixtures `*-effect-*`, `corrupt-effect-hash-mismatch`; `tests/it/runner_crash.rs`, `tests/it/runner_abort.rs` (at-most-once `charge`) |
//! | settlement (`Runner::resume_settling`): a lone intent of a pending call becomes a `done` row marked `settled` (ran -> replayed, did not run -> executed once more with the same idempotency key, failed -> a failed call); no lone intent / not pending / terminal / paused -> `Conflict` or `InvalidInput`, nothing written; an identical repeat writes nothing | `tests/it/runner_settle.rs` |
//! | a retryable failure of every model suspends the run (nothing terminal); the resume redoes the model turn | `tests/it/runner_suspend.rs` |
//! | a different agent (fingerprint) is refused with `AgentMismatch` and nothing written, unless it declares the recorded version compatible | `tests/it/runner_agent_version.rs`, `tests/it/resume_changed_agent.rs` |
//! | subagents: only the child's final outcome is the delegation's result; a paused child pauses the parent (its decision passed down to the child's call, `resumed.subagent_decisions`); any other child error stops the parent with the same kind, naming child run and call, nothing recorded | `tests/it/runner_subagent.rs`, `tests/it/resume_crashes.rs` (uncertain child effects settled under many crashes) |
//! | a fresh run never reuses a stored run id | `tests/it/runner_control.rs::a_fresh_run_under_an_existing_run_id_is_refused` |

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::delegation::CHILD_CALL_KEY;
use super::events::{ChildDecisions, Decision};
use super::persist::Checkpointer;
use super::state::{LLM_REQUEST_KEY, RunState};
use crate::error::{Error, Result};
use crate::keys;
use crate::normalize::normalize_record;
use crate::schema::{
    AgentResult, CheckpointRecord, PauseKind, PauseRequest, Phase, PhasePayload, Reassembled,
    ResumedPayload, StepRecords, TranscriptEntry, TranscriptRef,
};
use crate::store::{StoreExt, latest_key};

/// What the stored state says to do.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// The run ended; here is its stored result.
    Terminal(Box<AgentResult>),
    /// The run waits for a human decision.
    Paused(Box<PauseRequest>),
    /// Continue from this state.
    Continue(Box<Restored>),
}

/// A restored run.
#[derive(Debug)]
pub(crate) struct Restored {
    pub state: RunState,
    pub transcript: Option<TranscriptRef>,
    pub decisions: BTreeMap<String, Decision>,
    /// Decisions for paused child runs, by the delegating call id: the child's paused call
    /// id and the decision.
    pub child_decisions: ChildDecisions,
}

/// The `resumed` payload field holding decisions meant for child runs.
const CHILD_DECISIONS_KEY: &str = "subagent_decisions";

/// The decisions a `resumed` record holds for one step.
#[derive(Debug, Default)]
struct Decisions {
    /// For the run's own calls, by call id.
    own: BTreeMap<String, Decision>,
    /// For paused child runs.
    children: ChildDecisions,
}

/// A human decision the resume records before it restores the run.
struct NewDecision {
    /// The paused step.
    step: u64,
    /// The paused call.
    call: String,
    /// The child's paused call, if the pause is a child run's.
    child_call: Option<String>,
    decision: Decision,
}

impl NewDecision {
    fn add_to(&self, all: &mut Decisions) {
        let (call, decision) = (self.call.clone(), self.decision.clone());
        match &self.child_call {
            Some(c) => {
                all.children.insert(call, (c.clone(), decision));
            }
            None => {
                all.own.insert(call, decision);
            }
        }
    }
}

/// What the latest record says before anything is restored.
enum Latest {
    /// The run ended or waits: the answer, nothing to restore.
    Done(Loaded),
    /// Restore the run (recording this decision first, if any).
    Restore(Box<CheckpointRecord>, Option<NewDecision>),
}

/// Apply the resume rules for the run `ckpt` is claimed for.
///
/// `only_for`: apply `decision` only if the paused record is about this call id (a parent
/// passing a human's decision down to its paused child); otherwise the run stays paused.
pub(crate) async fn load(
    ckpt: &mut Checkpointer,
    decision: Option<Decision>,
    only_for: Option<&str>,
) -> Result<Loaded> {
    let (latest, new_decision) = match read_latest(ckpt, decision, only_for).await? {
        Latest::Done(loaded) => return Ok(loaded),
        Latest::Restore(latest, d) => (latest, d),
    };
    if let Some(d) = &new_decision {
        record_decision(ckpt, d).await?;
    }
    let snap_rec = if latest.phase == Phase::RuntimeState {
        *latest
    } else {
        match newest_snapshot(ckpt).await? {
            Some(r) => r,
            None => {
                let (run, thread) = (&ckpt.run, &ckpt.thread);
                return Err(Error::corrupt_record(
                    latest_key(run),
                    format!(
                        "No runtime_state checkpoint found for run_id={run} thread_id={thread}"
                    ),
                ));
            }
        }
    };
    let (mut state, transcript) = restore(ckpt, &snap_rec).await?;
    if state.step_open {
        count_lost_call(ckpt, &mut state).await?;
    }
    let mut decisions = stored_decisions(ckpt, state.snap.step).await?;
    if let Some(d) = new_decision
        && d.step == state.snap.step
    {
        d.add_to(&mut decisions);
    }
    Ok(Loaded::Continue(Box::new(Restored {
        state,
        transcript,
        decisions: decisions.own,
        child_decisions: decisions.children,
    })))
}

/// Rules 2–4: read and normalize the latest record; a terminal run's result, a paused run's
/// request again, or the decision to record for it.
async fn read_latest(
    ckpt: &Checkpointer,
    decision: Option<Decision>,
    only_for: Option<&str>,
) -> Result<Latest> {
    let (thread, run) = (&ckpt.thread, &ckpt.run);
    let lk = latest_key(run);
    let Some(bytes) = ckpt.store().get(thread, &lk).await? else {
        return Err(Error::not_found(format!(
            "No checkpoint found for run_id={run} thread_id={thread}"
        ))
        .with_key(lk));
    };
    let latest = normalize_record(&bytes, thread, &lk)?;
    let new_decision = match &latest.payload {
        PhasePayload::RunTerminal(p) => match &p.terminal_result {
            Some(r) => return Ok(Latest::Done(Loaded::Terminal(Box::new(r.clone())))),
            None => None,
        },
        PhasePayload::Paused(p) => {
            let request = p.request.clone().unwrap_or_else(|| PauseRequest {
                kind: p.kind,
                reason: p.reason.clone(),
                prompt: p.prompt.clone(),
                ..Default::default()
            });
            let meant = only_for.is_none_or(|c| request.tool_call_id.as_deref() == Some(c));
            let Some(decision) = decision.filter(|_| meant) else {
                return Ok(Latest::Done(Loaded::Paused(Box::new(request))));
            };
            let Some(call) = request.tool_call_id.clone() else {
                return Err(Error::corrupt_record(
                    lk,
                    "paused record names no tool call to decide about",
                ));
            };
            let child_call = request.payload.get(CHILD_CALL_KEY).and_then(Value::as_str);
            Some(NewDecision {
                step: latest.step,
                call,
                child_call: child_call.map(str::to_owned),
                decision,
            })
        }
        _ => {
            if decision.is_some() && only_for.is_none() {
                tracing::warn!(run = %run, "resume_with_decision on a run that is not paused; decision ignored");
            }
            None
        }
    };
    Ok(Latest::Restore(Box::new(latest), new_decision))
}

/// Rule 4: commit a `resumed` record holding every decision of the paused step so far plus
/// `d`, and wait until it is durable.
async fn record_decision(ckpt: &mut Checkpointer, d: &NewDecision) -> Result<()> {
    let mut all = stored_decisions(ckpt, d.step).await?;
    d.add_to(&mut all);
    let mut payload = ResumedPayload {
        kind: PauseKind::Approval,
        decision: Some(decisions_to_value(&all.own)),
        extra: Default::default(),
    };
    if !all.children.is_empty() {
        let children: Map<String, Value> = all
            .children
            .iter()
            .map(|(id, (c, d))| {
                let mut v = decision_value(d);
                if let Value::Object(m) = &mut v {
                    m.insert(CHILD_CALL_KEY.to_owned(), Value::String(c.clone()));
                }
                (id.clone(), v)
            })
            .collect();
        payload
            .extra
            .insert(CHILD_DECISIONS_KEY.to_owned(), Value::Object(children));
    }
    ckpt.checkpoint(d.step, PhasePayload::Resumed(payload))
        .await?;
    ckpt.barrier().await
}

/// Rule 6: the run's state from the snapshot record `snap_rec`, with its transcript and
/// records (inline, or read from the log and verified), and the log reference to continue.
pub(super) async fn restore(
    ckpt: &Checkpointer,
    snap_rec: &CheckpointRecord,
) -> Result<(RunState, Option<TranscriptRef>)> {
    let Some(snap) = snap_rec.snapshot() else {
        return Err(Error::corrupt(
            "snapshot record has no runtime_state payload",
        ));
    };
    let log = match &snap.transcript {
        Some(tref) => {
            let inline = !(snap.tool_executions.is_empty() && snap.subagent_executions.is_empty());
            if inline && (tref.tool_count > 0 || tref.subagent_count > 0) {
                return Err(Error::corrupt_record(
                    latest_key(&ckpt.run),
                    "snapshot carries execution records both inline and in the transcript log",
                ));
            }
            read_log(ckpt, tref).await?
        }
        None => Reassembled {
            messages: snap.messages.clone().unwrap_or_default(),
            records: StepRecords::default(),
        },
    };
    let state = RunState::from_snapshot(snap, log.messages, log.records, snap_rec.timestamp_ms);
    Ok((state, snap.transcript.clone()))
}

/// The step's model call may have been made after the open snapshot (its `pre_llm` record is
/// committed before the call) and its answer lost: count it, so `max_llm_calls` counts real
/// calls. Repeated crashes in one step count once each (each `pre_llm` names its call's
/// ordinal).
async fn count_lost_call(ckpt: &Checkpointer, state: &mut RunState) -> Result<()> {
    let key = keys::checkpoint_key(&ckpt.run, state.snap.step, Phase::PreLlm);
    let Some(bytes) = ckpt.store().get(&ckpt.thread, &key).await? else {
        return Ok(());
    };
    let rec = normalize_record(&bytes, &ckpt.thread, &key)?;
    if let PhasePayload::PreLlm(p) = &rec.payload
        && let Some(n) = p.extra.get(LLM_REQUEST_KEY).and_then(Value::as_u64)
    {
        state.llm_requests = state.llm_requests.max(n);
    }
    Ok(())
}

/// The highest-step `runtime_state` record of the run, by listing its checkpoint keys.
async fn newest_snapshot(ckpt: &Checkpointer) -> Result<Option<CheckpointRecord>> {
    let prefix = format!("checkpoint:{}:", ckpt.run);
    let mut best: Option<(u64, String)> = None;
    for key in ckpt.store().list_all(&ckpt.thread, &prefix).await? {
        let Some(rest) = key.strip_prefix(&prefix) else {
            continue;
        };
        let Some((step, phase)) = rest.split_once(':') else {
            continue;
        };
        if phase != Phase::RuntimeState.as_str() {
            continue;
        }
        let Ok(step) = step.parse::<u64>() else {
            continue;
        };
        if best.as_ref().is_none_or(|(s, _)| step > *s) {
            best = Some((step, key.clone()));
        }
    }
    let Some((_, key)) = best else {
        return Ok(None);
    };
    let Some(bytes) = ckpt.store().get(&ckpt.thread, &key).await? else {
        return Err(Error::corrupt_record(key, "snapshot listed but missing"));
    };
    normalize_record(&bytes, &ckpt.thread, &key).map(Some)
}

/// Read (one `get_many`) and verify the transcript log a snapshot references: its messages and
/// the execution records the log holds.
async fn read_log(ckpt: &Checkpointer, tref: &TranscriptRef) -> Result<Reassembled> {
    let keys: Vec<String> = (0..tref.len)
        .map(|i| keys::messages_key(&ckpt.run, i))
        .collect();
    let values = ckpt.store().get_many(&ckpt.thread, &keys).await?;
    let mut entries = Vec::with_capacity(values.len());
    for (key, v) in keys.iter().zip(values) {
        let Some(bytes) = v else {
            return Err(Error::corrupt_record(
                key.clone(),
                "transcript entry referenced by the snapshot is missing",
            ));
        };
        let e: TranscriptEntry = serde_json::from_slice(&bytes).map_err(|e| {
            Error::corrupt_record(key.clone(), format!("transcript entry is invalid: {e}"))
        })?;
        entries.push(e);
    }
    crate::schema::reassemble(&entries, tref)
        .map_err(|e| Error::corrupt_record(latest_key(&ckpt.run), e.message().to_owned()))
}

/// Decisions recorded for `step` by earlier `resume_with_decision` calls.
async fn stored_decisions(ckpt: &Checkpointer, step: u64) -> Result<Decisions> {
    let key = keys::checkpoint_key(&ckpt.run, step, Phase::Resumed);
    let Some(bytes) = ckpt.store().get(&ckpt.thread, &key).await? else {
        return Ok(Decisions::default());
    };
    let rec = normalize_record(&bytes, &ckpt.thread, &key)?;
    let mut out = Decisions::default();
    if let PhasePayload::Resumed(p) = &rec.payload {
        if let Some(Value::Object(map)) = &p.decision {
            for (id, d) in map {
                out.own.insert(id.clone(), parse_decision(d));
            }
        }
        if let Some(Value::Object(map)) = p.extra.get(CHILD_DECISIONS_KEY) {
            for (id, d) in map {
                if let Some(c) = d.get(CHILD_CALL_KEY).and_then(Value::as_str) {
                    out.children
                        .insert(id.clone(), (c.to_owned(), parse_decision(d)));
                }
            }
        }
    }
    Ok(out)
}

fn parse_decision(d: &Value) -> Decision {
    let approved = d.get("approved").and_then(Value::as_bool).unwrap_or(false);
    let reason = d.get("reason").and_then(Value::as_str).unwrap_or("");
    if approved {
        Decision::Approve
    } else {
        Decision::Deny(reason.to_owned())
    }
}

fn decision_value(d: &Decision) -> Value {
    match d {
        Decision::Approve => json!({"approved": true}),
        Decision::Deny(r) => json!({"approved": false, "reason": r}),
    }
}

fn decisions_to_value(all: &BTreeMap<String, Decision>) -> Value {
    let mut m = Map::new();
    for (id, d) in all {
        m.insert(id.clone(), decision_value(d));
    }
    Value::Object(m)
}
