//! Runs aborted (task abort, as a crash of the process would stop them) at every await point
//! of a whole run — every store call including the writer's commits, barriers and the terminal
//! flush, every model call, every tool call — and resumed on the same `Runner` (whose writer
//! may still hold the aborted run's queued commits), also aborted a second time in a row.
//! Checked as in `runner_crash.rs`: the same result as the uncrashed run; no tool with a
//! durable result executed again; no durable model answer requested again; the at-most-once
//! tool executed at most once or the resume stops with `EffectUncertain`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, Outcome, RunHandle, Runner, ToolRef};
use afk_core::{ErrorKind, MemoryStore, Result, RunId, ThreadId};
use common::gate::{self, Gate, GatedLlm, GatedStore, GatedTool};
use common::{agent_with, essence, lone_intent, resume_or_start, runner, script};
use serde_json::Value;

/// Catches a hang; measures nothing (a loaded 2-core machine can be slow).
const NO_HANG: Duration = Duration::from_secs(60);

struct World {
    inner: Arc<MemoryStore>,
    store: Arc<GatedStore>,
    gate: Arc<Gate>,
    counter: InvocationCounter,
    runner: Runner,
    thread: ThreadId,
    run: RunId,
}

fn world(async_writes: bool) -> World {
    let inner = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let counter = InvocationCounter::new();
    let store = gate::gated(inner.clone(), gate.clone(), counter.clone());
    World {
        runner: runner(store.clone(), async_writes),
        inner,
        store,
        gate,
        counter,
        thread: ThreadId::new("t_abort").unwrap(),
        run: RunId::new("run_abort").unwrap(),
    }
}

/// The scenario's agent with its model and tools behind the gate.
fn gated_agent(w: &World) -> (Agent, Arc<ScriptedLlm>) {
    let llm = ScriptedLlm::new(script());
    let mut agent = agent_with(llm.clone(), &w.counter);
    agent.llm = Arc::new(GatedLlm {
        inner: llm.clone(),
        gate: w.gate.clone(),
    });
    agent.tools = agent
        .tools
        .into_iter()
        .map(|t| {
            Arc::new(GatedTool {
                inner: t,
                gate: w.gate.clone(),
            }) as ToolRef
        })
        .collect();
    (agent, llm)
}

/// Await `h`; if the gate blocks first, abort the run task there. Returns the outcome and the
/// label of the point aborted at.
async fn until_abort(h: RunHandle, gate: &Gate) -> (Result<Outcome>, Option<String>) {
    let abort = h.abort_handle().unwrap();
    let fut = h.result();
    tokio::pin!(fut);
    tokio::select! {
        biased;
        r = &mut fut => (r, None),
        _ = gate.reached() => {
            abort.abort();
            let r = tokio::time::timeout(NO_HANG, fut).await.expect("aborted run resolves");
            (r, gate.hit_label())
        }
    }
}

