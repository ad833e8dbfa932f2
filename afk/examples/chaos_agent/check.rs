//! The end-of-run checks: the crashed run's result equals the uncrashed run's, the ledger
//! holds each at-most-once effect exactly once and each idempotent one at least once, every
//! run of the thread is terminal and `afk_core::verify` finds nothing half-written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use afk::runner::{Outcome, Runner, RunnerConfig};
use afk::schema::AgentResult;
use afk::store::{Store, StoreExt};
use afk::verify::{latest_record, verify_thread};
use afk::{RunId, ThreadId};
use serde_json::{Value, json};

use crate::plan::{CHARGE, LOOKUP, Plan, REFUND, REFUNDER};

/// One ledger line.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub run: String,
    pub call: String,
    pub tool: String,
    pub output: Value,
}

/// The ledger's lines; a line that does not parse is an error (a torn effect).
pub fn read_ledger(path: &Path) -> Result<Vec<Entry>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read the ledger {}: {e}", path.display())),
    };
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| format!("ledger line {} is torn: {e}", i + 1))?;
            match (
                field(&v, "key"),
                field(&v, "run"),
                field(&v, "call"),
                field(&v, "tool"),
            ) {
                (Some(key), Some(run), Some(call), Some(tool)) => Ok(Entry {
                    key,
                    run,
                    call,
                    tool,
                    output: v.get("output").cloned().unwrap_or(Value::Null),
                }),
                _ => Err(format!("ledger line {} lacks a field", i + 1)),
            }
        })
        .collect()
}

/// What must not change across crashes, with run ids replaced by placeholders (the uncrashed
/// run runs under another id): state, final text, logical step count, every tool and
/// subagent record's outcome.
pub fn fingerprint(r: &AgentResult) -> String {
    let tools: Vec<Value> = r
        .tool_executions
        .iter()
        .map(|t| json!([t.tool_name, t.tool_call_id, t.success, t.output, t.error]))
        .collect();
    let subs: Vec<Value> = r
        .subagent_executions
        .iter()
        .map(|s| json!([s.subagent_name, s.success, s.output_text, s.error]))
        .collect();
    let v = json!({
        "state": r.state,
        "final_text": r.final_text,
        "steps": r.state_snapshot.step,
        "tools": tools,
        "subagents": subs,
    });
    anonymize(&v.to_string(), &r.run_id)
}

