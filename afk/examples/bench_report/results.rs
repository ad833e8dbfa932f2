//! Read criterion's results (`<target>/criterion/**/new/{benchmark,estimates}.json`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

/// One benchmark's result.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// Mean time per iteration, nanoseconds.
    pub mean_ns: f64,
    /// 95 % confidence interval of the mean, nanoseconds.
    pub ci_ns: (f64, f64),
    /// Elements per iteration (commits, steps), if the bench declared a throughput.
    pub elements: Option<f64>,
    /// How long ago criterion wrote it.
    pub age: Duration,
}

impl Estimate {
    /// Elements per second, if the bench declared a throughput.
    pub fn per_second(&self) -> Option<f64> {
        self.elements.map(|e| e * 1e9 / self.mean_ns)
    }
}

/// Every result under `criterion_dir`, by `(group id, function id)`.
pub fn load(criterion_dir: &Path) -> BTreeMap<(String, String), Estimate> {
    let mut out = BTreeMap::new();
    let mut stack = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == "new") {
                    if let Some((k, v)) = read_one(&p) {
                        out.insert(k, v);
                    }
                } else {
                    stack.push(p);
                }
            }
        }
    }
    out
}

fn json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn read_one(new_dir: &Path) -> Option<((String, String), Estimate)> {
    let bench = json(&new_dir.join("benchmark.json"))?;
    let est_path = new_dir.join("estimates.json");
    let est = json(&est_path)?;
    let group = bench.get("group_id")?.as_str()?.to_owned();
    let function = bench
        .get("function_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mean = est.get("mean")?;
    let mean_ns = mean.get("point_estimate")?.as_f64()?;
    let ci = mean.get("confidence_interval")?;
    let ci_ns = (
        ci.get("lower_bound")?.as_f64()?,
        ci.get("upper_bound")?.as_f64()?,
    );
    let elements = bench
        .get("throughput")
        .and_then(|t| t.get("Elements"))
        .and_then(Value::as_f64);
    let age = std::fs::metadata(&est_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    Some((
        (group, function),
        Estimate {
            mean_ns,
            ci_ns,
            elements,
            age,
        },
    ))
}

/// A duration in ns, in a readable unit.
pub fn time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A rate, with thousands separated.
pub fn rate(per_s: f64) -> String {
    if per_s >= 100.0 {
        let n = per_s.round() as u64;
        let s = n.to_string();
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        out
    } else {
        format!("{per_s:.1}")
    }
}
