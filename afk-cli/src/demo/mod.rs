//! `afk demo [--store URL] [--crash-after N] [--resume [--run R]] [--approval]`: run a
//! scripted durable agent, crash it part way, resume it in a new runner on the same store, and
//! explain every step in plain lines. `--approval` leaves a second order paused for a human's approval
//! instead (see `approval.rs`).
//!
//! `--json` prints one document instead (every figure comes from a counter or the store; fields
//! only ever gain members):
//!
//! * always: `mode` (`"crash_and_resume"`, `"resume"` or `"approval"`), `store` (redacted), `thread`, `run`,
//!   `ok` (false exactly when the exit code is 1), `problems` (strings; empty when `ok`).
//! * `crash_and_resume`: `crash_after` (commits before the crash), `reference` (`commits`,
//!   `llm_calls`, `tool_executions` of the same run without a crash), `first_process`
//!   (`crashed`, `error` or null, `commits_saved`, `commits`: `[{number, keys, latest_moved}]`,
//!   `llm_calls`, `tool_executions`: `{call id: count}`), `stored` (`latest`: `{step, phase}` or
//!   null, `snapshot`: `{step, transcript_messages, pending_tool_calls}` or null, `effects`:
//!   `[{call, tool, policy, status}]` with status `none`, `intent`, `result` or `unreadable`),
//!   `resume` (`outcome`: `completed`, `effect_uncertain`, `nothing_to_resume`, `paused` or
//!   `failed`; `error` or null; `llm_calls`, `saved_answers_reused`, `model_answers`:
//!   `[{step, model_called}]`, `tool_results`: `[{step, call, tool, replayed, success}]`,
//!   `replayed_effects`, `final_text`, `identical_to_uncrashed` (null unless completed)),
//!   `model_calls` (`before_crash`, `on_resume`, `total`, `uncrashed`), `tools`:
//!   `[{call, tool, policy, before_crash, on_resume, total, uncrashed}]`.
//! * `resume`: `llm_calls`, `tool_executions` (`{call id: count}`), `outcome` (`completed` or
//!   `paused`), `state`, `final_text` (completed) or `reason` (paused).
//! * `approval` (`--approval`): `llm_calls`, `tool_executions`, `outcome` (`paused`, else
//!   `other` and not `ok`), `call` and `reason` (the decision the run waits for).

/// Append one line to a narrative `String`.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

mod approval;
mod report;
mod script;

use std::process::ExitCode;
use std::sync::Arc;

use afk_core::runner::Outcome;
use afk_core::runner::scripted::InvocationCounter;
use afk_core::schema::AgentResult;
use afk_core::store::{CrashMode, FaultEvent, FaultStore, StoreExt};
use afk_core::{
    MemoryStore, Result, RunId, ThreadId,
    store::{Commit, Store},
};
use serde_json::{Value, json};

use super::output::{Ctx, Report};
use report::{Process, drain};
use script::{RUN, THREAD, rig, runner};

/// Where the demo keeps its data unless `--store` says otherwise.
pub const DEMO_STORE: &str = "rocksdb://./.afk-demo";

/// `afk demo`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Make the store crash after this many durable commits (default: right after the results
    /// of the parallel tool batch are saved, before the batch is marked done).
    #[arg(long)]
    crash_after: Option<u64>,
    /// Start nothing new: resume the demo's stored run once, as the demo application would
    /// after `afk settle` or `afk decide`, and say what that executed.
    #[arg(long, conflicts_with = "crash_after")]
    resume: bool,
    /// The order that needs a human's approval (run `demo-order-43`): leave it paused before
    /// its card is charged, for `afk decide` or `afk serve`; with `--resume`, resume it as its
    /// application would. The run of the plain demo is left as it is.
    #[arg(long, conflicts_with = "crash_after")]
    approval: bool,
    /// With `--resume`: resume this run of the demo's thread instead, for example a fork of a
    /// demo run that `afk fork` or `afk serve` wrote (with `--approval`, by the application
    /// of the approval order).
    #[arg(long, requires = "resume")]
    run: Option<String>,
}

/// Run the demo on `store` (default [`DEMO_STORE`]). Wipes the demo's own thread first.
pub fn run(args: Args, store: Option<String>, json: bool) -> ExitCode {
    let ctx = Ctx {
        url: store.unwrap_or_else(|| DEMO_STORE.to_owned()),
        json,
    };
    let name = ctx.store_name();
    if args.resume {
        let run = args.run;
        return ctx.run("demo", |store| resume_only(store, name, args.approval, run));
    }
    if args.approval {
        return ctx.run_creating("demo", |store| approval::approval(store, name));
    }
    ctx.run_creating("demo", |store| demo(store, args.crash_after, name))
}