/// `run` → `<run>`, `sub_<32 hex>` → `<child>`.
fn anonymize(s: &str, run: &str) -> String {
    let s = s.replace(run, "<run>");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find("sub_") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 4..];
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == 32 {
            out.push_str("<child>");
            rest = &tail[32..];
        } else {
            out.push_str("sub_");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The uncrashed run: the same agent on an in-memory store, to the end, no kills.
pub async fn baseline(plan: &Plan, scratch: &Path) -> Result<String, String> {
    let ledger = scratch.join("baseline-ledger.jsonl");
    let _ = std::fs::remove_file(&ledger);
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(afk::MemoryStore::new());
    let runner = Runner::new(store, RunnerConfig::default());
    let thread = ThreadId::new("baseline").map_err(|e| e.to_string())?;
    let run = RunId::new("run_baseline").map_err(|e| e.to_string())?;
    let out = runner
        .run_with_id(&plan.agent(&ledger), &thread, run, "go")
        .result()
        .await;
    let _ = std::fs::remove_file(&ledger);
    match out {
        Ok(Outcome::Completed(r)) if r.state == "completed" => Ok(fingerprint(&r)),
        Ok(other) => Err(format!("the uncrashed run did not complete: {other:?}")),
        Err(e) => Err(format!("the uncrashed run failed: {e}")),
    }
}

/// Every check after the campaign finished the run; the list of what failed (empty: pass).
pub async fn check(
    plan: &Plan,
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    result: &AgentResult,
    ledger: &[Entry],
    expected: &str,
) -> Vec<String> {
    let mut failures = Vec::new();
    let got = fingerprint(result);
    if got != expected {
        failures.push(format!(
            "result differs from the uncrashed run:\n  got      {got}\n  expected {expected}"
        ));
    }
    // The parent's own effects, by call id (a redone step must not run a call twice).
    let mut by_call: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for e in ledger.iter().filter(|e| e.run == run.as_str()) {
        *by_call
            .entry((e.tool.as_str(), e.call.as_str()))
            .or_default() += 1;
    }
    for c in plan.of(CHARGE) {
        let n = by_call.get(&(CHARGE, c.id.as_str())).copied().unwrap_or(0);
        if n != 1 {
            failures.push(format!("at-most-once {CHARGE} {} ran {n} times", c.id));
        }
    }
    for c in plan.of(LOOKUP) {
        if by_call.get(&(LOOKUP, c.id.as_str())).copied().unwrap_or(0) == 0 {
            failures.push(format!("idempotent {LOOKUP} {} never ran", c.id));
        }
    }
    // The subagents' effects: one refund per delegation, each in its own child run.
    let refunds: Vec<&Entry> = ledger.iter().filter(|e| e.tool == REFUND).collect();
    let children: BTreeSet<&str> = refunds.iter().map(|e| e.run.as_str()).collect();
    let delegations = plan.of(REFUNDER).count();
    if refunds.len() != delegations || children.len() != delegations {
        failures.push(format!(
            "at-most-once {REFUND}: {} ledger lines in {} child runs for {delegations} delegations",
            refunds.len(),
            children.len()
        ));
    }
    let keys: BTreeSet<&str> = ledger
        .iter()
        .filter(|e| e.tool != LOOKUP)
        .map(|e| e.key.as_str())
        .collect();
    if keys.len() != ledger.iter().filter(|e| e.tool != LOOKUP).count() {
        failures.push("an at-most-once idempotency key is in the ledger twice".to_owned());
    }
    failures.extend(verify_all(store, thread).await);
    failures
}

/// `verify` clean, no effect left uncertain, every run of the thread terminal.
async fn verify_all(store: &dyn Store, thread: &ThreadId) -> Vec<String> {
    let mut failures = Vec::new();
    match verify_thread(store, thread).await {
        Ok(reports) => {
            for r in &reports {
                for p in &r.problems {
                    failures.push(format!("verify {}: {p}", r.run));
                }
                for n in r.uncertain() {
                    failures.push(format!("verify {}: left uncertain: {n}", r.run));
                }
            }
        }
        Err(e) => failures.push(format!("verify failed: {e}")),
    }
    match store.list_runs(thread).await {
        Ok(runs) => {
            for r in runs {
                match latest_record(store, thread, &r).await {
                    Ok(Some(rec)) if rec.phase.as_str() == "run_terminal" => {}
                    Ok(Some(rec)) => failures.push(format!(
                        "run {r} is not terminal (latest phase {})",
                        rec.phase.as_str()
                    )),
                    Ok(None) => failures.push(format!("run {r} has no latest pointer")),
                    Err(e) => failures.push(format!("run {r}: {e}")),
                }
            }
        }
        Err(e) => failures.push(format!("listing runs failed: {e}")),
    }
    failures
}

/// With sealing on: every value of the thread in the store under the wrapper (`raw`) is sealed
/// (starts with `afk_seal::format::MAGIC`), the fences (`run:<run>`) aside, which stay clear.
pub async fn all_sealed(raw: &dyn Store, thread: &ThreadId) -> Vec<String> {
    let keys = match raw.list_all(thread, "").await {
        Ok(k) => k,
        Err(e) => return vec![format!("cannot list the thread's keys: {e}")],
    };
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| !k.starts_with("run:"))
        .collect();
    let values = match raw.get_many(thread, &keys).await {
        Ok(v) => v,
        Err(e) => return vec![format!("cannot read the thread's values: {e}")],
    };
    let mut failures = Vec::new();
    for (key, value) in keys.iter().zip(values) {
        if value.is_some_and(|v| !v.starts_with(afk_seal::format::MAGIC)) {
            failures.push(format!("the value at {key} is stored in the clear"));
        }
    }
    if keys.is_empty() {
        failures.push("the thread holds no value to check for sealing".to_owned());
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::anonymize;

    #[test]
    fn anonymize_replaces_run_and_child_ids() {
        let child = format!("sub_{}", "a1".repeat(16));
        let s = format!("x run_7 {child} sub_short");
        assert_eq!(anonymize(&s, "run_7"), "x <run> <child> sub_short");
    }
}