/// Abort the fresh run at point `n`, its resume at point `m` (if given), then resume to the
/// end. `Ok(labels)`: the points aborted at; `Ok(empty)` when the run has fewer than `n`
/// points. `Err`: a violated property.
async fn abort_and_resume(
    async_writes: bool,
    n: u64,
    m: Option<u64>,
    want: &Value,
) -> std::result::Result<Vec<String>, String> {
    let w = world(async_writes);
    let at = format!("async={async_writes} n={n} m={m:?}");
    let mut asked_before: Vec<usize> = Vec::new();
    let mut labels = Vec::new();

    let (a1, llm1) = gated_agent(&w);
    w.gate.arm(n);
    let h = w.runner.run_with_id(&a1, &w.thread, w.run.clone(), "go");
    let (first, label) = until_abort(h, &w.gate).await;
    asked_before.extend(llm1.asked());
    let Some(label) = label else {
        return match first {
            Ok(Outcome::Completed(r)) if essence(&r) == *want => Ok(labels),
            other => Err(format!("{at}: unaborted run gave {other:?}")),
        };
    };
    if first.as_ref().map_err(|e| e.kind()).err() != Some(ErrorKind::Cancelled) {
        return Err(format!("{at}: aborted run gave {first:?}"));
    }
    labels.push(label);
    if let Some(m) = m {
        let (a2, llm2) = gated_agent(&w);
        w.gate.arm(m);
        let h = resume_or_start(&w.runner, &a2, &w.inner, &w.thread, &w.run);
        let (_, label) = until_abort(h, &w.gate).await;
        asked_before.extend(llm2.asked());
        labels.extend(label.map(|l| format!("resume: {l}")));
    }

    w.gate.disarm();
    let (a3, llm3) = gated_agent(&w);
    // Always the SAME run id (started again only if nothing of it was committed).
    let h = resume_or_start(&w.runner, &a3, &w.inner, &w.thread, &w.run);
    let res = tokio::time::timeout(NO_HANG, h.result())
        .await
        .map_err(|_| format!("{at}: final resume hung"))?;

    // No tool with a durable result (as of the resume's claim) ran again in that resume.
    let claims = w.store.hooks().claims.lock().unwrap().clone();
    let end = w.counter.snapshot();
    for (i, seen) in claims.iter().enumerate().skip(1) {
        let next = claims.get(i + 1).map_or(&end, |c| &c.executed);
        for id in &seen.durable {
            let ran = next.get(id).copied().unwrap_or(0);
            if ran > seen.executed.get(id).copied().unwrap_or(0) {
                return Err(format!(
                    "{at}: call {id} had a durable result and ran again"
                ));
            }
        }
    }
    if w.counter.get("c2") > 1 {
        return Err(format!(
            "{at}: at-most-once charge ran {}x",
            w.counter.get("c2")
        ));
    }
    let last = asked_before.last().copied();
    for k in llm3.asked() {
        if asked_before.contains(&k) && Some(k) != last {
            return Err(format!("{at}: model answer #{k} requested again"));
        }
    }
    let before_final = claims
        .last()
        .map(|c| c.executed.clone())
        .unwrap_or_default();
    match res {
        Ok(Outcome::Completed(r)) if essence(&r) == *want => {
            let (a4, llm4) = gated_agent(&w);
            let again = w.runner.resume(&a4, &w.thread, &w.run).result().await;
            match again {
                Ok(Outcome::Completed(r2)) if essence(&r2) == *want => {}
                other => return Err(format!("{at}: terminal resume gave {other:?}")),
            }
            if w.counter.snapshot() != end || llm4.calls() != 0 {
                return Err(format!("{at}: terminal resume executed something"));
            }
            Ok(labels)
        }
        Err(e) if e.kind() == ErrorKind::EffectUncertain => {
            if !lone_intent(&w.inner, &w.thread, "c2") || end != before_final || llm3.calls() != 0 {
                return Err(format!(
                    "{at}: EffectUncertain without a lone intent for c2"
                ));
            }
            Ok(labels)
        }
        other => Err(format!("{at}: resume gave {other:?}")),
    }
}

/// The uncrashed result and the await points of the whole run.
async fn uncrashed(async_writes: bool) -> (Value, Vec<String>) {
    let w = world(async_writes);
    let (a, _) = gated_agent(&w);
    w.gate.disarm();
    let out = w
        .runner
        .run_with_id(&a, &w.thread, w.run.clone(), "go")
        .result()
        .await;
    let Ok(Outcome::Completed(r)) = out else {
        panic!("uncrashed run: {out:?}")
    };
    assert_eq!(r.final_text, "all done");
    assert_eq!(w.gate.count() as usize, w.gate.seen().len());
    (essence(&r), w.gate.seen())
}

async fn every_point(async_writes: bool) {
    let (want, seen) = uncrashed(async_writes).await;
    let points = seen.len() as u64;
    // A three-step run: a claim, per step at least step_started, two snapshots, pre/post LLM,
    // the model call; two tool batches; the terminal record. The write-behind writer merges a
    // run's queued commits, so it makes fewer store calls: per step the model call, the tool
    // call and the commits before each barrier.
    let (least_points, least) = if async_writes { (10, 10) } else { (30, 25) };
    assert!(points > least_points, "too few await points: {points}");
    let mut problems = Vec::new();
    let mut covered = BTreeSet::new();
    for n in 1..=points + 2 {
        for m in [None, Some(1), Some(2), Some(3), Some(5), Some(8), Some(13)] {
            match abort_and_resume(async_writes, n, m, &want).await {
                Ok(labels) => {
                    if let Some(l) = labels.first() {
                        covered.insert(l.clone());
                    }
                }
                Err(p) => problems.push(p),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!(
        "async={async_writes}: {points} await points, {} distinct abort points",
        covered.len()
    );
    // Every distinct point of the run was aborted at (labels repeat for repeated keys, e.g.
    // the same snapshot key written twice in a step).
    let distinct: BTreeSet<String> = seen.into_iter().collect();
    let missed: Vec<&String> = distinct.difference(&covered).collect();
    assert!(missed.is_empty(), "never aborted at {missed:?}");
    assert!(
        covered.len() > least,
        "too few distinct points: {covered:?}"
    );
    for needle in [
        "claim",
        "llm step 3",
        "tool c1",
        "tool c2",
        "tool c3",
        "run_terminal",
    ] {
        assert!(
            covered.iter().any(|l| l.contains(needle)),
            "never aborted at {needle}: {covered:?}"
        );
    }
}

#[tokio::test]
async fn abort_at_every_await_point_with_inline_writes() {
    every_point(false).await;
}

#[tokio::test]
async fn abort_at_every_await_point_with_the_write_behind_writer() {
    every_point(true).await;
}
