//! Generated crash sequences: a run with parallel idempotent and at-most-once calls and a
//! delegation to a child run that charges is crashed up to 50 times (after a random number of
//! commits of each process: the fresh run, its resumes, the settlements, the child inside
//! them), and continued under the SAME run id each time, an operator settling every
//! `EffectUncertain` from the tools' ledger, until it ends. It must end with the uncrashed
//! result, each at-most-once effect exactly once, and a terminal resume must do nothing.
//!
//! The generator is counted: the test requires cases with 40+ crashes applied, crashes before
//! the run's first commit and right after it (before its step-1 snapshot, the window AFK
//! cannot resume from), crashes during resumes and settlements, and uncertain effects in the
//! child. Seeded: the seed is printed, `AFK_SEED=<seed>` replays it; cases from
//! `PROPTEST_CASES` (default 32).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, EffectPolicy, Outcome, Settlement};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};
use common::{agent_with, essence, resp, resume_or_start, runner};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};

const MAX_CRASHES: usize = 50;

/// Kills the current process right after an at-most-once charge ran (its next commit, the
/// result row, crashes), when the case planned it: the operator then has an uncertain effect
/// to settle.
#[derive(Debug, Default)]
struct KillSwitch {
    current: Mutex<Option<Arc<FaultStore>>>,
    /// Charge amounts (5: the parent's `c2`, 7: the child's `k1`) still to be killed after.
    armed: Mutex<Vec<i64>>,
}

impl KillSwitch {
    fn after_charge(&self, amount: i64) {
        let mut armed = self.armed.lock().unwrap();
        if let Some(i) = armed.iter().position(|a| *a == amount) {
            armed.remove(i);
            if let Some(f) = self.current.lock().unwrap().as_ref() {
                f.crash_after_commits(0, CrashMode::Down);
            }
        }
    }
}

fn charge(counter: &InvocationCounter, kill: &Arc<KillSwitch>) -> Arc<ScriptedTool> {
    let kill = kill.clone();
    ScriptedTool::new(
        "charge",
        EffectPolicy::AtMostOnce,
        counter.clone(),
        move |a| {
            kill.after_charge(a["amount"].as_i64().unwrap_or(0));
            Ok(json!({"charged": a["amount"].clone()}))
        },
    )
}

fn child(counter: &InvocationCounter, kill: &Arc<KillSwitch>) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "charging", "tool_calls": [
            {"id": "k1", "tool_name": "charge", "arguments": {"amount": 7}}]})),
        resp(json!({"text": "paid", "tool_calls": []})),
    ]);
    Agent::new("payer", "Pay.", "m1", llm).with_tool(charge(counter, kill))
}

/// `add` + `charge` in parallel, a delegation to `payer` (which charges), `echo`, the answer.
fn parent(counter: &InvocationCounter, kill: &Arc<KillSwitch>) -> Agent {
    let llm = ScriptedLlm::new(vec![
        resp(json!({"text": "add and charge", "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}},
            {"id": "c2", "tool_name": "charge", "arguments": {"amount": 5}}],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})),
        resp(json!({"text": "delegating", "tool_calls": [
            {"id": "d1", "tool_name": "payer", "arguments": {"input": "pay 7"}}]})),
        resp(json!({"text": "now echo", "tool_calls": [
            {"id": "c3", "tool_name": "echo", "arguments": {"text": "hi"}}]})),
        resp(json!({"text": "all done", "tool_calls": [],
            "usage": {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}})),
    ]);
    let mut agent = agent_with(llm, counter).with_subagent(child(counter, kill));
    agent.tools.retain(|t| t.spec().name != "charge");
    agent.with_tool(charge(counter, kill))
}

fn ids() -> (ThreadId, RunId) {
    (
        ThreadId::new("t_many").unwrap(),
        RunId::new("run_many").unwrap(),
    )
}

/// What the generated cases exercised.
#[derive(Debug, Default, Clone)]
struct Stats {
    cases: u32,
    crashes: u32,
    most_in_one_case: u32,
    before_first_commit: u32,
    before_step1_snapshot: u32,
    during_resumes: u32,
    during_settlements: u32,
    settlements: u32,
    child_uncertain: u32,
}