/// A call counter as `{call id: count}`.
fn counts(c: &InvocationCounter) -> Value {
    json!(c.snapshot())
}

/// One plain resume of the demo run (with `approval`, of the approval order; or of `run` of
/// the demo's thread), with a fresh agent, as its application would do it.
async fn resume_only(
    store: Arc<dyn Store>,
    name: String,
    approval: bool,
    run: Option<String>,
) -> Result<Report> {
    let mut out = String::new();
    say!(out, "AFK demo: the application resumes its stored run.");
    say!(out, "store: {name}");
    let thread = ThreadId::new(THREAD)?;
    let default = if approval {
        approval::APPROVAL_RUN
    } else {
        RUN
    };
    let run_id = run.unwrap_or_else(|| default.to_owned());
    let run = RunId::new(run_id.as_str())?;
    let counter = InvocationCounter::new();
    let rig = rig(&counter, approval)?;
    let result = runner(store)
        .resume(&rig.agent, &thread, &run)
        .result()
        .await;
    let executed: Vec<String> = counter
        .snapshot()
        .into_iter()
        .map(|(call, n)| format!("{call} x{n}"))
        .collect();
    say!(
        out,
        "model calls: {}; tool executions: {}",
        rig.llm.calls(),
        if executed.is_empty() {
            "none".to_owned()
        } else {
            executed.join(", ")
        }
    );
    let mut doc = json!({
        "mode": "resume", "store": name, "thread": THREAD, "run": run_id, "ok": true,
        "problems": [], "llm_calls": rig.llm.calls(), "tool_executions": counts(&counter),
    });
    match result? {
        Outcome::Completed(r) => {
            say!(out, "run {run}: {} - {:?}", r.state, r.final_text);
            doc["outcome"] = json!("completed");
            doc["state"] = json!(r.state);
            doc["final_text"] = json!(r.final_text);
        }
        Outcome::Paused { request } => {
            say!(
                out,
                "run {run}: paused again, waiting for {:?}",
                request.reason
            );
            doc["outcome"] = json!("paused");
            doc["state"] = json!("paused");
            doc["reason"] = json!(request.reason);
        }
        Outcome::Suspended {
            reason,
            not_before_ms,
        } => {
            say!(
                out,
                "run {run}: suspended until {not_before_ms} (ms since the epoch): {reason}"
            );
            doc["outcome"] = json!("suspended");
            doc["state"] = json!("suspended");
            doc["reason"] = json!(reason);
            doc["not_before_ms"] = json!(not_before_ms);
        }
        other => {
            say!(out, "run {run}: {other:?}");
            doc["outcome"] = json!("other");
        }
    }
    Ok(Report::ok(doc, out))
}

/// The uncrashed reference run, on a throw-away in-memory store.
struct Baseline {
    result: AgentResult,
    llm_calls: u64,
    tools: InvocationCounter,
    commits: Vec<Commit>,
}

async fn baseline(thread: &ThreadId, run: &RunId) -> Result<Baseline> {
    let fault = Arc::new(FaultStore::new(MemoryStore::new()));
    let tools = InvocationCounter::new();
    let rig = rig(&tools, false)?;
    let out = runner(fault.clone())
        .run_with_id(&rig.agent, thread, run.clone(), INPUT)
        .result()
        .await?;
    let Outcome::Completed(result) = out else {
        return Err(afk_core::Error::unexpected("the demo agent paused"));
    };
    let commits = fault
        .log()
        .into_iter()
        .filter_map(|e| match e {
            FaultEvent::Commit(c) => Some(c),
            FaultEvent::Claim { .. } => None,
        })
        .collect();
    Ok(Baseline {
        result: *result,
        llm_calls: rig.llm.calls(),
        tools,
        commits,
    })
}

const INPUT: &str = "Buy one copy of BOOK-42 for ada@example.com.";

/// Default crash point: just after the last result row of the first tool batch is durable.
fn default_crash_point(commits: &[Commit]) -> u64 {
    let first_batch_results = commits.iter().rposition(|c| {
        c.puts.iter().any(|(k, v)| {
            k.contains(":1:call_")
                && serde_json::from_slice::<serde_json::Value>(v)
                    .is_ok_and(|r| r.get("status").and_then(|s| s.as_str()) != Some("intent"))
        })
    });
    first_batch_results.map_or(commits.len() as u64 / 2, |i| i as u64 + 1)
}

