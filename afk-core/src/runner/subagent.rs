//! Delegation to subagents: a tool call named like one of the agent's subagents runs a child
//! run in the same thread, with its own checkpoints.
//!
//! The child's run id is derived from `(parent run, step, tool call id)`, so after a crash the
//! parent finds the same child again: a child whose terminal result is stored is not run
//! again (its result is returned by the terminal short-circuit), a child that crashed is
//! resumed, and a child whose output reached the parent's effect journal is not even looked
//! at (the call is replayed like any tool). The parent's `pre_subagent_batch` and
//! `post_subagent_batch` records name the child run ids.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::agent::Agent;
use super::exec::RunTask;
use super::tool::ToolSpec;
use super::{Outcome, Start};
use crate::error::Result;
use crate::hash::canonical_json;
use crate::ids::{RunId, ThreadId};
use crate::schema::{
    PhasePayload, PostSubagentBatchPayload, PreSubagentBatchPayload, SubagentExecution,
};

/// The spec the model sees for a subagent.
pub(crate) fn spec_of(agent: &Agent) -> ToolSpec {
    ToolSpec {
        name: agent.name.clone(),
        description: format!("Delegate a task to the subagent '{}'", agent.name),
        parameters: json!({"type": "object", "properties": {"input": {"type": "string"}}}),
    }
}

/// The deterministic child run id for a delegation.
pub fn child_run_id(parent: &RunId, step: u64, call_id: &str) -> RunId {
    let mut h = Sha256::new();
    h.update(format!("{parent}\u{0}{step}\u{0}{call_id}").as_bytes());
    let hex = hex::encode(h.finalize());
    // 4 + 32 characters of [a-z0-9_]: always a valid run id.
    RunId::new(format!("sub_{}", &hex[..32])).unwrap_or_else(|_| parent.clone())
}

/// A child run about to be started or resumed.
#[derive(Debug)]
pub(crate) struct ChildRun {
    shared: std::sync::Arc<super::Shared>,
    agent: Agent,
    thread: ThreadId,
    run: RunId,
    depth: u32,
}

impl ChildRun {
    pub fn new(task: &RunTask, agent: Agent, call_id: &str) -> Self {
        ChildRun {
            shared: task.shared.clone(),
            agent,
            thread: task.ckpt.thread.clone(),
            run: child_run_id(&task.ckpt.run, task.st.step, call_id),
            depth: task.depth + 1,
        }
    }

