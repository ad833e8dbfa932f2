//! Property tests of normalization: it never panics on any input, and every valid v2 record
//! round-trips exactly. Seeded: the seed is printed; replay with `AFK_SEED=<seed>`. Cases
//! from `AFK_PROPTEST_NORMALIZE_CASES`, else `PROPTEST_CASES`, else 256 (`cargo xtask test`
//! sets `AFK_PROPTEST_NORMALIZE_CASES=10000`, the minimum for CI).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use afk_core::ThreadId;
use afk_core::normalize::{normalize_effect_row, normalize_record, normalize_record_value};
use afk_core::schema::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

fn runner(name: &str) -> (TestRunner, u64) {
    let cases = ["AFK_PROPTEST_NORMALIZE_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|name| std::env::var(name).ok().and_then(|v| v.parse().ok()))
        .unwrap_or(256);
    let seed = afk_core::testkit::seed_or(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!("{name}: proptest seed {seed} (replay with AFK_SEED={seed}), {cases} cases");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    (
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)),
        seed,
    )
}

fn thread() -> ThreadId {
    ThreadId::new("thread_p").unwrap()
}

const KEY: &str = "checkpoint:run_p:1:runtime_state";

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        -1e12..1e12f64,
        any::<f64>().prop_filter("finite", |f| f.is_finite())
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite().prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
        prop::sample::select(vec![
            "v1",
            "v2",
            "run_p",
            "thread_p",
            "runtime_state",
            "pre_llm",
            "user"
        ])
        .prop_map(Value::from),
    ]
}

fn key_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "schema_version",
            "schemaVersion",
            "version",
            "run_id",
            "runId",
            "thread_id",
            "threadId",
            "step",
            "phase",
            "timestamp_ms",
            "payload",
            "data",
            "messages",
            "pending_llm_response",
            "tool_calls",
            "usage",
            "role",
            "content",
            "tool_executions",
            "transcript",
            "input_hash",
        ])
        .prop_map(str::to_owned),
        ".{0,6}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key_name(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A real AFK snapshot with one field (at some depth) replaced by arbitrary JSON.
fn mutated_record() -> impl Strategy<Value = Value> {
    let base = json!({
        "schema_version": "v1", "run_id": "run_p", "step": 1, "phase": "runtime_state", "timestamp_ms": 5,
        "payload": {
            "thread_id": "thread_p", "step": 1, "state": "running", "context": {"k": 1},
            "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "name": "add"}],
            "llm_calls": 1, "tool_calls": 0, "started_at_s": 1.5,
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}, "total_cost_usd": 0.0,
            "tool_executions": [{"tool_name": "add", "success": true, "output": {"r": 1}}],
            "pending_llm_response": {"text": "t", "tool_calls": [{"id": "c", "tool_name": "add", "arguments": {}}],
                "usage": {"input_tokens": 1}},
            "background_tools_pending": [], "replayed_effect_count": 0
        }
    });
    let paths: Vec<Vec<&'static str>> = vec![
        vec!["schema_version"],
        vec!["run_id"],
        vec!["step"],
        vec!["phase"],
        vec!["timestamp_ms"],
        vec!["payload"],
        vec!["thread_id"],
        vec!["payload", "messages"],
        vec!["payload", "usage"],
        vec!["payload", "pending_llm_response"],
        vec!["payload", "tool_executions"],
        vec!["payload", "llm_calls"],
        vec!["payload", "transcript"],
        vec!["payload", "context"],
        vec!["payload", "final_response"],
        vec!["payload", "started_at_s"],
    ];
    (
        prop::sample::select(paths),
        arb_json(),
        prop::sample::select(vec!["runtime_state", "run_terminal", "paused", "pre_llm"]),
    )
        .prop_map(move |(path, v, phase)| {
            let mut rec = base.clone();
            rec["phase"] = phase.into();
            let mut cur = &mut rec;
            for p in &path[..path.len() - 1] {
                cur = &mut cur[*p];
            }
            cur[path[path.len() - 1]] = v;
            rec
        })
}

