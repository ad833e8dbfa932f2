//! Bytes written per step: not a timing, so measured here directly. A scripted run of n steps on
//! the in-memory store behind a counting wrapper; the sum of `Commit::byte_len` over applied
//! commits (keys and values), per run and for the last step alone.

use std::fmt::Write as _;
use std::sync::Arc;

use afk::{MemoryStore, RunId};

use crate::support::counting::{Counter, CountingStore};
use crate::support::{agent, run_to_end, runner};

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    steps: u64,
    sync_commits: u64,
    sync_bytes: u64,
    last_step_bytes: u64,
    async_commits: u64,
    async_bytes: u64,
    last_step_kinds: Vec<(String, u64)>,
}

async fn measure(steps: u64, async_writes: bool) -> Arc<CountingStore> {
    let store = Arc::new(CountingStore::new(
        Arc::new(MemoryStore::new()),
        Counter::default(),
    ));
    let r = runner(store.clone(), async_writes);
    let run = RunId::new(format!("run_bytes_{steps}")).expect("run id");
    run_to_end(&r, &agent(steps), run).await;
    store
}

/// Measure runs of 10, 100 and 1000 steps.
pub async fn rows() -> Vec<Row> {
    let mut out = Vec::new();
    for steps in [10u64, 100, 1000] {
        let s = measure(steps, false).await;
        let a = measure(steps, true).await;
        let (sync_commits, sync_bytes) = s.hooks().totals();
        let (async_commits, async_bytes) = a.hooks().totals();
        out.push(Row {
            steps,
            sync_commits,
            sync_bytes,
            last_step_bytes: s.hooks().step_bytes(steps),
            async_commits,
            async_bytes,
            last_step_kinds: s.hooks().step_kinds(steps),
        });
    }
    out
}

fn human(bytes: f64) -> String {
    if bytes >= 1e6 {
        format!("{:.1} MB", bytes / 1e6)
    } else if bytes >= 1e3 {
        format!("{:.1} KB", bytes / 1e3)
    } else {
        format!("{bytes:.0} B")
    }
}

/// AFK Python's bytes per run of the same workload on its in-memory store (measured once, with
/// AFK at commit `bcc10b6` of <https://github.com/socioy/afk>), if measured.
fn afk_bytes(steps: u64) -> Option<f64> {
    match steps {
        10 => Some(222e3),
        100 => Some(13.9e6),
        _ => None,
    }
}

/// The markdown section.
pub fn section(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Bytes written per step\n");
    let _ = writeln!(
        s,
        "Sum of `Commit::byte_len` (keys + values) of every applied commit of one run of the \
         scripted agent on the in-memory store. *Sync* writes every commit; *async* is the \
         default write-behind, which merges queued snapshot commits. *Step n* is what the last \
         tool step alone wrote (its `checkpoint:<run>:<n>:…` commits and those after them). \
         AFK Python: same workload on its in-memory store, measured once at AFK `bcc10b6`.\n"
    );
    let _ = writeln!(
        s,
        "| steps | commits (sync) | bytes/run (sync) | bytes/step (sync) | bytes of step n | \
         commits (async) | bytes/run (async) | AFK Python bytes/run | AFK bytes/step | AFK ÷ ours (sync) |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let per = r.sync_bytes as f64 / r.steps as f64;
        let (afk, afk_per, ratio) = match afk_bytes(r.steps) {
            Some(b) => (
                human(b),
                human(b / r.steps as f64),
                format!("{:.1}×", b / r.sync_bytes as f64),
            ),
            None => ("not measured".into(), "–".into(), "–".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {afk} | {afk_per} | {ratio} |",
            r.steps,
            r.sync_commits,
            human(r.sync_bytes as f64),
            human(per),
            human(r.last_step_bytes as f64),
            r.async_commits,
            human(r.async_bytes as f64),
        );
    }
    let _ = writeln!(
        s,
        "\nWhat the last step of each run wrote, by kind of key (sync writes):\n"
    );
    let kinds: std::collections::BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.last_step_kinds.iter().map(|(k, _)| k.as_str()))
        .collect();
    let _ = write!(s, "| key kind |");
    for r in rows {
        let _ = write!(s, " step {} |", r.steps);
    }
    let _ = writeln!(s, "\n|---|{}", "---:|".repeat(rows.len()));
    for kind in kinds {
        let _ = write!(s, "| `{kind}` |");
        for r in rows {
            let b = r
                .last_step_kinds
                .iter()
                .find(|(k, _)| k == kind)
                .map_or(0, |(_, b)| *b);
            let _ = write!(s, " {} |", human(b as f64));
        }
        s.push('\n');
    }
    s
}
