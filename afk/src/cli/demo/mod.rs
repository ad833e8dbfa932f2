//! `afk demo [--store URL] [--crash-after N]`: run a scripted durable agent, crash it part way,
//! resume it in a new runner on the same store, and explain every step in plain lines.

mod report;
mod script;

use std::process::ExitCode;
use std::sync::Arc;

use afk_core::runner::Outcome;
use afk_core::runner::scripted::InvocationCounter;
use afk_core::schema::AgentResult;
use afk_core::store::StoreExt;
use afk_core::store::{CrashMode, FaultEvent};
use afk_core::{Commit, FaultStore, MemoryStore, Result, RunId, Store, ThreadId};

use super::common::with_store;
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
}

/// Run the demo on `store` (default [`DEMO_STORE`]). Wipes the demo's own thread first.
pub fn run(args: Args, store: Option<String>) -> ExitCode {
    let url = store.unwrap_or_else(|| DEMO_STORE.to_owned());
    if args.resume {
        println!("AFK demo: the application resumes its stored run.");
        println!("store: {}", afk::redact::redact_urls(&url));
        return with_store("demo", &url, resume_only);
    }
    println!("AFK demo: a durable agent run that crashes part way and is resumed.");
    println!("store: {}", afk::redact::redact_urls(&url));
    with_store("demo", &url, |store| demo(store, args.crash_after))
}

/// One plain resume of the demo run, with a fresh agent, as its application would do it.
async fn resume_only(store: Arc<dyn Store>) -> Result<ExitCode> {
    let thread = ThreadId::new(THREAD)?;
    let run = RunId::new(RUN)?;
    let counter = InvocationCounter::new();
    let rig = rig(&counter)?;
    let out = runner(store)
        .resume(&rig.agent, &thread, &run)
        .result()
        .await;
    let executed: Vec<String> = counter
        .snapshot()
        .into_iter()
        .map(|(call, n)| format!("{call} x{n}"))
        .collect();
    println!(
        "model calls: {}; tool executions: {}",
        rig.llm.calls(),
        if executed.is_empty() {
            "none".to_owned()
        } else {
            executed.join(", ")
        }
    );
    match out? {
        Outcome::Completed(r) => {
            println!("run {run}: {} - {:?}", r.state, r.final_text);
        }
        Outcome::Paused { request } => {
            println!("run {run}: paused again, waiting for {:?}", request.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
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
    let rig = rig(&tools)?;
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

async fn demo(store: Arc<dyn Store>, crash_after: Option<u64>) -> Result<ExitCode> {
    let thread = ThreadId::new(THREAD)?;
    let run = RunId::new(RUN)?;
    let base = baseline(&thread, &run).await?;
    let n = crash_after.unwrap_or_else(|| default_crash_point(&base.commits));
    println!(
        "reference: the same run without a crash makes {} commits, {} model calls, {} tool executions",
        base.commits.len(),
        base.llm_calls,
        base.tools.total()
    );
    for old in store.list_runs(&thread).await? {
        store.delete_run(&thread, &old).await?;
    }
    println!("thread {thread}, run {run} (wiped first, so the demo can be rerun)");

    println!();
    println!("== 1. first process: run the agent; the store crashes after {n} commits ==");
    let fault = Arc::new(FaultStore::from_arc(store.clone()));
    fault.crash_after_commits(n, CrashMode::Down);
    let counter1 = InvocationCounter::new();
    let rig1 = rig(&counter1)?;
    let mut handle = runner(fault.clone()).run_with_id(&rig1.agent, &thread, run.clone(), INPUT);
    let events = handle.events();
    let first = handle.result().await;
    let mut k = 0;
    for event in fault.log() {
        if let FaultEvent::Commit(c) = event {
            k += 1;
            println!("  saved #{k}: {}", script::describe_commit(&c));
        }
    }
    let first_proc = Process {
        llm: rig1.llm.clone(),
        tools: counter1.clone(),
        events: drain(events),
    };
    report::crash(&first, fault.persisted_commits(), &first_proc);

    println!();
    println!("== 2. what the store holds now ==");
    let durable = report::stored(store.as_ref(), &thread, &run).await?;

    println!();
    println!("== 3. second process: a NEW Runner resumes the run from the same store ==");
    let counter2 = InvocationCounter::new();
    let rig2 = rig(&counter2)?;
    let mut handle = runner(store.clone()).resume(&rig2.agent, &thread, &run);
    let events = handle.events();
    let second = handle.result().await;
    let second_proc = Process {
        llm: rig2.llm.clone(),
        tools: counter2,
        events: drain(events),
    };
    report::resume_events(&second_proc);

    println!();
    println!("== 4. summary ==");
    let reference = (&base.result, base.llm_calls, &base.tools);
    let ok = report::summary(&second, &first_proc, &second_proc, &durable, reference);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
