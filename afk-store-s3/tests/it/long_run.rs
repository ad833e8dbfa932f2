//! A long run on S3: a cold resume reads its transcript log in a bounded number of requests
//! (the log entries travel inside the index segments), and what a step uploads stays flat as
//! the run grows. A real runner run of the scripted agent (one tool call per step, async
//! writes), crashed right after the commit holding its last step's `post_llm` record, then
//! resumed by a store opened afresh (nothing cached), as after a restart.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::{Arc, Mutex, PoisonError};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Limits, Outcome};
use afk_core::schema::LlmResponse;
use afk_core::store::{Call, Commit, Done, HookStore, Hooks};
use afk_core::testkit::deterministic_runner;
use afk_core::{CheckpointConfig, Error, Result, RunId, ThreadId};
use afk_store_s3::{S3Store, S3Traffic};
use async_trait::async_trait;
use serde_json::{Value, json};

/// Requests a cold resume of a run may take, whatever its length: the head, the index
/// segments (at most three per level), the snapshot, the effect rows of the last batch, the
/// few log entries still in the head's recent keys, and the resumed step's own commits.
const RESUME_REQUESTS_MAX: u64 = 50;

fn agent(steps: u64) -> Agent {
    let r = |v: Value| serde_json::from_value::<LlmResponse>(v).unwrap();
    let mut script: Vec<LlmResponse> = (0..steps)
        .map(|i| {
            r(
                json!({"text": format!("step {i}: adding"), "finish_reason": "tool_calls",
                "tool_calls": [{"id": format!("c{i}"), "tool_name": "add",
                    "arguments": {"a": i, "b": 1}}],
                "usage": {"input_tokens": 20, "output_tokens": 8, "total_tokens": 28}}),
            )
        })
        .collect();
    script.push(r(
        json!({"text": "done", "finish_reason": "stop", "tool_calls": [],
        "usage": {"input_tokens": 20, "output_tokens": 2, "total_tokens": 22}}),
    ));
    let mut agent = Agent::new(
        "long",
        "Add numbers.",
        "scripted-1",
        ScriptedLlm::new(script),
    )
    .with_tool(ScriptedTool::add(InvocationCounter::new()));
    agent.limits = Limits::default()
        .with_max_steps(steps + 5)
        .with_max_llm_calls(steps + 5)
        .with_max_tool_calls(steps + 5)
        .with_max_wall_time_ms(None);
    agent
}

fn requests(t: &S3Traffic) -> u64 {
    t.gets + t.puts + t.other
}

/// The step of a commit: the highest step of its checkpoint keys.
fn step_of(c: &Commit) -> Option<u64> {
    c.puts
        .iter()
        .filter_map(|(k, _)| {
            let mut f = k.split(':');
            (f.next() == Some("checkpoint"))
                .then(|| f.nth(1).and_then(|s| s.parse().ok()))
                .flatten()
        })
        .max()
}

/// Bytes uploaded per step (each commit's traffic to its step), and the crash: every commit
/// after the one writing `stop_key` fails.
#[derive(Debug)]
struct Probe {
    s3: Arc<S3Store>,
    stop_key: String,
    /// Current step, bytes per step, crashed.
    state: Mutex<(u64, Vec<u64>, bool)>,
}

#[async_trait]
impl Hooks for Probe {
    type Note = Option<(u64, Option<u64>, bool)>;

    fn through_primitives(&self) -> bool {
        true
    }

    async fn before(&self, call: Call<'_>) -> Result<Self::Note> {
        let Call::Commit(commit) = call else {
            return Ok(None);
        };
        if self.state.lock().unwrap_or_else(PoisonError::into_inner).2 {
            return Err(Error::unavailable("test: crashed").with_retryable(false));
        }
        let stops = commit.puts.iter().any(|(k, _)| *k == self.stop_key);
        Ok(Some((self.s3.traffic().put_bytes, step_of(commit), stops)))
    }

    fn after(&self, note: Self::Note, done: Done<'_>) {
        let (Some((before, step, stops)), true) = (note, done.is_ok()) else {
            return;
        };
        let after = self.s3.traffic().put_bytes;
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = step {
            st.0 = s;
        }
        let i = st.0 as usize;
        if st.1.len() <= i {
            st.1.resize(i + 1, 0);
        }
        st.1[i] += after - before;
        st.2 |= stops;
    }
}

/// Run `steps` steps, crash in the last one, resume with a fresh store. Returns the bytes
/// uploaded per step before the crash and the requests of the resume.
async fn crash_and_resume(cfg: &afk_store_s3::S3Config, steps: u64) -> (Vec<u64>, u64) {
    let thread = ThreadId::new("t").unwrap();
    let name = format!("run_long_{steps}");
    let run = RunId::new(name.clone()).unwrap();
    let s3 = Arc::new(S3Store::open(cfg.clone()).await.unwrap());
    let probe = Arc::new(HookStore::new(
        s3.clone(),
        Probe {
            s3,
            stop_key: format!("checkpoint:{name}:{steps}:post_llm"),
            state: Mutex::new((0, Vec::new(), false)),
        },
    ));
    let checkpoint = CheckpointConfig::default().with_async_writes(true);
    let r = deterministic_runner(probe.clone(), checkpoint.clone());
    let crashed = r
        .run_with_id(&agent(steps), &thread, run.clone(), "go")
        .result()
        .await;
    assert!(crashed.is_err(), "the run survived its crash");
    let per_step = probe
        .hooks()
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .1
        .clone();

    let fresh = Arc::new(S3Store::open(cfg.clone()).await.unwrap());
    let before = requests(&fresh.traffic());
    let out = deterministic_runner(fresh.clone(), checkpoint)
        .resume(&agent(steps), &thread, &run)
        .result()
        .await
        .unwrap();
    let Outcome::Completed(result) = out else {
        panic!("the resume did not complete: {out:?}");
    };
    assert_eq!(result.final_text, "done");
    assert_eq!(
        result.tool_executions.len() as u64,
        steps,
        "every step's call"
    );
    let resume = requests(&fresh.traffic()) - before;
    // The whole log, as every reader sees it, passes the store's checks after the resume.
    let report = afk_core::verify::verify_run(fresh.as_ref(), &thread, &run)
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    (per_step, resume)
}

fn mean(per_step: &[u64], from: u64, to: u64) -> f64 {
    let picked: Vec<u64> = (from..=to)
        .filter_map(|i| per_step.get(i as usize).copied())
        .collect();
    picked.iter().sum::<u64>() as f64 / picked.len().max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_resume_of_a_long_run_takes_a_bounded_number_of_requests_and_steps_stay_flat() {
    let Some(cfg) = common::config("", "longrun") else {
        return;
    };
    let (_, short) = crash_and_resume(&cfg, 100).await;
    let (per_step, long) = crash_and_resume(&cfg, 1000).await;
    assert!(
        short <= RESUME_REQUESTS_MAX && long <= RESUME_REQUESTS_MAX,
        "cold resume requests: {short} at 100 steps, {long} at 1000 steps \
         (at most {RESUME_REQUESTS_MAX} whatever the length)"
    );
    // Bytes a step uploads, as the mean of ten steps (merges of the index fall every few
    // steps): steps 1–10 against steps 991–1000. The run is deterministic, so are the merges.
    let (early, late) = (mean(&per_step, 1, 10), mean(&per_step, 991, 1000));
    assert!(
        late <= 1.5 * early,
        "bytes per step: {early:.0} over steps 1–10, {late:.0} over steps 991–1000"
    );
}