#[test]
fn normalization_never_panics_on_arbitrary_json() {
    let (mut runner, seed) = runner("arbitrary json");
    let strategy = prop_oneof![arb_json(), mutated_record()];
    runner
        .run(&strategy, |v| {
            let bytes = serde_json::to_vec(&v).unwrap();
            for result in [
                normalize_record_value(v.clone(), &thread(), KEY),
                normalize_record(&bytes, &thread(), KEY),
            ] {
                if let Err(e) = result {
                    prop_assert!(e.is_corrupt() && e.key() == Some(KEY), "{}", e);
                    prop_assert!(!e.message().is_empty());
                }
            }
            if let Err(e) = normalize_effect_row(&bytes, "effect:run_p:1:c") {
                prop_assert!(e.is_corrupt());
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

#[test]
fn normalization_never_panics_on_arbitrary_bytes() {
    let (mut runner, seed) = runner("arbitrary bytes");
    let valid = serde_json::to_vec(
        &json!({"schema_version": "v1", "run_id": "run_p", "step": 1,
        "phase": "pre_llm", "timestamp_ms": 5, "payload": {"model": "m"}}),
    )
    .unwrap();
    let strategy = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (0..valid.len(), any::<u8>(), 0..=valid.len()).prop_map(move |(i, b, cut)| {
            let mut v = valid.clone();
            v[i] = b;
            v.truncate(cut.max(i));
            v
        }),
    ];
    runner
        .run(&strategy, |bytes| {
            if let Err(e) = normalize_record(&bytes, &thread(), KEY) {
                prop_assert!(e.is_corrupt() && e.key() == Some(KEY), "{}", e);
            }
            if let Err(e) = normalize_effect_row(&bytes, "effect:run_p:1:c") {
                prop_assert!(e.is_corrupt());
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

// ---- valid v2 records ----

fn extra() -> impl Strategy<Value = Extra> {
    prop::collection::btree_map("x_[a-z]{1,4}", arb_json(), 0..3)
        .prop_map(|m| m.into_iter().collect())
}

fn opt_str() -> impl Strategy<Value = Option<String>> {
    prop::option::of(".{0,6}")
}

fn obj() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z]{1,4}", arb_json(), 0..3)
        .prop_map(|m| m.into_iter().collect())
}

fn usage() -> impl Strategy<Value = Usage> {
    (any::<u64>(), any::<u64>(), any::<u64>(), extra()).prop_map(|(i, o, t, extra)| Usage {
        input_tokens: i,
        output_tokens: o,
        total_tokens: t,
        extra,
    })
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (opt_str(), ".{0,6}", obj(), extra()).prop_map(|(id, tool_name, arguments, extra)| ToolCall {
        id,
        tool_name,
        arguments,
        extra,
    })
}

fn llm_response() -> impl Strategy<Value = LlmResponse> {
    (
        ".{0,8}",
        opt_str(),
        opt_str(),
        prop::option::of(obj()),
        prop::collection::vec(tool_call(), 0..3),
        usage(),
        obj(),
        extra(),
    )
        .prop_map(
            |(
                text,
                request_id,
                session_token,
                structured_response,
                tool_calls,
                usage,
                raw,
                extra,
            )| LlmResponse {
                text,
                request_id,
                session_token,
                structured_response,
                tool_calls,
                usage,
                raw,
                extra,
                ..LlmResponse::default()
            },
        )
}

fn message() -> impl Strategy<Value = Message> {
    let content = prop_oneof![
        ".{0,8}".prop_map(MessageContent::Text),
        prop::collection::vec(arb_json(), 0..3).prop_map(MessageContent::Parts)
    ];
    let role = prop::sample::select(vec!["system", "user", "assistant", "tool", "critic"])
        .prop_map(Role::from);
    (
        role,
        content,
        opt_str(),
        prop::option::of(prop::collection::vec(tool_call(), 0..2)),
        opt_str(),
        extra(),
    )
        .prop_map(
            |(role, content, name, tool_calls, tool_call_id, extra)| Message {
                role,
                content,
                name,
                tool_calls,
                tool_call_id,
                extra,
            },
        )
}

fn tool_execution() -> impl Strategy<Value = ToolExecution> {
    (
        ".{0,6}",
        opt_str(),
        any::<bool>(),
        arb_json(),
        prop::option::of(finite()),
        prop::option::of(any::<u64>()),
        extra(),
    )
        .prop_map(
            |(tool_name, tool_call_id, success, output, latency_ms, agent_depth, extra)| {
                ToolExecution {
                    tool_name,
                    tool_call_id,
                    success,
                    output,
                    latency_ms,
                    agent_depth,
                    extra,
                    ..ToolExecution::default()
                }
            },
        )
}

fn snapshot() -> impl Strategy<Value = RuntimeSnapshot> {
    let counts = (0..3u64, 0..3u64, 0..3u64, 0..3u64);
    let tref = (any::<u64>(), any::<u64>(), counts, "[0-9a-f]{0,8}", extra()).prop_map(
        |(len, message_count, (tools, subagents, reads, commands), digest, extra)| TranscriptRef {
            len,
            message_count,
            tool_count: tools,
            subagent_count: subagents,
            skill_read_count: reads,
            skill_command_count: commands,
            digest,
            extra,
        },
    );
    (
        (
            any::<u64>(),
            ".{0,6}",
            obj(),
            prop::option::of(prop::collection::vec(message(), 0..4)),
            any::<u64>(),
            finite(),
        ),
        (
            usage(),
            finite(),
            opt_str(),
            prop::collection::vec(tool_execution(), 0..3),
        ),
        (
            prop::option::of(llm_response()),
            prop::option::of(llm_response()),
            any::<u64>(),
            prop::option::of(tref),
            extra(),
        ),
    )
        .prop_map(
            |(
                (step, state, context, messages, llm_calls, started_at_s),
                (usage, total_cost_usd, session_token, tool_executions),
                (pending, final_response, replayed, transcript, extra),
            )| {
                RuntimeSnapshot {
                    thread_id: "thread_p".into(),
                    step,
                    state: state.into(),
                    context,
                    messages,
                    llm_calls,
                    started_at_s,
                    usage,
                    total_cost_usd,
                    session_token,
                    tool_executions,
                    pending_llm_response: pending.map(Arc::new),
                    final_response: final_response.map(Arc::new),
                    replayed_effect_count: replayed,
                    transcript,
                    extra,
                    ..RuntimeSnapshot::default()
                }
            },
        )
}

fn payload() -> impl Strategy<Value = PhasePayload> {
    let kind = prop::sample::select(vec![PauseKind::Approval, PauseKind::UserInput]);
    let request = (kind.clone(), opt_str(), opt_str(), obj(), extra()).prop_map(
        |(kind, reason, tool_call_id, payload, extra)| PauseRequest {
            kind,
            reason,
            tool_call_id,
            payload,
            extra,
            ..PauseRequest::default()
        },
    );
    let result = (
        ".{0,6}",
        prop::option::of(llm_response()),
        usage(),
        prop::option::of(finite()),
        prop::collection::vec(tool_execution(), 0..2),
        extra(),
    )
        .prop_map(
            |(
                final_text,
                llm_response,
                usage_aggregate,
                total_cost_usd,
                tool_executions,
                extra,
            )| AgentResult {
                run_id: "run_p".into(),
                final_text,
                llm_response,
                usage_aggregate,
                total_cost_usd,
                tool_executions,
                extra,
                ..AgentResult::default()
            },
        );
    prop_oneof![
        (".{0,6}", any::<bool>(), extra()).prop_map(|(agent_name, resumed, extra)| {
            PhasePayload::RunStarted(RunStartedPayload {
                agent_name,
                resumed,
                extra,
            })
        }),
        (".{0,6}", any::<u64>(), extra()).prop_map(|(state, message_count, extra)| {
            PhasePayload::StepStarted(StepStartedPayload {
                state: state.into(),
                message_count,
                extra,
            })
        }),
        snapshot().prop_map(|s| PhasePayload::RuntimeState(Box::new(s))),
        (".{0,4}", any::<u64>(), finite(), extra()).prop_map(
            |(model, tool_call_count, total_cost_usd, extra)| PhasePayload::PostLlm(
                PostLlmPayload {
                    model,
                    tool_call_count,
                    total_cost_usd,
                    extra,
                    ..PostLlmPayload::default()
                }
            )
        ),
        (any::<u64>(), any::<u64>(), extra()).prop_map(
            |(a, b, extra)| PhasePayload::PostToolBatch(PostToolBatchPayload {
                tool_calls_total: a,
                tool_failures: b,
                extra
            })
        ),
        (
            prop::collection::vec(".{0,4}", 0..3),
            any::<bool>(),
            extra()
        )
            .prop_map(
                |(targets, router_parallel, extra)| PhasePayload::PreSubagentBatch(
                    PreSubagentBatchPayload {
                        targets,
                        router_parallel,
                        extra
                    }
                )
            ),
        (kind.clone(), opt_str(), prop::option::of(request), extra()).prop_map(
            |(kind, reason, request, extra)| PhasePayload::Paused(PausedPayload {
                kind,
                reason,
                request,
                extra,
                ..PausedPayload::default()
            })
        ),
        (
            kind,
            prop::option::of(arb_json().prop_filter("not null", |v| !v.is_null())),
            extra()
        )
            .prop_map(
                |(kind, decision, extra)| PhasePayload::Resumed(ResumedPayload {
                    kind,
                    decision,
                    extra
                })
            ),
        (".{0,4}", opt_str(), prop::option::of(result), extra()).prop_map(
            |(state, message, terminal_result, extra)| PhasePayload::RunTerminal(Box::new(
                RunTerminalPayload {
                    state: state.into(),
                    message,
                    terminal_result,
                    extra,
                    ..RunTerminalPayload::default()
                }
            ))
        ),
    ]
}

fn v2_record() -> impl Strategy<Value = CheckpointRecord> {
    (any::<u64>(), any::<u64>(), payload(), extra()).prop_map(
        |(step, timestamp_ms, payload, extra)| CheckpointRecord {
            schema_version: SCHEMA_VERSION.into(),
            run_id: afk_core::RunId::new("run_p").unwrap(),
            thread_id: thread(),
            step,
            phase: payload.phase(),
            timestamp_ms,
            payload,
            extra,
        },
    )
}

/// Whether `serde_json` keeps maps in insertion order (its `preserve_order` feature, which a
/// dependency such as the model providers' client turns on for the whole build). Then a
/// record's unknown fields are written in the order they were read or added, not sorted.
fn maps_keep_insertion_order() -> bool {
    let probe = serde_json::json!({"b": 0, "a": 0});
    probe
        .as_object()
        .and_then(|m| m.keys().next())
        .is_some_and(|k| k == "b")
}

#[test]
fn every_valid_v2_record_round_trips_exactly() {
    let (mut runner, seed) = runner("v2 round trip");
    runner
        .run(&v2_record(), |rec| {
            let bytes = rec.to_bytes().unwrap();
            let once = normalize_record(&bytes, &thread(), KEY)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&once, &rec);
            let bytes2 = once.to_bytes().unwrap();
            if maps_keep_insertion_order() {
                // Unknown fields may come back in another order; the JSON is the same.
                let again: Value = serde_json::from_slice(&bytes2).unwrap();
                let first: Value = serde_json::from_slice(&bytes).unwrap();
                prop_assert_eq!(again, first);
            } else {
                prop_assert_eq!(&bytes2, &bytes);
            }
            let twice = normalize_record(&bytes2, &thread(), KEY)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&twice, &once);
            let strict: CheckpointRecord =
                serde_json::from_slice(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&strict, &rec);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}
