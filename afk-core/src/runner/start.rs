//! Entering a run: claim it, decide under the claim whether it starts fresh or resumes, load
//! what a resume continues from, and hand the run to its [`RunTask`]. Child runs enter the
//! same way, through [`Launch`] (implemented here, handed down to the tool batch).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::agent::Agent;
use super::clock::Clock;
use super::config::RunnerConfig;
use super::events::{Entry, Events, Outcome, Start};
use super::fork;
use super::lease::Lease;
use super::persist::Checkpointer;
use super::resume::{self, Loaded};
use super::settle;
use super::state::{RunState, Stopwatch};
use super::step::{RunTask, TaskParts};
use super::subagent::{Delegator, Launch};
use super::toolbox::Toolbox;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{RunId, ThreadId};
use crate::schema::{AgentChange, AgentIdentity, MarkState, RunMark};
use crate::store::{Epoch, RandomSource, Store};
use crate::writer::Writer;

/// What every run of one runner shares: the store, the clock, the settings and the
/// write-behind writer.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: RunnerConfig,
    pub(crate) writer: tokio::sync::OnceCell<Writer>,
}

impl Shared {
    pub(crate) fn new(store: Arc<dyn Store>, config: RunnerConfig) -> Self {
        Shared {
            store,
            clock: config.clock.clone(),
            config,
            writer: tokio::sync::OnceCell::new(),
        }
    }

    /// The writer, started on first use (it needs the Tokio runtime the runs execute on).
    pub(crate) async fn writer(&self) -> Result<Writer> {
        self.writer
            .get_or_try_init(|| async {
                Writer::new(
                    self.store.clone(),
                    self.config.checkpoint.clone(),
                    RandomSource::from_os(),
                )
            })
            .await
            .cloned()
    }

    /// A writer of `run` under a claim at `epoch`.
    pub(crate) async fn checkpointer(
        &self,
        thread: &ThreadId,
        run: &RunId,
        epoch: Epoch,
    ) -> Result<Checkpointer> {
        let lease = Lease::new(
            &self.config.owner,
            self.config.lease,
            self.clock.clone(),
            epoch,
        );
        let hashes = self.store.effect_hashes(thread).await?;
        Ok(Checkpointer::new(
            self.store.clone(),
            self.writer().await?,
            self.clock.clone(),
            self.config.checkpoint.flush_timeout,
            thread.clone(),
            run.clone(),
            epoch,
            lease,
            hashes,
        ))
    }
}

impl Launch for Shared {
    fn launch(self: Arc<Self>, entry: Entry) -> BoxFuture<'static, Result<Outcome>> {
        Box::pin(execute(self, entry))
    }
}

/// Execute a fresh run or a resume to its end (or pause). Used for top-level runs and
/// subagent child runs.
pub(crate) async fn execute(shared: Arc<Shared>, e: Entry) -> Result<Outcome> {
    // The claim and the restore are a future of their own, done before the first step: with
    // them inline, the locals they keep across their awaits made the run's future, which every
    // run in flight holds while it waits on its model, 2 KB larger.
    match prepare(shared, e).await? {
        Prepared::Run(task, input) => (*task).run(input).await,
        Prepared::Ended(outcome) => Ok(outcome),
    }
}

/// A run made ready to step, or how it already ended.
enum Prepared {
    /// Run `task` (with `input` for a fresh run, `None` for a resume or fork).
    Run(Box<RunTask>, Option<String>),
    /// The run had ended before (its result) or waits for a human (its pause).
    Ended(Outcome),
}