enum Next {
    Continue,
    Settle(RunId, String),
}

async fn uncrashed() -> Value {
    let (thread, run) = ids();
    let counter = InvocationCounter::new();
    let out = runner(Arc::new(MemoryStore::new()), false)
        .run_with_id(&parent(&counter, &Arc::default()), &thread, run, "go")
        .result()
        .await;
    match out {
        Ok(Outcome::Completed(r)) => {
            assert_eq!(r.final_text, "all done");
            essence(&r)
        }
        other => panic!("uncrashed run: {other:?}"),
    }
}

/// One generated case: crash points (after that many commits of each process, in order) and
/// whether to kill the process right after the parent's and the child's charge.
#[derive(Debug, Clone)]
struct Plan {
    crashes: Vec<u64>,
    kill_after_charge: (bool, bool),
}

/// Run one crash sequence to the end; `Err` names the violated property.
async fn one_case(plan_in: &Plan, want: &Value, stats: &mut Stats) -> Result<(), String> {
    let (thread, run) = ids();
    let inner = Arc::new(MemoryStore::new());
    let counter = InvocationCounter::new();
    let kill = Arc::new(KillSwitch::default());
    let (k_parent, k_child) = plan_in.kill_after_charge;
    kill.armed.lock().unwrap().extend(
        [(k_parent, 5), (k_child, 7)]
            .iter()
            .filter(|(k, _)| *k)
            .map(|(_, a)| *a),
    );
    let crashes = &plan_in.crashes;
    let mut plan = crashes.iter().copied();
    let mut next = Next::Continue;
    let mut applied = 0;
    let mut first = true;
    let at = |what: String| format!("crashes {crashes:?}: {what}");
    let result = loop {
        if applied > MAX_CRASHES as u32 + 2 || stats.settlements > 40 {
            return Err(at("too many processes".into()));
        }
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        if let Some(k) = plan.next() {
            fault.crash_after_commits(k, CrashMode::Down);
        }
        *kill.current.lock().unwrap() = Some(fault.clone());
        let r = runner(fault.clone(), false);
        let settling = matches!(next, Next::Settle(..));
        let h = match &next {
            Next::Continue => resume_or_start(&r, &parent(&counter, &kill), &inner, &thread, &run),
            Next::Settle(target, call) => {
                // The operator reads the ledger: did the charge happen?
                let s = if counter.get(call) == 1 {
                    let amount = if call == "k1" { 7 } else { 5 };
                    Settlement::Ran {
                        output: json!({"charged": amount}),
                    }
                } else {
                    Settlement::DidNotRun
                };
                stats.settlements += 1;
                let agent = if *target == run {
                    parent(&counter, &kill)
                } else {
                    child(&counter, &kill)
                };
                r.resume_settling(&agent, &thread, target, call.clone(), s)
            }
        };
        let out = h.result().await;
        for id in ["c2", "k1"] {
            if counter.get(id) > 1 {
                return Err(at(format!("at-most-once call {id} ran twice")));
            }
        }
        if fault.crashed() {
            applied += 1;
            stats.crashes += 1;
            let keys = inner.snapshot(&thread);
            if !keys.contains_key(&format!("checkpoint:{run}:latest")) {
                stats.before_first_commit += 1;
            } else if !keys.contains_key(&format!("checkpoint:{run}:1:runtime_state")) {
                stats.before_step1_snapshot += 1;
            }
            if settling {
                stats.during_settlements += 1;
            } else if !first {
                stats.during_resumes += 1;
            }
            // After a crash, a plain resume continues (from the settlement if it was saved;
            // if not, the call is uncertain again and is settled again).
            next = Next::Continue;
            first = false;
            continue;
        }
        first = false;
        match (out, &next) {
            (Ok(Outcome::Completed(r)), Next::Settle(target, _)) if *target != run => {
                if r.final_text != "paid" {
                    return Err(at(format!("settled child ended {r:?}")));
                }
                next = Next::Continue;
            }
            (Ok(Outcome::Completed(r)), _) => break *r,
            (Err(e), _) if e.kind() == ErrorKind::EffectUncertain => {
                let key = e.key().unwrap_or_default().to_owned();
                let parts: Vec<&str> = key.split(':').collect();
                let [_, target, _, call] = parts[..] else {
                    return Err(at(format!("EffectUncertain without an effect key: {e}")));
                };
                let target = RunId::new(target).map_err(|e| at(e.to_string()))?;
                if target != run {
                    stats.child_uncertain += 1;
                    if !e.message().contains("tool call d1") {
                        return Err(at(format!("the parent's error names no call: {e}")));
                    }
                }
                next = Next::Settle(target, call.to_owned());
            }
            (other, _) => return Err(at(format!("a process ended with {other:?}"))),
        }
    };
    stats.most_in_one_case = stats.most_in_one_case.max(applied);
    if essence(&result) != *want {
        return Err(at(format!(
            "result {} differs from the uncrashed {want}",
            essence(&result)
        )));
    }
    for id in ["c2", "k1"] {
        if counter.get(id) != 1 {
            return Err(at(format!("{id} ran {} times", counter.get(id))));
        }
    }
    // A terminal resume returns the result and runs nothing.
    let before = counter.snapshot();
    let again = runner(inner.clone(), false)
        .resume(&parent(&counter, &kill), &thread, &run)
        .result()
        .await;
    match again {
        Ok(Outcome::Completed(r)) if essence(&r) == *want && counter.snapshot() == before => Ok(()),
        other => Err(at(format!("terminal resume gave {other:?}"))),
    }
}

