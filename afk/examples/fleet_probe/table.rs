//! The Markdown table of the grid's cells.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::cell::STEPS;

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn triple(v: &Value, k: &str) -> [u64; 3] {
    let at = |i: usize| {
        v.get(k)
            .and_then(|a| a.get(i))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    [at(0), at(1), at(2)]
}

/// Microseconds in a readable unit.
fn dur(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.2} s", us as f64 / 1e6),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The ideal steps/s of a cell (see the module docs), given one run alone takes `t1_us`.
fn ideal(row: &Value, t1_us: u64) -> f64 {
    let (n, ms) = (u(row, "runs") as f64, u(row, "latency_ms") as f64);
    let run = (ms * (STEPS + 1) as f64 / 1e3).max(t1_us as f64 / 1e6);
    // The open loop's last run arrives (N - 1) gaps after the first.
    let window = if row["mode"] == "open" {
        (ms * (STEPS + 1) as f64 / 1e3).max(1.0) * (n - 1.0).max(0.0) / n.max(1.0)
    } else {
        0.0
    };
    n * STEPS as f64 / (window + run)
}

fn failed(row: &Value) -> String {
    let mut parts: Vec<String> = row["failed"]
        .as_object()
        .map(|m| m.iter().map(|(k, n)| format!("{n} {k}")).collect())
        .unwrap_or_default();
    let unfinished = u(row, "unfinished");
    if unfinished > 0 {
        parts.push(format!("{unfinished} unfinished at the deadline"));
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("; ").replace('|', "/")
    }
}

fn redis(row: &Value) -> String {
    let r = &row["redis"];
    let runs = u(row, "runs").max(1) as f64;
    match (
        r.get("bytes").and_then(Value::as_i64),
        r.get("keys").and_then(Value::as_i64),
    ) {
        (Some(b), Some(k)) => format!(
            "{:.1} KB ({:.0} keys)",
            b as f64 / runs / 1e3,
            k as f64 / runs
        ),
        _ => "–".into(),
    }
}

/// One row of the table.
fn line(row: &Value, t1_us: u64) -> String {
    let head = format!(
        "| {} | {} | {} ms | {} |",
        row["store"].as_str().unwrap_or("?"),
        thousands(u(row, "runs")),
        u(row, "latency_ms"),
        row["mode"].as_str().unwrap_or("?")
    );
    if let Some(e) = row.get("error") {
        return format!(
            "{head} cell failed: {} ||||||||||",
            e.as_str().unwrap_or("?").replace('|', "/")
        );
    }
    let (steps, secs) = (u(row, "steps"), row["secs"].as_f64().unwrap_or(0.0));
    let rate = steps as f64 / secs.max(1e-9);
    let share = if row["mode"] == "alone" {
        "–".into()
    } else {
        format!("{:.2}", rate / ideal(row, t1_us))
    };
    let (run, wait, lag) = (
        triple(row, "run_us"),
        triple(row, "wait_us"),
        triple(row, "lag_us"),
    );
    let rss = u(row, "peak_rss").saturating_sub(u(row, "rss_before")) as f64
        / u(row, "peak_in_flight").max(1) as f64;
    let calls = &row["store_calls"];
    let per_step = u(calls, "batches") as f64 / steps.max(1) as f64;
    let inline = 100.0 * u(calls, "inline") as f64 / u(calls, "batches").max(1) as f64;
    format!(
        "{head} {} | {share} | {} / {} | {} / {} / {} | {} | {:.0} µs | {} | {per_step:.2} (max {}, {inline:.0}% inline) | {} | {} |",
        thousands(rate.round() as u64),
        dur(run[0]),
        dur(run[1]),
        dur(wait[0]),
        dur(wait[1]),
        dur(wait[2]),
        dur(lag[1]),
        u(row, "cpu_us") as f64 / steps.max(1) as f64,
        if row["mode"] == "alone" {
            "–".to_owned()
        } else {
            format!("{:.0} KB", rss / 1e3)
        },
        u(calls, "max_batch"),
        failed(row),
        redis(row),
    )
}

/// A one-line summary of a cell, for progress on stderr.
pub fn progress(row: &Value) -> String {
    line(row, 0)
}

/// The report: the table, one reference time per store, the stores skipped.
pub fn report(rows: &[Value], skipped: &[String]) -> String {
    let mut t1: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["mode"] == "alone") {
        t1.insert(
            r["store"].as_str().unwrap_or("").to_owned(),
            triple(r, "run_us")[0],
        );
    }
    let mut s = String::from("## Many runs in flight (`fleet_probe`)\n\n");
    s.push_str(&crate::table::header(&t1));
    for r in rows {
        let store = r["store"].as_str().unwrap_or("");
        let _ = writeln!(s, "{}", line(r, t1.get(store).copied().unwrap_or(0)));
    }
    if !skipped.is_empty() {
        let _ = writeln!(
            s,
            "\nNot measured (feature off or server not set): {}.",
            skipped.join(", ")
        );
    }
    s
}

fn header(t1: &BTreeMap<String, u64>) -> String {
    let refs: Vec<String> = t1.iter().map(|(k, v)| format!("{k} {}", dur(*v))).collect();
    format!(
        "N runs of {STEPS} tool steps in one process (`afk/examples/fleet_probe`), a scripted model \
         answering after the latency shown, an instant idempotent tool, default runner config. \
         *closed*: all N started at once; *open*: N arriving evenly over max(11 × latency, 1 s); \
         *alone*: 50 runs one at a time (one run alone, median: {}). Store wait: model answer → \
         tool call (holds the write barrier, the runner's own work and any wait for a worker \
         thread); lag: how late a 10 ms timer fires (p99). See the example's module docs.\n\n\
         | store | N | latency | loop | steps/s | of ideal | run p50 / p99 | store wait p50 / p99 / max | lag p99 | CPU/step | RSS/run | store calls/step (max batch, inline) | failed | Redis bytes/run |\n\
         |---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
        refs.join(", ")
    )
}