async fn demo(store: Arc<dyn Store>, crash_after: Option<u64>, name: String) -> Result<Report> {
    let mut out = String::new();
    say!(
        out,
        "AFK demo: a durable agent run that crashes part way and is resumed."
    );
    say!(out, "store: {name}");
    let thread = ThreadId::new(THREAD)?;
    let run = RunId::new(RUN)?;
    let base = baseline(&thread, &run).await?;
    let n = crash_after.unwrap_or_else(|| default_crash_point(&base.commits));
    say!(
        out,
        "reference: the same run without a crash makes {} commits, {} model calls, {} tool executions",
        base.commits.len(),
        base.llm_calls,
        base.tools.total()
    );
    for old in store.list_runs(&thread).await? {
        store.delete_run(&thread, &old).await?;
    }
    say!(
        out,
        "thread {thread}, run {run} (wiped first, so the demo can be rerun)"
    );

    say!(out, "");
    say!(
        out,
        "== 1. first process: run the agent; the store crashes after {n} commits =="
    );
    let (first_proc, first_doc) = first_process(&mut out, &store, &thread, &run, n).await?;

    say!(out, "");
    say!(out, "== 2. what the store holds now ==");
    let (durable, stored) = report::stored(&mut out, store.as_ref(), &thread, &run).await?;

    say!(out, "");
    say!(
        out,
        "== 3. second process: a NEW Runner resumes the run from the same store =="
    );
    let second = second_process(&mut out, &store, &thread, &run).await?;

    say!(out, "");
    say!(out, "== 4. summary ==");
    let reference = (&base.result, base.llm_calls, &base.tools);
    let summary = report::summary(
        &mut out,
        &second.result,
        &first_proc,
        &second.process,
        &durable,
        reference,
    );
    let mut resume = summary.resume;
    for (k, v) in second.events {
        resume[k] = v;
    }
    let ok = summary.problems.is_empty();
    let doc = json!({
        "mode": "crash_and_resume", "store": name, "thread": THREAD, "run": RUN,
        "ok": ok, "problems": summary.problems, "crash_after": n,
        "reference": {"commits": base.commits.len(), "llm_calls": base.llm_calls,
            "tool_executions": base.tools.total()},
        "first_process": first_doc, "stored": stored, "resume": resume,
        "model_calls": summary.model_calls, "tools": summary.tools,
    });
    Ok(Report {
        json: doc,
        human: out,
        failed: !ok,
    })
}

/// Section 1: run the agent on `store` made to crash after `n` commits, saying each commit it
/// saved and how it ended. What the process did, and the `first_process` of `--json`.
async fn first_process(
    out: &mut String,
    store: &Arc<dyn Store>,
    thread: &ThreadId,
    run: &RunId,
    n: u64,
) -> Result<(Process, Value)> {
    let fault = Arc::new(FaultStore::from_arc(store.clone()));
    fault.crash_after_commits(n, CrashMode::Down);
    let counter1 = InvocationCounter::new();
    let rig1 = rig(&counter1, false)?;
    let mut handle = runner(fault.clone()).run_with_id(&rig1.agent, thread, run.clone(), INPUT);
    let events = handle.events();
    let first = handle.result().await;
    let mut commits = Vec::new();
    for event in fault.log() {
        if let FaultEvent::Commit(c) = event {
            let number = commits.len() + 1;
            say!(out, "  saved #{number}: {}", script::describe_commit(&c));
            let keys: Vec<&String> = c.puts.iter().map(|(k, _)| k).collect();
            commits
                .push(json!({"number": number, "keys": keys, "latest_moved": c.latest.is_some()}));
        }
    }
    let first_proc = Process {
        llm: rig1.llm.clone(),
        tools: counter1.clone(),
        events: drain(events),
    };
    let mut first_doc = report::crash(out, &first, fault.persisted_commits(), &first_proc);
    first_doc["commits"] = json!(commits);
    Ok((first_proc, first_doc))
}

/// The second process: how it ended, what it did, and the `model_answers` and
/// `tool_results` of `--json`'s `resume`.
struct Second {
    result: Result<Outcome>,
    process: Process,
    events: [(&'static str, Value); 2],
}

/// Section 3: a new runner resumes the run from `store`; says what each of its events did.
async fn second_process(
    out: &mut String,
    store: &Arc<dyn Store>,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Second> {
    let counter2 = InvocationCounter::new();
    let rig2 = rig(&counter2, false)?;
    let mut handle = runner(store.clone()).resume(&rig2.agent, thread, run);
    let events = handle.events();
    let second = handle.result().await;
    let second_proc = Process {
        llm: rig2.llm.clone(),
        tools: counter2,
        events: drain(events),
    };
    let resumed = report::resume_events(out, &second_proc);
    Ok(Second {
        result: second,
        process: second_proc,
        events: resumed,
    })
}
