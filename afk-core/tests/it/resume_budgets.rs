//! Budgets across crashes (see `Limits`): `max_steps` counts logical steps, so a step redone
//! after a crash inside its model turn keeps its number and crashes never change the result;
//! `max_llm_calls` counts real model calls, including calls whose answer a crash lost; cost
//! counts the answers the run recorded (a lost answer's cost was never seen).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{Agent, LlmClient, LlmRequest, Outcome};
use afk_core::schema::{AgentResult, LlmResponse};
use afk_core::{ErrorKind, MemoryStore, Result, RunId, ThreadId};
use async_trait::async_trait;
use common::{agent_with, essence, latest_terminal, runner, script};

/// A model that answers from its script and then, as many times as planned for the request's
/// step, dies like a process killed mid-turn: the run task panics after the call was made,
/// so the call is spent and its answer lost.
#[derive(Debug)]
struct DyingLlm {
    inner: Arc<ScriptedLlm>,
    deaths: Mutex<BTreeMap<u64, u32>>,
    keys: Mutex<Vec<String>>,
}

#[async_trait]
impl LlmClient for DyingLlm {
    fn provider(&self) -> String {
        self.inner.provider()
    }

    async fn complete(&self, request: LlmRequest) -> Result<LlmResponse> {
        self.keys
            .lock()
            .unwrap()
            .push(request.idempotency_key.clone());
        let step = request.step;
        let answer = self.inner.complete(request).await?;
        let die = match self.deaths.lock().unwrap().get_mut(&step) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        };
        assert!(!die, "simulated crash inside the model turn of step {step}");
        Ok(answer)
    }
}

/// The shared three-step script, each answer costing 0.4 USD.
fn priced_script() -> Vec<LlmResponse> {
    let mut s = script();
    for r in &mut s {
        r.cost_usd = Some(0.4);
    }
    s
}

struct Outcomes {
    result: Result<Outcome>,
    processes: u32,
    keys: Vec<String>,
    store: Arc<MemoryStore>,
}

/// Start the run, resume it after every crash (same run id), until it ends.
async fn run_dying(deaths: &[(u64, u32)], limits: impl Fn(&mut Agent)) -> Outcomes {
    let counter = InvocationCounter::new();
    let llm = Arc::new(DyingLlm {
        inner: ScriptedLlm::new(priced_script()),
        deaths: Mutex::new(deaths.iter().copied().collect()),
        keys: Mutex::new(Vec::new()),
    });
    let mut agent = agent_with(ScriptedLlm::new(Vec::new()), &counter);
    agent.llm = llm.clone();
    limits(&mut agent);
    let store = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t_budget").unwrap();
    let run = RunId::new("run_budget").unwrap();
    let mut result = runner(store.clone(), false)
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await;
    let mut processes = 1;
    while matches!(&result, Err(e) if e.kind() == ErrorKind::Unexpected) && processes < 200 {
        processes += 1;
        result = runner(store.clone(), false)
            .resume(&agent, &thread, &run)
            .result()
            .await;
    }
    let keys = llm.keys.lock().unwrap().clone();
    Outcomes {
        result,
        processes,
        keys,
        store,
    }
}

fn completed(o: &Outcomes) -> &AgentResult {
    match &o.result {
        Ok(Outcome::Completed(r)) => r,
        other => panic!("expected a completed run, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_steps_counts_logical_steps_so_crashes_mid_turn_change_nothing() {
    let exact = |a: &mut Agent| {
        a.limits.max_steps = 3;
        a.limits.max_llm_calls = 1_000;
    };
    let clean = run_dying(&[], exact).await;
    let want = completed(&clean);
    assert_eq!(want.state_snapshot.step, 3);

    // Ten crashes inside each model turn: 30 redone steps with a budget of exactly 3 steps.
    let crashed = run_dying(&[(1, 10), (2, 10), (3, 10)], exact).await;
    assert_eq!(
        crashed.processes, 31,
        "one process per crash, plus the last"
    );
    let got = completed(&crashed);
    assert_eq!(essence(got), essence(want));
    assert_eq!(got.state_snapshot.step, 3);
    assert_eq!(
        got.state_snapshot.llm_calls, 3,
        "the result counts answers used"
    );
    // Every redone model call is the same logical step: the same idempotency key.
    let distinct: std::collections::BTreeSet<&String> = crashed.keys.iter().collect();
    assert_eq!(
        distinct.into_iter().cloned().collect::<Vec<_>>(),
        [
            "run_budget:step:1",
            "run_budget:step:2",
            "run_budget:step:3"
        ],
        "{:?}",
        crashed.keys
    );
    assert_eq!(crashed.keys.len(), 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_llm_calls_counts_model_calls_whose_answer_a_crash_lost() {
    // Three calls allowed, one lost to a crash in step 2: the fourth call is refused.
    let three = |a: &mut Agent| a.limits.max_llm_calls = 3;
    let o = run_dying(&[(2, 1)], three).await;
    let err = o.result.as_ref().map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BudgetExceeded, "{err}");
    assert!(err.message().contains("max_llm_calls=3"), "{err}");
    assert_eq!(o.keys.len(), 3, "three real calls: {:?}", o.keys);
    let rec = latest_terminal(&o.store, &ThreadId::new("t_budget").unwrap(), "run_budget")
        .expect("a failed terminal record");
    assert_eq!(rec["payload"]["state"], "failed");

    // Four allowed: the run completes with the uncrashed result (which counts answers used).
    let four = |a: &mut Agent| a.limits.max_llm_calls = 4;
    let want = essence(completed(&run_dying(&[], four).await));
    let o = run_dying(&[(2, 1)], four).await;
    assert_eq!(essence(completed(&o)), want);
    assert_eq!(completed(&o).state_snapshot.llm_calls, 3);
    assert_eq!(o.keys.len(), 4);

    // Two lost calls in two different steps with four allowed: refused again (lost calls in
    // different processes add up).
    let o = run_dying(&[(1, 1), (3, 1)], four).await;
    let err = o.result.as_ref().map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BudgetExceeded, "{err}");
    assert_eq!(o.keys.len(), 4, "{:?}", o.keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_counts_the_answers_the_run_recorded() {
    let capped = |a: &mut Agent| a.limits.max_cost_usd = Some(1.25);
    let want = completed(&run_dying(&[], capped).await).total_cost_usd;
    assert!((want.unwrap() - 1.2).abs() < 1e-9, "{want:?}");
    // Five lost answers per step would cost 6 USD more; their cost was never seen.
    let o = run_dying(&[(1, 5), (2, 5), (3, 5)], capped).await;
    assert_eq!(completed(&o).total_cost_usd, want);
    assert_eq!(o.keys.len(), 18);
}
