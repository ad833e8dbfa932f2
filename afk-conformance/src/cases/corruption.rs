//! The corruption level: mutated and truncated records give typed errors, never a panic and
//! never a model or tool call.
//!
//! Real records come from runs of a scripted agent on a [`MemoryStore`]: a finished run and
//! runs crashed at a third, half and two thirds of their commits. One record the resume
//! reads (the latest pointer, the newest snapshot, a transcript entry, an effect row of the
//! step in progress) is mutated: a flipped bit, a truncation, a JSON value replaced by one of
//! another type, or (for the latest pointer) removal. The records are written into the store
//! under test under a fresh thread (and read back: the store must hold exactly those bytes),
//! and the run is resumed. What must hold:
//!
//! * the resume ends with a result, a pause, or an error of kind `Corrupt` or `NotFound`;
//!   never another kind, never a panic of the run task;
//! * on an error, no model call and no tool call was made;
//! * a finished run makes no model or tool call whatever its mutated records say.
//!
//! Seeded (the seed is printed; `AFK_SEED` replays it), `PROPTEST_CASES`
//! mutations (default 24). With 8 or more, at least one must have given `Corrupt`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use afk_core::store::{CrashMode, FaultStore, latest_key, run_key};
use afk_core::{
    ErrorKind, MemoryStore, RunId, ThreadId,
    store::{Commit, Store},
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::agents::{Calls, Rig, Script, Start, ToolKind, attempt, drive};
use crate::support::{
    CaseResult, Ctx, cases_from_env, ensure, fail, named_run, seed_from_env, unique_thread,
};

fn script() -> Script {
    use ToolKind::{Add, Echo, Fail};
    Script {
        batches: vec![vec![(Add, 1), (Echo, 2), (Fail, 3)], vec![(Add, 4)]],
    }
}

/// One stored state of the run: every key but the fence, and whether the run had finished.
struct Source {
    records: BTreeMap<String, Vec<u8>>,
    finished: bool,
}

async fn sources(script: &Script, run: &RunId) -> Result<Vec<Source>, String> {
    let thread = unique_thread("source");
    let mem = Arc::new(MemoryStore::new());
    drive(mem.clone(), script, &thread, run).await?;
    let mut all = mem.snapshot(&thread);
    all.remove(&run_key(run));
    let total = all.len() as u64; // more keys than commits: the crash points are inside
    let mut out = vec![Source {
        records: all,
        finished: true,
    }];
    for k in [total / 4, total / 3, total / 2] {
        let thread = unique_thread("source");
        let mem = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(mem.clone() as Arc<dyn Store>));
        fault.crash_after_commits(k, CrashMode::Down);
        let rig = Rig::new(script, &Calls::default(), Duration::ZERO)?;
        let _ = attempt(
            &crate::agents::runner(fault),
            &rig.agent,
            &thread,
            run,
            &Start::Fresh,
        )
        .await;
        let mut records = mem.snapshot(&thread);
        records.remove(&run_key(run));
        if records.contains_key(&latest_key(run)) {
            out.push(Source {
                records,
                finished: false,
            });
        }
    }
    Ok(out)
}

/// The keys a resume of `src` reads: the latest pointer, the newest snapshot, transcript
/// entries and effect rows.
fn targets(src: &Source, run: &RunId) -> Vec<String> {
    let newest = src
        .records
        .keys()
        .filter(|k| k.ends_with(":runtime_state"))
        .filter_map(|k| {
            let step: u64 = k.split(':').nth(2)?.parse().ok()?;
            Some((step, k.clone()))
        })
        .max();
    let mut out = vec![latest_key(run)];
    out.extend(newest.map(|(_, k)| k));
    out.extend(
        src.records
            .keys()
            .filter(|k| k.starts_with("messages:") || k.starts_with("effect:"))
            .cloned(),
    );
    out
}

