//! S3: physical bytes written per step as a run grows, and resume of a long run. Not timings
//! of many samples, so measured here: a 1000-step (and a 100-step) scripted run on the S3 test
//! service with async writes, stopped right after the commit holding its last step's
//! `post_llm` record (a crash inside the last tool step), then resumed by a store opened afresh
//! (cold caches, as after a restart). Bytes are what the store uploaded
//! ([`afk_store_s3::S3Store::traffic`]: record objects, index segments and heads), attributed
//! to the step of each commit.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use afk::runner::Outcome;
use afk::{
    Error, Result, RunId,
    store::{Commit, Store},
};
use afk_core::store::{Call, Done, HookStore, Hooks};
use afk_store_s3::{S3Store, S3Traffic};
use async_trait::async_trait;

use crate::support::servers::{S3Env, s3_config, unique};
use crate::support::{agent, runner, thread};

/// Per step: bytes uploaded, of which head bytes, and requests.
#[derive(Debug, Default, Clone, Copy)]
struct Step {
    bytes: u64,
    head_bytes: u64,
    head_puts: u64,
    requests: u64,
}

/// The hooks around the S3 store: attribute each commit's traffic to its step, and fail every
/// commit after the one that writes `stop_key` (the crash).
#[derive(Debug)]
struct Probe {
    s3: Arc<S3Store>,
    stop_key: String,
    state: Mutex<(u64, Vec<Step>, bool)>,
}

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

fn requests(t: &S3Traffic) -> u64 {
    t.gets + t.puts + t.other
}

#[async_trait]
impl Hooks for Probe {
    /// For a commit: the traffic before it, its step, whether it writes the stop key.
    type Note = Option<(S3Traffic, Option<u64>, bool)>;

    /// Each commit of a batch (the S3 store has no batch commit: `batch_commit` is off, so
    /// this is what it does itself) and an owned commit counted as `commit`.
    fn through_primitives(&self) -> bool {
        true
    }

    async fn before(&self, call: Call<'_>) -> Result<Self::Note> {
        let Call::Commit(commit) = call else {
            return Ok(None);
        };
        if self.state.lock().unwrap_or_else(PoisonError::into_inner).2 {
            return Err(Error::unavailable("bench: crashed").with_retryable(false));
        }
        let stops = commit.puts.iter().any(|(k, _)| *k == self.stop_key);
        Ok(Some((self.s3.traffic(), step_of(commit), stops)))
    }

    fn after(&self, note: Self::Note, done: Done<'_>) {
        let (Some((before, step_of_commit, stops)), true) = (note, done.is_ok()) else {
            return;
        };
        let after = self.s3.traffic();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = step_of_commit {
            st.0 = s;
        }
        let i = st.0 as usize;
        if st.1.len() <= i {
            st.1.resize(i + 1, Step::default());
        }
        let step = &mut st.1[i];
        step.bytes += after.put_bytes - before.put_bytes;
        step.head_bytes += after.head_bytes - before.head_bytes;
        step.head_puts += after.head_puts - before.head_puts;
        step.requests += requests(&after) - requests(&before);
        if stops {
            st.2 = true;
        }
    }
}

/// One crashed and resumed run.
#[derive(Debug)]
pub struct Measured {
    steps: u64,
    per_step: Vec<Step>,
    run_took: Duration,
    resume_took: Duration,
    resume_requests: u64,
}

async fn crash_and_resume(env: &S3Env, steps: u64) -> Measured {
    let bucket = unique("afk-s3long-");
    let cfg = s3_config(env, &bucket);
    let s3 = Arc::new(S3Store::open(cfg.clone()).await.expect("open S3"));
    let name = format!("run_s3_{steps}");
    let run = RunId::new(name.clone()).expect("run id");
    let hooks = Probe {
        s3: s3.clone(),
        stop_key: format!("checkpoint:{name}:{steps}:post_llm"),
        state: Mutex::new((0, Vec::new(), false)),
    };
    let probe = Arc::new(HookStore::new(s3, hooks));
    let r = runner(probe.clone(), true);
    let start = Instant::now();
    let res = r
        .run_with_id(&agent(steps), &thread(), run.clone(), "go")
        .result()
        .await;
    let run_took = start.elapsed();
    assert!(res.is_err(), "the run survived its crash");
    let per_step = probe
        .hooks()
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .1
        .clone();

    let fresh = Arc::new(S3Store::open(cfg).await.expect("reopen S3"));
    let r = runner(fresh.clone(), true);
    let before = fresh.traffic();
    let start = Instant::now();
    let out = r
        .resume(&agent(steps), &thread(), &run)
        .result()
        .await
        .expect("resume");
    let resume_took = start.elapsed();
    assert!(
        matches!(out, Outcome::Completed(_)),
        "resume did not finish"
    );
    let resume_requests = requests(&fresh.traffic()) - requests(&before);
    let _ = fresh.delete_run(&thread(), &run).await;
    Measured {
        steps,
        per_step,
        run_took,
        resume_took,
        resume_requests,
    }
}

