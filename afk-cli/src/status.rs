//! What state a stored run is in, as the operator commands (`runs`, `threads`, `prune`) see
//! it: read from its latest pointer and, for a run that is neither terminal nor paused, its
//! effect rows.
//!
//! States (the `state` field of `--json`): a terminal state (`completed`, `failed`,
//! `cancelled`, `degraded`, …); `paused` (waits for `afk decide`); `uncertain` (an effect intent
//! without a result: resume re-runs the call if its tool is idempotent, else stops with
//! `EffectUncertain` until `afk settle`); `suspended` (its models failed with retryable
//! errors: a resume after the snapshot's `not_before_ms` redoes the model turn);
//! `in_progress` (running, or stopped by a crash: a resume continues it); `claimed` (claimed, nothing saved yet); `unreadable` (the latest
//! pointer cannot be used; `afk verify` says why).

use afk_core::keys::effect_prefix;
use afk_core::normalize::normalize_effect_row;
use afk_core::schema::{EffectStatus, PhasePayload};
use afk_core::store::{Store, StoreExt};
use afk_core::{Result, RunId, ThreadId};
use serde::Serialize;

use super::common::latest;
use super::entry::Entry;

/// One run's state.
#[derive(Debug, Clone, Serialize)]
pub struct RunStatus {
    /// The run id.
    pub run: String,
    /// See the module docs.
    pub state: String,
    /// The latest record's step, phase, schema version and timestamp (ms), if readable.
    pub step: Option<u64>,
    /// The latest record's phase.
    pub phase: Option<String>,
    /// The latest record's schema version.
    pub schema_version: Option<String>,
    /// The latest record's timestamp in ms since the epoch (the run's last activity).
    pub timestamp_ms: Option<u64>,
    /// Effect keys with an intent and no result (`effect:<run>:<step>:<call>`).
    pub uncertain_effects: Vec<String>,
    /// Why the latest pointer is unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The run's entry in the index of runs that need attention, when the command read it
    /// (`runs`; see `entry.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Entry>,
}

impl RunStatus {
    /// Whether the run is finished (nothing left to do for it).
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "paused" | "suspended" | "uncertain" | "in_progress" | "claimed" | "unreadable"
        )
    }
}

/// The state the latest record names (terminal state, `paused`, `suspended`), if it names
/// one.
fn state_of(payload: &PhasePayload) -> Option<String> {
    match payload {
        PhasePayload::RuntimeState(s) if s.state == afk_core::schema::RunStatus::Suspended => {
            Some("suspended".to_owned())
        }
        PhasePayload::RunTerminal(p) => Some(
            p.terminal_result
                .as_ref()
                .map_or_else(|| p.state.to_string(), |r| r.state.to_string()),
        ),
        PhasePayload::Paused(_) => Some("paused".to_owned()),
        _ => None,
    }
}

/// Read the state of `run`.
pub async fn run_status(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<RunStatus> {
    let mut st = RunStatus {
        run: run.to_string(),
        state: "claimed".to_owned(),
        step: None,
        phase: None,
        schema_version: None,
        timestamp_ms: None,
        uncertain_effects: Vec::new(),
        error: None,
        attention: None,
    };
    let rec = match latest(store, thread, run).await {
        Ok(Some(rec)) => rec,
        Ok(None) => return Ok(st),
        Err(e) if e.is_corrupt() => {
            st.state = "unreadable".to_owned();
            st.error = Some(e.to_string());
            return Ok(st);
        }
        Err(e) => return Err(e),
    };
    st.step = Some(rec.step);
    st.phase = Some(rec.phase.to_string());
    st.schema_version = Some(rec.schema_version.clone());
    st.timestamp_ms = Some(rec.timestamp_ms);
    if let Some(s) = state_of(&rec.payload) {
        st.state = s;
        return Ok(st);
    }
    let keys = store.list_all(thread, &effect_prefix(run)).await?;
    for (key, v) in keys.iter().zip(store.get_many(thread, &keys).await?) {
        let Some(bytes) = v else { continue };
        if let Ok(row) = normalize_effect_row(&bytes, key)
            && row.status() == EffectStatus::Intent
        {
            st.uncertain_effects.push(key.clone());
        }
    }
    st.state = if st.uncertain_effects.is_empty() {
        "in_progress"
    } else {
        "uncertain"
    }
    .to_owned();
    Ok(st)
}

/// The call id of an effect key `effect:<run>:<step>:<call>`.
pub fn call_of(effect_key: &str) -> &str {
    effect_key.splitn(4, ':').nth(3).unwrap_or(effect_key)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use afk_core::runner::{Agent, LlmClient, LlmRequest, Outcome, Runner, RunnerConfig};
    use afk_core::schema::LlmResponse;
    use afk_core::{Error, MemoryStore, RunId, ThreadId};

    use super::run_status;

    /// A provider that answers 503 to everything.
    #[derive(Debug)]
    struct Down;

    #[async_trait::async_trait]
    impl LlmClient for Down {
        fn provider(&self) -> String {
            "down".to_owned()
        }
        async fn complete(&self, _: LlmRequest) -> afk_core::Result<LlmResponse> {
            Err(Error::unavailable("HTTP 503"))
        }
    }

    #[test]
    fn a_run_suspended_by_a_model_outage_reads_as_suspended_and_unfinished() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let runner = Runner::new(store.clone(), RunnerConfig::default());
            let agent = Agent::new("a", "", "m", Arc::new(Down));
            let (thread, run) = (ThreadId::new("t").unwrap(), RunId::new("r").unwrap());
            let out = runner.run_with_id(&agent, &thread, run.clone(), "hi");
            assert!(matches!(out.result().await, Ok(Outcome::Suspended { .. })));
            let st = run_status(store.as_ref(), &thread, &run).await.unwrap();
            assert_eq!(st.state, "suspended");
            assert!(!st.is_terminal());
        });
    }
}
