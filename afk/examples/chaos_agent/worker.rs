//! The worker mode of the campaign: a `Worker` process over the campaign's runs, and the count
//! of runs that have not finished.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use afk::runner::{Runner, Worker, WorkerConfig};
use afk::schema::{MarkState, RunMark};
use afk::store::Store;
use afk::{Error, RunId, ThreadId};

use super::Cli;
use super::plan::Plan;

/// The campaign's runs: `(index, seed)` from lines `<index> <seed>`.
fn read_runs(path: &Path) -> afk::Result<Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid_input(format!("cannot read {}: {e}", path.display())))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut w = l.split_whitespace().map(str::parse::<u64>);
            match (w.next(), w.next()) {
                (Some(Ok(i)), Some(Ok(s))) => Ok((i, s)),
                _ => Err(Error::invalid_input(format!("bad runs line {l:?}"))),
            }
        })
        .collect()
}

/// The ledger of run `index`, beside the one given on the command line.
fn ledger(cli: &Cli, index: u64) -> std::path::PathBuf {
    let dir = cli.ledger.parent().unwrap_or(Path::new("."));
    dir.join(format!("ledger-{index}.jsonl"))
}

/// Run a worker over the listed runs until killed; with `submit`, start the runs not stored
/// yet (after the worker: it takes its earlier incarnation's runs, not these). Prints `ready`, then `takeover <ms>` for each expired lease it took over.
pub async fn run(runner: &Runner, cli: &Cli, runs: &Path, submit: bool) -> afk::Result<ExitCode> {
    let runs = read_runs(runs)?;
    let mut worker = Worker::new(runner.clone()).with_config(
        WorkerConfig::default()
            .with_concurrency(8)
            .with_poll_interval(Duration::from_millis(200))
            .with_backoff(Duration::from_millis(200), Duration::from_secs(2))
            .with_shutdown_deadline(Duration::from_secs(2)),
    );
    for &(index, seed) in &runs {
        let agent = Plan::from_seed(seed)
            .agent(&ledger(cli, index))
            .with_version(index.to_string());
        worker = worker.register(agent);
    }
    let handle = worker.start();
    let mut submitted = 0u64;
    if submit {
        let store = runner.store();
        for &(index, seed) in &runs {
            let (thread, run) = ids(index)?;
            if store
                .get(&thread, &afk::store::latest_key(&run))
                .await?
                .is_some()
            {
                continue;
            }
            let agent = Plan::from_seed(seed)
                .agent(&ledger(cli, index))
                .with_version(index.to_string());
            // Not awaited: the worker's index walk and this process's own runs both go on.
            let _ = runner.run_with_id(&agent, &thread, run, "go");
            submitted += 1;
        }
    }
    println!("ready");
    println!("submitted {submitted}");
    let mut reported = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stats = handle.stats();
        for d in stats.takeover_delays_ms.iter().skip(reported) {
            println!("takeover {d}");
        }
        reported = stats.takeover_delays_ms.len();
    }
}

/// The thread and run of campaign run `index`.
pub fn ids(index: u64) -> afk::Result<(ThreadId, RunId)> {
    Ok((
        ThreadId::new(format!("chaos-{index}"))?,
        RunId::new(format!("run_{index}"))?,
    ))
}

/// Print `pending <n>` (the campaign's runs that have not finished, children included) and
/// `uncertain <index>` for each top-level run waiting for a settlement, or whose child is.
pub async fn pending(store: &dyn Store, runs: Option<&Path>) -> afk::Result<ExitCode> {
    let mut cursor: Option<String> = None;
    let (mut n, mut uncertain) = (0u64, std::collections::BTreeSet::new());
    loop {
        let page = store.list_attention(cursor.as_deref(), 1000).await?;
        for r in page.runs {
            let Some(index) = r.thread.as_str().strip_prefix("chaos-") else {
                continue;
            };
            n += 1;
            if RunMark::decode(&r.entry).is_some_and(|m| m.state == MarkState::Uncertain) {
                uncertain.insert(index.to_owned());
            }
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    println!("pending {n}");
    for i in uncertain {
        println!("uncertain {i}");
    }
    for (index, _) in runs.map(read_runs).transpose()?.unwrap_or_default() {
        let (thread, run) = ids(index)?;
        if store
            .get(&thread, &afk::store::latest_key(&run))
            .await?
            .is_none()
        {
            println!("missing {index}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