/// Run the 100- and 1000-step measurements, if the S3 service is set.
pub async fn measure() -> Vec<Measured> {
    let Some(env) = crate::support::servers::s3_env() else {
        return Vec::new();
    };
    // Run lengths: `AFK_BENCH_S3_STEPS` (comma-separated), by default 100 and 1000.
    let lengths: Vec<u64> = std::env::var("AFK_BENCH_S3_STEPS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1000]);
    let mut out = Vec::new();
    for steps in lengths {
        out.push(crash_and_resume(&env, steps).await);
    }
    out
}

fn kb(b: f64) -> String {
    format!("{:.1} KB", b / 1e3)
}

/// Mean of steps `from..=to` (those that exist).
fn window(per: &[Step], from: u64, to: u64) -> Step {
    let picked: Vec<&Step> = (from..=to).filter_map(|i| per.get(i as usize)).collect();
    let n = picked.len().max(1) as u64;
    let sum = picked.iter().fold(Step::default(), |a, s| Step {
        bytes: a.bytes + s.bytes,
        head_bytes: a.head_bytes + s.head_bytes,
        head_puts: a.head_puts + s.head_puts,
        requests: a.requests + s.requests,
    });
    Step {
        bytes: sum.bytes / n,
        head_bytes: sum.head_bytes / n,
        head_puts: sum.head_puts,
        requests: sum.requests / n,
    }
}

/// The markdown section.
pub fn section(runs: &[Measured]) -> String {
    let mut s = String::from("## S3: bytes per step and resume of long runs\n\n");
    if runs.is_empty() {
        s.push_str("Not measured (set `AFK_TEST_S3_…`).\n\n");
        return s;
    }
    s.push_str(
        "A scripted run on the S3 test service (moto) with async writes, crashed right after the \
         commit holding its last step's `post_llm` record; bytes are every body the store \
         uploaded (record objects, index segments, heads), per step, as the mean of the ten \
         steps ending at step *n* (index merges happen every few steps, larger ones rarely: \
         the cumulative mean includes them all). Then resumed by a store opened afresh (cold \
         segment cache); one measurement each.\n\n",
    );
    s.push_str(
        "| run | step n | bytes/step (steps n−9…n) | of which heads | bytes per head write | S3 requests/step | cumulative bytes/step |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for m in runs {
        let points: &[u64] = if m.steps >= 1000 {
            &[10, 100, 999]
        } else {
            &[10, 99]
        };
        for &n in points {
            let w = window(&m.per_step, n.saturating_sub(9).max(1), n);
            let all = window(&m.per_step, 1, n);
            let per_head = if w.head_puts == 0 {
                0.0
            } else {
                w.head_bytes as f64 * 10.0 / w.head_puts as f64
            };
            let _ = writeln!(
                s,
                "| {} steps | {n} | {} | {} | {} | {} | {} |",
                m.steps,
                kb(w.bytes as f64),
                kb(w.head_bytes as f64),
                kb(per_head),
                w.requests,
                kb(all.bytes as f64)
            );
        }
    }
    s.push_str("\n| run | whole run until the crash | steps/s | resume (cold store) | S3 requests of the resume |\n");
    s.push_str("|---|---:|---:|---:|---:|\n");
    for m in runs {
        let _ = writeln!(
            s,
            "| {} steps | {:.1} s | {:.0} | {:.1} ms | {} |",
            m.steps,
            m.run_took.as_secs_f64(),
            m.steps as f64 / m.run_took.as_secs_f64(),
            m.resume_took.as_secs_f64() * 1e3,
            m.resume_requests
        );
    }
    s.push('\n');
    s
}