/// Claim the run and build its state: fresh, forked or restored from the store.
async fn prepare(shared: Arc<Shared>, e: Entry) -> Result<Prepared> {
    // The tools' specs are asked for once per run: for the agent's fingerprint here, then for
    // every model request.
    let mut toolbox = Toolbox::default();
    let specs = toolbox.specs(&e.agent);
    let tool_specs = specs.get(..e.agent.tools.len()).unwrap_or_default();
    let identity = e.agent.identity_with(e.agent.fingerprint_with(tool_specs));
    let mut fork_of = fork_source(&shared, &e, &identity).await?;
    let epoch = claim(&shared, &e).await?;
    let like = describe(&e);
    let start = under_claim(&shared, &e.thread, &e.run, e.start, epoch).await?;
    let mut ckpt = shared.checkpointer(&e.thread, &e.run, epoch).await?;
    ckpt.describe(&like).await;
    let mut forked = None;
    let (st, decisions, child_decisions, input) = match start {
        Start::Fresh(input) => {
            let mut st = RunState::default();
            st.set_agent(&identity);
            (st, Default::default(), Default::default(), Some(input))
        }
        Start::Fork { .. } => {
            let (st, origin) = fork_of
                .take()
                .ok_or_else(|| Error::unexpected("a fork without its source's state"))?;
            forked = Some(origin);
            (st, Default::default(), Default::default(), None)
        }
        start => match load(&mut ckpt, start, (&e.agent, identity)).await? {
            Loaded::Continue(restored) => (
                restored.state,
                restored.decisions,
                restored.child_decisions,
                None,
            ),
            Loaded::Terminal(r) => {
                // Ended before: its retention applies again (this claim lifted it).
                ckpt.finished().await;
                return Ok(Prepared::Ended(Outcome::Completed(r)));
            }
            Loaded::Paused(request) => {
                // Its entry may still say `running` (a process stopped before writing the
                // pause's entry): the run waits for a human, nobody holds it.
                ckpt.mark(MarkState::Paused, 0).await?;
                ckpt.flush().await?;
                return Ok(Prepared::Ended(Outcome::Paused { request: *request }));
            }
        },
    };
    ckpt.hold().await;
    let clock = Stopwatch::start(shared.clock.clone());
    let backoff = shared.config.suspension_backoff;
    let delegator = Delegator {
        launch: shared,
        depth: e.depth,
        decisions: child_decisions,
    };
    let task = RunTask::new(TaskParts {
        agent: e.agent,
        ckpt,
        st,
        decisions,
        delegator,
        control: e.control,
        events: Events::new(e.events),
        clock,
        backoff,
        toolbox,
        forked,
    });
    Ok(Prepared::Run(Box::new(task), input))
}

/// A fork's state, read and checked (the agent too) before the new run is claimed, so that a
/// refused fork writes nothing; `None` for other starts.
async fn fork_source(
    shared: &Shared,
    e: &Entry,
    identity: &AgentIdentity,
) -> Result<Option<(RunState, fork::Origin)>> {
    let Start::Fork { source, point } = &e.start else {
        return Ok(None);
    };
    fork::check_ids(source, &e.run)?;
    // A reader of the source: never claimed, never committed to.
    let src = shared.checkpointer(&e.thread, source, Epoch(0)).await?;
    let (mut st, origin) = fork::load(&src, point).await?;
    check_agent(&e.run, &mut st, (&e.agent, identity.clone()))?;
    Ok(Some((st, origin)))
}

/// What the run's index entry names: its agent, version, depth and parent.
fn describe(e: &Entry) -> RunMark {
    let mut m = RunMark::new(MarkState::Running);
    m.agent.clone_from(&e.agent.name);
    m.version = Some(e.agent.version.clone()).filter(|v| !v.is_empty());
    m.depth = e.depth;
    m.parent = e.parent.as_ref().map(ToString::to_string);
    m
}

/// Claim the run. A fresh run never continues or overwrites a stored one: looked at before
/// claiming too (`claim_if_new`, one round trip where the store can), so that a live run
/// under that id is not fenced off by a refused start.
async fn claim(shared: &Shared, e: &Entry) -> Result<Epoch> {
    let (thread, run) = (&e.thread, &e.run);
    if let Start::Takeover(seen) = e.start {
        return take_over(shared, thread, run, seen).await;
    }
    if !matches!(e.start, Start::Fresh(_) | Start::Fork { .. }) {
        return shared.store.claim(thread, run).await;
    }
    match shared.store.claim_if_new(thread, run).await? {
        Some(epoch) => Ok(epoch),
        None => Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "run {run} already exists in thread {thread}; resume it or start a run under a \
                 new run id"
            ),
        )
        .with_key(crate::store::latest_key(run))),
    }
}