    /// Run (or resume) the child; its final text is the delegation's output.
    pub async fn run(self, args: Value) -> std::result::Result<Value, String> {
        if self.depth > 8 {
            return Err("subagent nesting deeper than 8".to_owned());
        }
        let input = args
            .get("input")
            .and_then(Value::as_str)
            .map_or_else(|| canonical_json(&args), str::to_owned);
        let start = match self.progress().await {
            Ok(Progress::Some) => Start::Resume(None),
            Ok(Progress::None) => Start::Fresh(input),
            Ok(Progress::StartedOnly) => {
                // The child crashed before its first snapshot: nothing it did is durable
                // beyond `run_started`/`step_started` (its input was never saved, and no
                // effect runs before a snapshot), so it cannot be resumed (AFK's "No
                // runtime_state checkpoint"). Start it again from its input under the same
                // run id; otherwise every resume of the parent would fail this delegation.
                if let Err(e) = self.shared.store.delete_run(&self.thread, &self.run).await {
                    return Err(e.to_string());
                }
                Start::Fresh(input)
            }
            Err(e) => return Err(e.to_string()),
        };
        let (_ctl, rx) = tokio::sync::watch::channel(super::Signal::Run);
        let (ev, _) = tokio::sync::broadcast::channel(16);
        let run = self.run.clone();
        let fut = execute_boxed(
            self.shared,
            self.agent,
            self.thread,
            self.run,
            start,
            self.depth,
            rx,
            ev,
        );
        match fut.await {
            Ok(Outcome::Completed(r)) if r.state == "completed" => {
                Ok(json!({"run_id": run.as_str(), "final_text": r.final_text}))
            }
            Ok(Outcome::Completed(r)) => Err(format!(
                "subagent run {run} ended {}: {}",
                r.state, r.final_text
            )),
            Ok(Outcome::Paused { .. }) => Err(format!("subagent run {run} paused for approval")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// [`super::execute`] behind a `dyn Future + Send`, which breaks the recursion a child run
/// makes (run -> batch -> child run) for the `Send` check.
/// How far a child run got, judged from its checkpoint keys.
enum Progress {
    /// No latest pointer: never started.
    None,
    /// A latest pointer but no snapshot, pause or terminal record: crashed while starting.
    StartedOnly,
    /// Resumable (or finished).
    Some,
}

impl ChildRun {
    async fn progress(&self) -> Result<Progress> {
        let store = &self.shared.store;
        if store
            .get(&self.thread, &crate::store::latest_key(&self.run))
            .await?
            .is_none()
        {
            return Ok(Progress::None);
        }
        let prefix = crate::keys::checkpoint_prefix(&self.run);
        let mut cursor: Option<String> = None;
        loop {
            let page = store
                .list(
                    &self.thread,
                    &prefix,
                    cursor.as_deref(),
                    crate::store::MAX_LIST_LIMIT,
                )
                .await?;
            let resumable = page.keys.iter().any(|k| {
                [":runtime_state", ":paused", ":run_terminal"]
                    .iter()
                    .any(|phase| k.ends_with(phase))
            });
            if resumable {
                return Ok(Progress::Some);
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(Progress::StartedOnly),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn execute_boxed(
    shared: std::sync::Arc<super::Shared>,
    agent: Agent,
    thread: ThreadId,
    run: RunId,
    start: Start,
    depth: u32,
    control: tokio::sync::watch::Receiver<super::Signal>,
    events: tokio::sync::broadcast::Sender<super::RunEvent>,
) -> futures::future::BoxFuture<'static, Result<Outcome>> {
    Box::pin(super::execute(
        shared, agent, thread, run, start, depth, control, events,
    ))
}

/// `pre_subagent_batch` naming the targets and their child run ids.
pub(crate) async fn pre_batch(task: &mut RunTask, targets: Vec<(String, String)>) -> Result<()> {
    let step = task.st.step;
    let children: Vec<Value> = targets
        .iter()
        .map(|(_, id)| Value::String(child_run_id(&task.ckpt.run, step, id).to_string()))
        .collect();
    let mut p = PreSubagentBatchPayload {
        targets: targets.into_iter().map(|(n, _)| n).collect(),
        router_parallel: true,
        extra: Default::default(),
    };
    p.extra
        .insert("child_run_ids".into(), Value::Array(children));
    task.ckpt
        .checkpoint(step, PhasePayload::PreSubagentBatch(p))
        .await
}

/// `post_subagent_batch` with the counts.
pub(crate) async fn post_batch(task: &mut RunTask, ok: u64, failed: u64) -> Result<()> {
    let p = PostSubagentBatchPayload {
        success_count: ok,
        failure_count: failed,
        extra: Default::default(),
    };
    task.ckpt
        .checkpoint(task.st.step, PhasePayload::PostSubagentBatch(p))
        .await
}

/// Add the subagent execution record.
pub(crate) fn record(
    task: &mut RunTask,
    name: &str,
    output: &Value,
    error: Option<String>,
    latency_ms: Option<f64>,
) {
    task.st.subagent_executions.push(SubagentExecution {
        subagent_name: name.to_owned(),
        success: error.is_none(),
        output_text: output
            .get("final_text")
            .and_then(Value::as_str)
            .map(str::to_owned),
        error,
        latency_ms,
        extra: Default::default(),
    });
}
