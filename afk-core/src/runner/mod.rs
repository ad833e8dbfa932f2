//! The runner: drives an [`Agent`] with its model and tools, checkpointing every phase, and
//! resumes runs from their checkpoints after a crash, a deploy or a pause.
//!
//! * [`Runner::run`] starts a fresh run, [`Runner::resume`] continues a stored one,
//!   [`Runner::resume_with_decision`] continues a run paused for approval. Each returns a
//!   [`RunHandle`] at once; the run executes on the Tokio runtime.
//!   [`Runner::resume_settling`] continues a run stopped by an uncertain at-most-once effect
//!   ([`ErrorKind::EffectUncertain`](crate::ErrorKind::EffectUncertain)) once a human has said
//!   what happened ([`Settlement`]); [`Runner::settle`] and [`Runner::decide`] record such an
//!   answer without resuming.
//! * Every error path resolves the handle with an [`Error`](crate::Error): store failures,
//!   corrupt records, fencing, panicking tools (caught and recorded as failed calls) and
//!   panics of the run task.
//!
//! # Layers
//!
//! The modules form layers; each uses only its own layer and the ones below it (a test over
//! the `use` lines keeps it so, reading the list below, and `cargo xtask arch` draws the
//! graph in ARCHITECTURE.md):
//! 1. **Vocabulary**, no I/O: the contracts an application implements (`tool`, `llm`,
//!    `agent`, `clock`), tools made from functions (`fn_tool`), model prices (`price`), the
//!    effect journal's ids, fields and rules (`journal`), the prompt texts (`prompt`), the
//!    run's event and decision types (`events`), delegation's ids (`delegation`), settings
//!    (`config`), counters (`stats`) and the spans in OpenTelemetry's GenAI terms
//!    (`telemetry`).
//! 2. **Run state and persistence**: the state carried from step to step and its budgets
//!    (`state`), the run's writer (`persist`) and its entry and lease in the store's index of
//!    runs that need attention (`lease`), the tools offered to the model (`toolbox`),
//!    what a store's value limit leaves of an output (`output_limit`).
//! 3. **Step phases**, each taking a narrow context rather than the whole run: the model
//!    turn (`model_turn`), the tool batch as a list of planned calls (`batch`), child runs
//!    and their records (`subagent`), settling an uncertain call (`settle`), loading a
//!    run to resume (`resume`, **the resume rules**), and a fork's state and first commit
//!    (`fork`).
//! 4. **Orchestration**: the step loop (`step`), and entering a run (`start`: claim, fresh or
//!    resumed, load). A child run is entered through the one boxed entry point
//!    `subagent::Launch`, which `start` implements and hands down: the recursion a
//!    delegation makes is a call through it, not an import cycle.
//! 5. **Public API**: [`Runner`] (`api`), [`RunHandle`] (`handle`), the operator calls
//!    (`operator`), the [`Worker`] that resumes the runs nobody works on (`worker`), the
//!    retention sweep of finished runs (`retention`), and this module's re-exports.
//! 6. **Test kit** (feature `test-kit`): a scripted model and tools (`scripted`) and the
//!    fixture checks (`fixture_check`).

mod agent;
mod api;
mod batch;
mod clock;
mod config;
mod delegation;
mod events;
#[cfg(feature = "test-kit")]
pub mod fixture_check;
mod fn_tool;
mod fork;
mod handle;
mod journal;
mod lease;
mod llm;
mod model_turn;
mod operator;
mod output_limit;
mod persist;
mod price;
mod prompt;
mod resume;
mod retention;
#[cfg(any(test, feature = "test-kit"))]
pub mod scripted;
mod settle;
mod start;
mod state;
mod stats;
mod step;
mod subagent;
mod telemetry;
mod tool;
mod toolbox;
mod worker;

pub use agent::{Agent, FailurePolicies, FailurePolicy, GateDecision, Limits, ToolGate};
pub use api::Runner;
pub use clock::{Clock, IdGen, ManualClock, RandomIds, SequentialIds, SystemClock};
pub use config::{MAX_SUSPENSION_BACKOFF, RunnerConfig};
pub use delegation::{child_run_id, is_child_run_id};
pub use events::{Decision, Outcome, RunEvent};
pub use fn_tool::{FnTool, ToolFn, schema_of};
pub use fork::{FORKED_FROM_KEY, ForkPoint};
pub use handle::RunHandle;
pub use journal::{Rehashed, Settlement, rehash_effect_rows};
pub use llm::{LlmClient, LlmRequest};
pub use operator::Recorded;
pub use price::{ModelPrice, PriceTable};
pub use retention::{Swept, sweep_finished};
pub use stats::RunnerStats;
pub use tool::{EffectPolicy, Tool, ToolContext, ToolError, ToolRef, ToolSpec};
pub use worker::{Worker, WorkerConfig, WorkerHandle, WorkerStats};