/// A worker's claim of a run whose index entry it read at epoch `seen`: only if no claim came
/// since (`Fenced` otherwise: another process took the run). A store that cannot claim on
/// condition gets a plain claim (the entry was read just before: the window is one look).
async fn take_over(shared: &Shared, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Epoch> {
    if !shared.store.capabilities().claim_if {
        return shared.store.claim(thread, run).await;
    }
    match shared.store.claim_if(thread, run, seen).await? {
        Some(epoch) => Ok(epoch),
        None => Err(Error::fenced(format!(
            "run {run} of thread {thread} was claimed by another process since its entry was              read at epoch {seen}; that process goes on with it"
        ))),
    }
}

/// How the run really starts, settled under the claim at `epoch`.
///
/// Whether the run exists is only settled under the claim: another runner may have started
/// it since the look before claiming, and its commits are fenced from here on. Starting it
/// over would take its steps for fresh (so its effect journal unread) and redo its effects.
/// The first epoch ever handed out for the run needs no second look: epochs only grow, so no
/// runner of ours claimed it before, and nothing of it can be committed. (A writer that never
/// claims, an older AFK still running on the same store, is out of reach of any fence.) A
/// child run is always looked at: an older AFK's parent may have left it stored.
async fn under_claim(
    shared: &Shared,
    thread: &ThreadId,
    run: &RunId,
    start: Start,
    epoch: Epoch,
) -> Result<Start> {
    Ok(match start {
        start @ (Start::Fresh(_) | Start::Fork { .. }) => {
            if epoch > Epoch(1) {
                match look(shared, thread, run, epoch).await? {
                    Stored::Nothing => {}
                    Stored::Run => return Err(started_elsewhere(thread, run)),
                    Stored::KeysOnly(key) => return Err(keys_only(thread, run, key)),
                }
            }
            start
        }
        Start::Child(input, decision) => match look(shared, thread, run, epoch).await? {
            Stored::Run => match decision {
                Some((call, d)) => Start::ResumeFor(call, d),
                None => Start::Resume(None),
            },
            Stored::KeysOnly(key) => return Err(keys_only(thread, run, key)),
            Stored::Nothing => Start::Fresh(input),
        },
        other => other,
    })
}

/// Apply the resume rules for a start that resumes (checking the agent, then settling a call
/// first, for [`Start::Settle`]).
async fn load(
    ckpt: &mut Checkpointer,
    start: Start,
    agent: (&Agent, AgentIdentity),
) -> Result<Loaded> {
    let (decision, only_for, settlement) = match start {
        Start::Fresh(_) | Start::Child(..) | Start::Fork { .. } => (None, None, None),
        Start::Resume(d) => (d, None, None),
        Start::Takeover(_) => (None, None, None),
        Start::ResumeFor(c, d) => (Some(d), Some(c), None),
        Start::Settle(id, s) => (None, None, Some((id, s))),
    };
    let loaded = resume::load(ckpt, decision, only_for.as_deref()).await?;
    match (loaded, settlement) {
        (Loaded::Terminal(_), Some((id, _))) => {
            ckpt.finished().await; // this claim lifted the ended run's retention
            Err(settle::terminal_refusal(&ckpt.run, &id))
        }
        (Loaded::Paused(_), Some((id, _))) => Err(settle::paused_refusal(&ckpt.run, &id)),
        (Loaded::Continue(mut restored), settlement) => {
            let refused = agent.1.fingerprint.clone();
            if let Err(e) = check_agent(&ckpt.run, &mut restored.state, agent) {
                if let Some(stored) = restored.state.snap.agent()
                    && let Err(we) = ckpt.refused(&stored, &refused).await
                {
                    tracing::debug!(error = %we, "could not record the refused resume in the run's entry");
                }
                return Err(e);
            }
            if let Some((id, s)) = &settlement {
                settle::apply(ckpt, &restored.state, id, s).await?;
            }
            ckpt.continue_log(restored.transcript.as_ref());
            Ok(Loaded::Continue(restored))
        }
        (loaded, None) => Ok(loaded),
    }
}

/// The agent rule of a resume: the agent at hand must be the one that drove the run (the same
/// fingerprint) or declare that one's version compatible; then it drives the run from here on
/// (a change recorded in the run's agent history). A run whose records name no agent (AFK
/// Python's, or an earlier version's) takes the agent at hand.
///
/// Errors: `AgentMismatch` naming both agents; nothing is written.
fn check_agent(
    run: &RunId,
    st: &mut RunState,
    (agent, now): (&Agent, AgentIdentity),
) -> Result<()> {
    match st.snap.agent() {
        Some(stored) if stored.fingerprint == now.fingerprint => {
            if stored != now {
                st.set_agent(&now); // a new version string for the same agent
            }
        }
        Some(stored) if agent.accepts(&stored, &now.fingerprint) => {
            tracing::info!(run = %run, from = %stored.version, to = %now.version, "agent changed");
            let step = st.snap.step;
            st.push_agent_change(&AgentChange {
                from: stored,
                to: now.clone(),
                step,
            });
            st.set_agent(&now);
        }
        Some(stored) => return Err(mismatch(run, &stored, &now)),
        None => st.set_agent(&now),
    }
    Ok(())
}

/// `AgentMismatch` for a resume of `run`, started by `stored`, by the agent `now`.
fn mismatch(run: &RunId, stored: &AgentIdentity, now: &AgentIdentity) -> Error {
    let (s, n) = (stored, now);
    Error::new(
        ErrorKind::AgentMismatch,
        format!(
            "run {run} was started by agent '{}' version '{}' (fingerprint {}), not by this \
             agent '{}' version '{}' (fingerprint {}); resume it with that agent, or declare \
             version '{}' compatible (Agent::compatible_with)",
            s.name,
            s.version,
            short(&s.fingerprint),
            n.name,
            n.version,
            short(&n.fingerprint),
            s.version
        ),
    )
}

/// The first 12 hex digits of a fingerprint, for messages.
fn short(fingerprint: &str) -> &str {
    fingerprint.get(..12).unwrap_or(fingerprint)
}

/// What a start finds of a run under its claim.
enum Stored {
    /// No key of the run (the fence aside).
    Nothing,
    /// The run's latest pointer: the run exists.
    Run,
    /// Keys of the run but no latest pointer (this key, for one): written by something that
    /// writes its pointer last and has not finished (`afk import`, a fixture load).
    KeysOnly(String),
}

/// Look for the run under a claim at `epoch`: its latest pointer, or when that is missing and
/// the claim is not the run's first, any of its keys (one `list` per key family). The writers
/// that leave keys without a pointer (an import, a fixture load) claim before they write, so
/// under the first claim there are none to find and a fresh child run costs no `list`.
async fn look(shared: &Shared, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<Stored> {
    let latest = crate::store::latest_key(run);
    if shared.store.get(thread, &latest).await?.is_some() {
        return Ok(Stored::Run);
    }
    if epoch <= Epoch(1) {
        return Ok(Stored::Nothing);
    }
    for prefix in crate::keys::run_prefixes(run) {
        let page = shared.store.list(thread, &prefix, None, 1).await?;
        if let Some(key) = page.keys.into_iter().next() {
            return Ok(Stored::KeysOnly(key));
        }
    }
    Ok(Stored::Nothing)
}

/// `Conflict` for a fresh start that found the run started by another runner under its claim.
fn started_elsewhere(thread: &ThreadId, run: &RunId) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "run {run} of thread {thread} was started by another runner while this one was \
             starting it; nothing was run here, and this claim fenced the other runner: resume \
             the run"
        ),
    )
    .with_key(crate::store::latest_key(run))
}

/// `Conflict` for a start that found keys of the run without its pointer.
fn keys_only(thread: &ThreadId, run: &RunId, key: String) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "run {run} of thread {thread} has records but no latest pointer (an import or a load \
             that has not finished, or was stopped); nothing was run here. Finish it, or delete \
             the run (`afk prune --thread {thread} --run {run} --force`) before starting it"
        ),
    )
    .with_key(key)
}
