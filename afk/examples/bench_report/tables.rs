//! The markdown tables of the criterion groups.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::results::{Estimate, rate, time};

type Found = BTreeMap<(String, String), Estimate>;

fn get<'a>(found: &'a Found, group: &str, function: &str) -> Option<&'a Estimate> {
    found.get(&(group.to_owned(), function.to_owned()))
}

fn cell_rate(e: Option<&Estimate>) -> String {
    e.and_then(Estimate::per_second)
        .map_or_else(|| "–".into(), rate)
}

/// Mean time per element, with the half width of the 95 % confidence interval in percent.
fn cell_time(e: Option<&Estimate>, per: f64) -> String {
    e.map_or_else(
        || "–".into(),
        |e| {
            let half = (e.ci_ns.1 - e.ci_ns.0) / 2.0 / e.mean_ns * 100.0;
            format!("{} ±{half:.0}%", time(e.mean_ns / per))
        },
    )
}

/// Commit throughput, ours vs the raw client.
pub fn commit(found: &Found) -> String {
    let mut s = String::from("## Commit throughput: store vs raw client\n\n");
    s.push_str(
        "The real commits of a 10-step scripted run, replayed in a cycle, one at a time (the \
         batch row: 64 per call). *ours* = `Store::commit` (fence check, atomic apply, layout); \
         *raw* = the plain client writing the same keys and values and nothing else (memory: a \
         `Mutex<HashMap>`; RocksDB: one `WriteBatch`, same `sync`; Redis: one pipeline of `SET`s \
         per commit, or per 64 commits; S3: one `PutObject` per key, concurrently). Mean of \
         criterion's samples.\n\n",
    );
    s.push_str(
        "| store | ours commits/s | raw commits/s | ours per commit | raw per commit | ours ÷ raw time |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|\n");
    let rows = [
        ("commit/memory", "memory", 1.0),
        ("commit/rocksdb-sync", "RocksDB, sync WAL", 1.0),
        ("commit/rocksdb-nosync", "RocksDB, no sync", 1.0),
        ("commit/redis", "Redis single node", 1.0),
        ("commit/redis-batch64", "Redis, batches of 64", 64.0),
        ("commit/s3", "S3 (moto)", 1.0),
    ];
    for (group, label, per) in rows {
        let (o, r) = (get(found, group, "ours"), get(found, group, "raw"));
        if o.is_none() && r.is_none() {
            let _ = writeln!(
                s,
                "| {label} | not measured (server not set, or feature off) | | | | |"
            );
            continue;
        }
        let ratio = match (o, r) {
            (Some(o), Some(r)) => format!("{:.2}×", o.mean_ns / r.mean_ns),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} | {ratio} |",
            cell_rate(o),
            cell_rate(r),
            cell_time(o, per),
            cell_time(r, per),
        );
    }
    s.push('\n');
    s
}

/// Steps per second, async vs sync writes.
pub fn steps(found: &Found) -> String {
    let mut s = String::from("## Steps per second of a scripted agent\n\n");
    s.push_str(
        "One tool call per step, instant model and tool (AFK's peer workload); one whole run \
         per iteration, terminal flush included; a run of n steps makes n tool-calling model \
         turns plus a closing answer. *async* = write-behind (the default), *sync* = each \
         commit inline; *merging off* = write-behind writing each commit as submitted (the \
         writer before it merged a run's queued commits: the baseline, same run). RocksDB syncs \
         its WAL on every write (the default). AFK Python is measured side by side by \
         `afk/benches/side_by_side.py`, not here: see BENCHMARKS.md.\n\n",
    );
    s.push_str(
        "| store | steps/run | async steps/s | sync steps/s | async ÷ sync | async, merging off |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|\n");
    let stores: [(&str, &[u64]); 4] = [
        ("memory", &[10, 100]),
        ("rocksdb", &[10, 100]),
        ("redis", &[10, 100]),
        ("s3", &[10]),
    ];
    for (store, lengths) in stores {
        for &n in lengths {
            let group = format!("steps/{store}-{n}");
            let (a, y) = (get(found, &group, "async"), get(found, &group, "sync"));
            if a.is_none() && y.is_none() {
                let _ = writeln!(s, "| {store} | {n} | not measured | | | |");
                continue;
            }
            let ratio = match (
                a.and_then(Estimate::per_second),
                y.and_then(Estimate::per_second),
            ) {
                (Some(a), Some(y)) => format!("{:.2}×", a / y),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {store} | {n} | {} | {} | {ratio} | {} |",
                cell_rate(a),
                cell_rate(y),
                cell_rate(get(found, &group, "async-unmerged")),
            );
        }
    }
    s.push('\n');
    s
}

/// Resume time of long runs.
pub fn resume(found: &Found) -> String {
    let mut s = String::from("## Resume time of long runs\n\n");
    s.push_str(
        "A 100- and a 1000-step run crashed inside its last tool step (the latest pointer names \
         a mid-step snapshot), loaded into a fresh store; timed from `Runner::resume` to the \
         run's result: claim, load snapshot and transcript log, verify the digest, finish the \
         step and the closing answer, flush. Flat cost means resume does not grow with the \
         run.\n\n",
    );
    s.push_str("| store | 100-step run | 1000-step run | 1000 ÷ 100 |\n|---|---:|---:|---:|\n");
    for store in ["memory", "rocksdb"] {
        let group = format!("resume/{store}");
        let (h, k) = (get(found, &group, "100"), get(found, &group, "1000"));
        let ratio = match (h, k) {
            (Some(h), Some(k)) => format!("{:.2}×", k.mean_ns / h.mean_ns),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {store} | {} | {} | {ratio} |",
            cell_time(h, 1.0),
            cell_time(k, 1.0)
        );
    }
    s.push('\n');
    s
}

/// A warning listing results older than two hours (left from an earlier `cargo bench`).
pub fn stale(found: &Found) -> String {
    let old: Vec<String> = found
        .iter()
        .filter(|(_, e)| e.age > Duration::from_secs(2 * 3600))
        .map(|((g, f), e)| format!("`{g}/{f}` ({} h old)", e.age.as_secs() / 3600))
        .collect();
    if old.is_empty() {
        return String::new();
    }
    format!(
        "**Stale results** (from an earlier run, not re-measured): {}\n",
        old.join(", ")
    )
}
