//! Commits and store calls per tool step, async vs sync writes: not a timing, so measured here.
//! A 10-step scripted run per store and mode behind the counting wrapper; a store call is one
//! round trip on Redis (a commit is one script, a batch one pipeline). On S3 a call is several
//! requests: those are counted by the store itself ([`afk_store_s3::S3Store::traffic`]).

use std::fmt::Write as _;
use std::sync::Arc;

use afk::{MemoryStore, RunId, store::Store};

use crate::support::counting::{Counter, CountingStore};
use crate::support::{agent, run_to_end, runner};

const STEPS: u64 = 10;

/// One store and mode.
#[derive(Debug)]
pub struct Row {
    store: &'static str,
    async_writes: bool,
    commits: u64,
    calls: u64,
    /// S3 requests (GET, PUT, other), if the store is S3.
    requests: Option<u64>,
}

async fn measure(
    name: &'static str,
    store: Arc<dyn Store>,
    async_writes: bool,
    requests: impl Fn() -> Option<u64>,
) -> Row {
    let counting = Arc::new(CountingStore::new(store, Counter::default()));
    let r = runner(counting.clone(), async_writes);
    let mode = if async_writes { "a" } else { "s" };
    let run = RunId::new(format!("run_calls_{name}_{mode}")).expect("run id");
    let before = requests();
    run_to_end(&r, &agent(STEPS), run.clone()).await;
    let after = requests();
    // Counted before the clean-up, which is not the run's.
    let row = Row {
        store: name,
        async_writes,
        commits: counting.hooks().totals().0,
        calls: counting.hooks().calls(),
        requests: before.zip(after).map(|(b, a)| a - b),
    };
    let _ = counting.delete_run(&crate::support::thread(), &run).await;
    row
}

/// Measure every store that is reachable.
pub async fn rows() -> Vec<Row> {
    let mut out = Vec::new();
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for a in [true, false] {
        out.push(measure("memory", memory.clone(), a, || None).await);
    }
    #[cfg(feature = "redis")]
    if let Some(url) = crate::support::servers::redis_url() {
        let redis: Arc<dyn Store> = Arc::new(crate::support::servers::redis_store(&url).await);
        for a in [true, false] {
            out.push(measure("redis", redis.clone(), a, || None).await);
        }
    }
    #[cfg(feature = "s3")]
    if let Some(env) = crate::support::servers::s3_env() {
        let bucket = crate::support::servers::unique("afk-calls-");
        let s3 = Arc::new(crate::support::servers::s3_store(&env, &bucket).await);
        for a in [true, false] {
            let t = s3.clone();
            let traffic = move || {
                let t = t.traffic();
                Some(t.gets + t.puts + t.other)
            };
            out.push(measure("s3", s3.clone(), a, traffic).await);
        }
    }
    out
}

/// The markdown section.
pub fn section(rows: &[Row]) -> String {
    let mut s = String::from("## Commits and store round trips per step\n\n");
    let _ = writeln!(
        s,
        "One {STEPS}-step run of the scripted agent per store and mode, counted at the store \
         (a counting wrapper): commits applied and store calls of any kind (claim, reads, \
         commits, batches), per tool step. On Redis a call is one round trip. On S3 a call is \
         several requests (a commit: record PUTs in parallel (a commit's small values share one \
         pack object), then the head PUT, plus a head GET when the store does not hold the \
         head it wrote last); *S3 requests* \
         counts them all. *async* merges a run's queued commits and holds them until the \
         run's barrier (before each side effect) or the terminal flush asks for them: one \
         commit per tool step, the design's floor; a step the process began reads no effect \
         journal.\n"
    );
    s.push_str("| store | mode | commits/step | store round trips/step | S3 requests/step |\n");
    s.push_str("|---|---|---:|---:|---:|\n");
    let per = |n: u64| n as f64 / STEPS as f64;
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {} |",
            r.store,
            if r.async_writes { "async" } else { "sync" },
            per(r.commits),
            per(r.calls),
            r.requests
                .map_or_else(|| "–".into(), |n| format!("{:.1}", per(n)))
        );
    }
    s.push('\n');
    s
}
