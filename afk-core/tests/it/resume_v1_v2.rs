//! AFK v1 states and their v2 migration resume to the same run: every checkpoint
//! record of a fixture's v1 state is migrated with `schema::migrate::v1_to_v2` (snapshots move
//! their inline transcript to `messages:<run>:0`), loaded with `fixture::load_state`, resumed,
//! and compared with resuming the v1 state itself. Also: `load_state` chunks for stores with a
//! commit-size limit.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use afk_core::fixture::load_state;
use afk_core::normalize::normalize_record;
use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, ManualClock, Outcome, Runner};
use afk_core::schema::Phase;
use afk_core::schema::migrate::v1_to_v2;
use afk_core::store::Store;
use afk_core::testkit::deterministic_config;
use afk_core::{MemoryStore, RunId, ThreadId};
use common::limited;
use serde_json::{Map, Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/afk-python")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Migrate every checkpoint record of a v1 `state` to v2; snapshot transcripts go to the log.
/// Several v1 snapshots each migrate to log entry 0: the one resume reads (the latest record
/// if it is a snapshot, else the highest step's) is written last, so it wins.
fn migrate_state(thread: &ThreadId, run: &str, state: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    let latest = format!("checkpoint:{run}:latest");
    let mut keys: Vec<&String> = state.keys().collect();
    let step_of = |k: &str| -> u64 {
        k.split(':')
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    // Snapshots by step, then the latest pointer: the log entry that survives is theirs.
    keys.sort_by_key(|k| (k.as_str() == latest, step_of(k)));
    for key in keys {
        let value = &state[key];
        if !key.starts_with("checkpoint:") {
            out.insert(key.clone(), value.clone());
            continue;
        }
        let bytes = serde_json::to_vec(value).unwrap();
        let rec = normalize_record(&bytes, thread, key).unwrap();
        assert_eq!(rec.schema_version, "v1", "{key} is a v1 record");
        let m = v1_to_v2(rec);
        if m.record.phase == Phase::RuntimeState {
            for e in &m.transcript {
                let run_id = RunId::new(run).unwrap();
                out.insert(
                    afk_core::keys::messages_key(&run_id, e.index),
                    serde_json::to_value(e).unwrap(),
                );
            }
        }
        let v2: Value = serde_json::from_slice(&m.record.to_bytes().unwrap()).unwrap();
        out.insert(key.clone(), v2);
    }
    out
}

/// Resume `state` as the fixture checker does; a comparable summary of what happened.
async fn resume(fx: &Value, state: &Map<String, Value>, store: Arc<dyn Store>) -> Value {
    let thread = ThreadId::new(fx["thread_id"].as_str().unwrap()).unwrap();
    let run = RunId::new(fx["run_id"].as_str().unwrap()).unwrap();
    load_state(store.as_ref(), &thread, state).await.unwrap();
    let llm = ScriptedLlm::from_fixture_responses(&fx["script"]["responses"]).unwrap();
    let counter = InvocationCounter::new();
    let agent = Agent::new("agent", "", "unknown", llm.clone())
        .with_tool(ScriptedTool::add(counter.clone()))
        .with_tool(ScriptedTool::echo(counter.clone()));
    let ts = state
        .values()
        .filter_map(|v| v.get("timestamp_ms").and_then(Value::as_u64))
        .max()
        .unwrap_or(0);
    let runner = Runner::new(
        store,
        deterministic_config().with_clock(ManualClock::new(ts)),
    );
    let out = runner.resume(&agent, &thread, &run).result().await;
    let res = match out {
        Ok(Outcome::Completed(r)) => {
            let tools: Vec<Value> = r
                .tool_executions
                .iter()
                .map(|t| json!([t.tool_name, t.tool_call_id, t.success, t.output, t.error]))
                .collect();
            let s = &r.state_snapshot;
            json!({"text": r.final_text, "state": r.state, "usage": r.usage_aggregate,
                "tools": tools, "llm_calls": s.llm_calls, "tool_calls": s.tool_calls,
                "replayed": s.replayed_effect_count, "session": r.session_token})
        }
        Ok(other) => json!({"other": format!("{other:?}")}),
        Err(e) => json!({"error": e.kind().as_str(), "message": e.message()}),
    };
    let invocations: BTreeMap<String, u64> = counter.snapshot();
    json!({"result": res, "model_calls": llm.calls(), "tool_invocations": invocations})
}

#[tokio::test]
async fn v1_and_migrated_v2_states_resume_to_the_same_run() {
    for name in [
        "a-crash-k15-effect-s1-call_a_1",
        "a-crash-k19-latest-runtime_state-s1",
        "a-double-crash-k15-k13",
        "b-crash-k16-effect-s1-call_b_2",
        "b-crash-k29-s2-runtime_state",
        "b-crash-k42-s3-pre_llm",
        "c-crash-k10-latest-post_llm-s1",
    ] {
        let fx = fixture(name);
        let thread = ThreadId::new(fx["thread_id"].as_str().unwrap()).unwrap();
        let run = fx["run_id"].as_str().unwrap();
        let v1 = fx["state"].as_object().unwrap().clone();
        let v2 = migrate_state(&thread, run, &v1);
        assert!(
            v2.keys().any(|k| k.starts_with("messages:")),
            "{name}: migration wrote a transcript log"
        );
        let a = resume(&fx, &v1, Arc::new(MemoryStore::new())).await;
        let b = resume(&fx, &v2, Arc::new(MemoryStore::new())).await;
        assert!(
            a["result"].get("text").is_some(),
            "{name}: v1 resume completed: {a}"
        );
        assert_eq!(a, b, "{name}: v1 and v2 resumes differ");
    }
}

#[tokio::test]
async fn load_state_chunks_for_a_commit_size_limit() {
    let fx = fixture("b-crash-k29-s2-runtime_state");
    let state = fx["state"].as_object().unwrap().clone();
    let small = Arc::new(limited::keys(3));
    let plain = Arc::new(MemoryStore::new());
    let a = resume(&fx, &state, small.clone()).await;
    let b = resume(&fx, &state, plain).await;
    assert!(small.hooks().commits() > 3);
    assert_eq!(a, b, "a chunked load resumes like a plain one");
}