/// Replace one JSON value, chosen by `pick` in depth-first order, by one of another type.
fn change_type(v: &mut Value, pick: &mut usize) -> bool {
    if *pick == 0 {
        *v = match v {
            Value::Null => Value::String("null".into()),
            Value::Bool(_) => Value::Null,
            Value::Number(_) => Value::String("7".into()),
            Value::String(_) => Value::from(7),
            Value::Array(_) => Value::Object(Default::default()),
            Value::Object(_) => Value::Array(Vec::new()),
        };
        return true;
    }
    *pick -= 1;
    match v {
        Value::Array(items) => items.iter_mut().any(|x| change_type(x, pick)),
        Value::Object(map) => map.values_mut().any(|x| change_type(x, pick)),
        _ => false,
    }
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// Mutate `bytes`; `None` removes the record. Returns a description too.
fn mutate(bytes: &[u8], rng: &mut StdRng, may_remove: bool) -> (Option<Vec<u8>>, String) {
    let len = bytes.len().max(1);
    match rng.random_range(0..if may_remove { 4 } else { 3 }) {
        0 => {
            let mut b = bytes.to_vec();
            let (i, bit) = (rng.random_range(0..len), rng.random_range(0..8));
            if let Some(x) = b.get_mut(i) {
                *x ^= 1 << bit;
            }
            (Some(b), format!("bit {bit} of byte {i} flipped"))
        }
        1 => {
            let n = rng.random_range(0..len);
            (
                Some(bytes[..n.min(bytes.len())].to_vec()),
                format!("truncated to {n} bytes"),
            )
        }
        2 => match serde_json::from_slice::<Value>(bytes) {
            Ok(mut v) => {
                let total = count(&v);
                let pick = rng.random_range(0..total);
                let mut p = pick;
                change_type(&mut v, &mut p);
                let out = serde_json::to_vec(&v).unwrap_or_default();
                (
                    Some(out),
                    format!("JSON value #{pick} of {total} changed type"),
                )
            }
            Err(_) => (Some(Vec::new()), "emptied".into()),
        },
        _ => (None, "removed".into()),
    }
}

/// Write `records` as one claimed commit of `run` in `thread`.
async fn load(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    records: BTreeMap<String, Vec<u8>>,
) -> CaseResult {
    let mut puts = records.clone();
    let latest = puts.remove(&latest_key(run));
    let epoch = store.claim(thread, run).await.ctx("claim")?;
    store
        .commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: puts.into_iter().collect(),
            latest,
            attention: None,
        })
        .await
        .ctx("commit of the mutated records")?;
    // The level is about what the runner makes of these bytes: the store must hold them.
    let mut stored = crate::agents::dump(store, thread).await?;
    stored.remove(&run_key(run));
    ensure!(
        stored == records,
        "the store holds other records than the {} just committed (keys {:?})",
        records.len(),
        stored.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// Mutated records resume to typed errors with no calls (see the module docs).
pub async fn corrupted_records_give_typed_errors(store: Arc<dyn Store>) -> CaseResult {
    let seed = seed_from_env()?;
    let cases = cases_from_env(24);
    println!(
        "corrupted_records_give_typed_errors: seed {seed} ({cases} mutations; replay with \
         AFK_SEED={seed})"
    );
    let script = script();
    let run = named_run("run_corrupt");
    let sources = sources(&script, &run).await?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut corrupt = 0;
    for case in 0..cases {
        let src = &sources[case as usize % sources.len()];
        let keys = targets(src, &run);
        let key = &keys[rng.random_range(0..keys.len())];
        let Some(bytes) = src.records.get(key) else {
            continue;
        };
        let (new, what) = mutate(bytes, &mut rng, *key == latest_key(&run));
        let mut records = src.records.clone();
        match new {
            Some(b) => records.insert(key.clone(), b),
            None => records.remove(key),
        };
        let thread = unique_thread("corrupt");
        load(&*store, &thread, &run, records).await?;
        let calls = Calls::default();
        let rig = Rig::new(&script, &calls, Duration::ZERO)?;
        let a = attempt(
            &crate::agents::runner(store.clone()),
            &rig.agent,
            &thread,
            &run,
            &Start::Resume,
        )
        .await;
        let made = (rig.llm.calls(), calls.snapshot());
        let ctx = format!(
            "seed {seed}, mutation {case}: {key} of a {} run, {what}",
            if src.finished { "finished" } else { "crashed" }
        );
        match &a.result {
            Ok(_) => ensure!(
                !src.finished || (made.0 == 0 && made.1.is_empty()),
                "{ctx}: resuming the finished run made {} model calls and ran {:?}",
                made.0,
                made.1
            ),
            Err(e) if matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::NotFound) => {
                if e.kind() == ErrorKind::Corrupt {
                    corrupt += 1;
                }
                ensure!(
                    made.0 == 0 && made.1.is_empty(),
                    "{ctx}: resume failed with {e} after {} model calls and running {:?}",
                    made.0,
                    made.1
                );
            }
            Err(e) => {
                return Err(fail!(
                    "{ctx}: resume failed with {e}, want corrupt or not_found"
                ));
            }
        }
    }
    ensure!(
        cases < 8 || corrupt > 0,
        "seed {seed}: none of {cases} mutations was reported as corrupt"
    );
    Ok(())
}