fn test_runner() -> (TestRunner, u64) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let seed = afk_core::testkit::seed_or(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!("resume_crashes: seed {seed} (replay with AFK_SEED={seed}), {cases} cases");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    (
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)),
        seed,
    )
}

/// Crash points: mostly a few commits into a process (so most crashes cost progress and a
/// case applies many of them), sometimes further; the first crash is often at the run's
/// very first commits.
/// Half the cases get a long sequence (40 to 50 crashes).
fn plans() -> impl Strategy<Value = Plan> {
    let point = prop_oneof![3 => 0u64..4, 1 => 0u64..24];
    let first = prop_oneof![1 => 0u64..2, 1 => 0u64..24];
    let len = prop_oneof![1 => 0..MAX_CRASHES, 1 => 39..MAX_CRASHES];
    let rest = len.prop_flat_map(move |n| prop::collection::vec(point.clone(), n));
    (first, rest, any::<(bool, bool)>()).prop_map(|(f, mut rest, kill_after_charge)| {
        rest.insert(0, f);
        Plan {
            crashes: rest,
            kill_after_charge,
        }
    })
}

#[test]
fn generated_crash_sequences_of_up_to_50_crashes_give_the_uncrashed_result() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let want = rt.block_on(uncrashed());
    let stats = Mutex::new(Stats::default());
    let (mut runner, seed) = test_runner();
    runner
        .run(&plans(), |plan| {
            let mut s = Stats::default();
            let res = rt.block_on(one_case(&plan, &want, &mut s));
            let mut all = stats.lock().unwrap();
            all.cases += 1;
            all.crashes += s.crashes;
            all.most_in_one_case = all.most_in_one_case.max(s.most_in_one_case);
            all.before_first_commit += s.before_first_commit;
            all.before_step1_snapshot += s.before_step1_snapshot;
            all.during_resumes += s.during_resumes;
            all.during_settlements += s.during_settlements;
            all.settlements += s.settlements;
            all.child_uncertain += s.child_uncertain;
            res.map_err(TestCaseError::fail)
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let s = stats.into_inner().unwrap();
    println!("resume_crashes: {s:?}");
    if s.cases >= 16 {
        assert!(s.most_in_one_case >= 40, "no long crash sequence: {s:?}");
        assert!(
            s.before_first_commit > 0,
            "no crash before the first commit: {s:?}"
        );
        assert!(
            s.before_step1_snapshot > 0,
            "no crash before step 1's snapshot: {s:?}"
        );
        assert!(s.during_resumes > 0 && s.during_settlements > 0, "{s:?}");
        assert!(
            s.child_uncertain > 0,
            "no uncertain effect in the child: {s:?}"
        );
    }
}
