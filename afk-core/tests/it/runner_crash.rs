//! Rust-native runs crashed after every single store commit and resumed: same result as the
//! uncrashed run, no durable tool result re-executed, no durable model answer re-requested,
//! at-most-once tools executed at most once (or the resume stops with `EffectUncertain`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, Outcome, Runner};
use afk_core::schema::AgentResult;
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, durable_results, essence, resume_or_start, script};
use serde_json::{Value, json};

struct Rig {
    llm: Arc<ScriptedLlm>,
    agent: Agent,
}

fn rig(counter: &InvocationCounter) -> Rig {
    let llm = ScriptedLlm::new(script());
    let agent = agent_with(llm.clone(), counter);
    Rig { llm, agent }
}

/// Synchronous writes, so "crash after commit k" is exact.
fn runner(store: Arc<dyn Store>) -> Runner {
    common::runner(store, false)
}

async fn uncrashed() -> (AgentResult, u64) {
    let inner = Arc::new(MemoryStore::new());
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    let counter = InvocationCounter::new();
    let rig = rig(&counter);
    let thread = ThreadId::new("t_crash").unwrap();
    let run = RunId::new("run_crash").unwrap();
    let out = runner(fault.clone())
        .run_with_id(&rig.agent, &thread, run, "go")
        .result()
        .await
        .unwrap();
    let Outcome::Completed(r) = out else {
        panic!("paused")
    };
    (*r, fault.persisted_commits())
}

/// Crash the fresh run after `k` commits; then crash its resume after `j` commits (if given);
/// then resume to the end. Returns a description of any violated property.
async fn crash_and_resume(k: u64, j: Option<u64>, want: &Value) -> Result<(), String> {
    let inner = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_crash").unwrap();
    let run = RunId::new("run_crash").unwrap();
    let counter = InvocationCounter::new();
    let mut asked_before: Vec<usize> = Vec::new();

    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    fault.crash_after_commits(k, CrashMode::Down);
    let r1 = rig(&counter);
    let first = runner(fault.clone())
        .run_with_id(&r1.agent, &thread, run.clone(), "go")
        .result()
        .await;
    asked_before.extend(r1.llm.asked());
    if first.is_ok() {
        return Err(format!("k={k}: run survived a crash"));
    }
    if let Some(j) = j {
        let fault2 = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault2.crash_after_commits(j, CrashMode::Down);
        let r2 = rig(&counter);
        let _ = resume_or_start(&runner(fault2), &r2.agent, &inner, &thread, &run)
            .result()
            .await;
        asked_before.extend(r2.llm.asked());
    }

    let durable = durable_results(&inner, &thread);
    let before = counter.snapshot();
    let r3 = rig(&counter);
    // Always the SAME run id: resumed from whatever it committed (from its first commit on),
    // or started again if it committed nothing.
    let res = resume_or_start(&runner(inner.clone()), &r3.agent, &inner, &thread, &run)
        .result()
        .await;
    let after = counter.snapshot();
    let resumed_exec: BTreeMap<String, u64> = after
        .iter()
        .map(|(id, n)| (id.clone(), n - before.get(id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    for id in &durable {
        if resumed_exec.contains_key(id) {
            return Err(format!(
                "k={k} j={j:?}: call {id} had a durable result and ran again"
            ));
        }
    }
    if counter.get("c2") > 1 {
        return Err(format!(
            "k={k} j={j:?}: at-most-once charge ran {} times",
            counter.get("c2")
        ));
    }
    // A model answer is durable once a later answer was requested; only the last request of a
    // crashed process may be repeated.
    let last = asked_before.last().copied();
    for k2 in r3.llm.asked() {
        if asked_before.contains(&k2) && Some(k2) != last {
            return Err(format!("k={k} j={j:?}: model answer #{k2} requested again"));
        }
    }
    match res {
        Ok(Outcome::Completed(r)) => {
            if essence(&r) != *want {
                return Err(format!("k={k} j={j:?}: result {} != {}", essence(&r), want));
            }
            // Resuming a finished run does nothing.
            let r4 = rig(&counter);
            let again = runner(inner.clone())
                .resume(&r4.agent, &thread, &run)
                .result()
                .await;
            let Ok(Outcome::Completed(r_again)) = again else {
                return Err("terminal resume failed".into());
            };
            if essence(&r_again) != *want || r4.llm.calls() != 0 || counter.snapshot() != after {
                return Err(format!("k={k} j={j:?}: terminal resume executed something"));
            }
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::EffectUncertain => {
            // The at-most-once call's intent is durable without a result: it may or may not
            // have run (a crash can also stop it before it starts).
            let snap = inner.snapshot(&thread);
            let intent = snap.iter().any(|(key, v)| {
                key.ends_with(":c2")
                    && serde_json::from_slice::<Value>(v)
                        .is_ok_and(|row| row.get("status") == Some(&json!("intent")))
            });
            if !intent || counter.get("c2") > 1 || !resumed_exec.is_empty() || r3.llm.calls() != 0 {
                return Err(format!(
                    "k={k} j={j:?}: EffectUncertain without a lone intent for c2"
                ));
            }
            Ok(())
        }
        other => Err(format!("k={k} j={j:?}: resume gave {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_every_commit_then_resume() {
    let (want_result, n) = uncrashed().await;
    let want = essence(&want_result);
    assert_eq!(want_result.final_text, "all done");
    assert!(n > 20, "a three-step run makes many commits, got {n}");
    let mut problems = Vec::new();
    for k in 0..n {
        if let Err(p) = crash_and_resume(k, None, &want).await {
            problems.push(p);
        }
        for j in [0, 1, 2, 5, 9] {
            if let Err(p) = crash_and_resume(k, Some(j), &want).await {
                problems.push(p);
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
