use serde_json::{Value, json};

use super::*;
use crate::error::ErrorKind;
use crate::schema::{Phase, PhasePayload};

const KEY: &str = "checkpoint:run_1:1:runtime_state";

fn thread() -> ThreadId {
    ThreadId::new("thread_1").unwrap()
}

fn v1_pre_llm() -> Value {
    json!({
        "schema_version": "v1", "run_id": "run_1", "step": 1, "phase": "pre_llm",
        "timestamp_ms": 1_700_000_000_000u64,
        "payload": {"model": "m", "provider": "p", "message_count": 2}
    })
}

fn v1_snapshot() -> Value {
    json!({
        "schema_version": "v1", "run_id": "run_1", "step": 1, "phase": "runtime_state",
        "timestamp_ms": 5,
        "payload": {
            "thread_id": "thread_1", "step": 1, "state": "running", "context": {},
            "messages": [{"role": "user", "content": "hi"}],
            "llm_calls": 1, "tool_calls": 0, "started_at_s": 1.5,
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
            "total_cost_usd": 0.0, "pending_llm_response": null
        }
    })
}

/// Normalize `v`, expect a corruption error at KEY whose reason contains every needle.
fn assert_corrupt(v: Value, needles: &[&str]) {
    let err = normalize_record_value(v.clone(), &thread(), KEY).expect_err(&v.to_string());
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.key(), Some(KEY));
    for n in needles {
        assert!(
            err.message().contains(n),
            "reason {:?} should name {n:?}",
            err.message()
        );
    }
}

fn with(mut v: Value, path: &[&str], new: Value) -> Value {
    let mut cur = &mut v;
    for p in &path[..path.len() - 1] {
        cur = &mut cur[*p];
    }
    cur[path[path.len() - 1]] = new;
    v
}

fn without(mut v: Value, field: &str) -> Value {
    v.as_object_mut().unwrap().remove(field);
    v
}

#[test]
fn v1_record_takes_thread_from_namespace() {
    let r = normalize_record_value(v1_pre_llm(), &thread(), KEY).unwrap();
    assert_eq!(r.schema_version, "v1");
    assert_eq!(r.thread_id.as_str(), "thread_1");
    assert_eq!(r.phase, Phase::PreLlm);
    assert!(matches!(r.payload, PhasePayload::PreLlm(ref p) if p.message_count == 2));
}

#[test]
fn unknown_version_is_corrupt_naming_schema_version() {
    assert_corrupt(
        with(v1_pre_llm(), &["schema_version"], json!("v999")),
        &["schema_version", "v999"],
    );
    assert_corrupt(
        with(v1_pre_llm(), &["schema_version"], json!(1)),
        &["schema_version", "string"],
    );
    assert_corrupt(
        with(v1_pre_llm(), &["schema_version"], Value::Null),
        &["schema_version"],
    );
}

#[test]
fn wrong_envelope_types_are_named() {
    for (field, bad) in [
        ("run_id", json!(7)),
        ("run_id", json!("a:b")),
        ("step", json!("1")),
        ("step", json!(-1)),
        ("step", json!(1.0)),
        ("phase", json!("nap")),
        ("phase", json!(3)),
        ("timestamp_ms", json!("now")),
        ("thread_id", json!(5)),
    ] {
        assert_corrupt(with(v1_pre_llm(), &[field], bad), &[field]);
    }
    for field in ["run_id", "step", "phase", "timestamp_ms", "payload"] {
        assert_corrupt(without(v1_pre_llm(), field), &[field, "missing"]);
    }
}

#[test]
fn thread_id_must_match_namespace_and_is_required_in_v2() {
    assert_corrupt(
        with(v1_pre_llm(), &["thread_id"], json!("thread_2")),
        &["thread_id", "namespace"],
    );
    assert_corrupt(
        with(v1_pre_llm(), &["schema_version"], json!("v2")),
        &["thread_id"],
    );
    let v2 = with(
        with(v1_pre_llm(), &["schema_version"], json!("v2")),
        &["thread_id"],
        json!("thread_1"),
    );
    assert_eq!(
        normalize_record_value(v2, &thread(), KEY)
            .unwrap()
            .schema_version,
        "v2"
    );
}

#[test]
fn payload_not_an_object_is_corrupt() {
    for bad in [json!([1, 2]), json!("x"), json!(null), json!(3)] {
        assert_corrupt(
            with(v1_snapshot(), &["payload"], bad),
            &["payload", "not an object"],
        );
    }
}

#[test]
fn payload_field_types_are_named_by_path() {
    assert_corrupt(
        with(v1_snapshot(), &["payload", "llm_calls"], json!("1")),
        &["payload.llm_calls"],
    );
    assert_corrupt(
        with(
            v1_snapshot(),
            &["payload", "usage", "input_tokens"],
            json!(-4),
        ),
        &["payload.usage.input_tokens"],
    );
    assert_corrupt(
        with(v1_pre_llm(), &["payload", "message_count"], json!([])),
        &["payload.message_count"],
    );
}

#[test]
fn pending_llm_response_must_decode_unless_null() {
    for bad in [
        json!("garbage"),
        json!(1),
        json!([]),
        json!({"text": 5}),
        json!({"tool_calls": "x"}),
    ] {
        assert_corrupt(
            with(v1_snapshot(), &["payload", "pending_llm_response"], bad),
            &["pending_llm_response", "not a decodable LLM response"],
        );
    }
    let none = normalize_record_value(v1_snapshot(), &thread(), KEY).unwrap();
    assert!(none.snapshot().unwrap().pending_llm_response.is_none());
    let absent = without(v1_snapshot()["payload"].clone(), "pending_llm_response");
    let r =
        normalize_record_value(with(v1_snapshot(), &["payload"], absent), &thread(), KEY).unwrap();
    assert!(r.snapshot().unwrap().pending_llm_response.is_none());
    let ok = json!({"text": "t", "tool_calls": [{"id": "c1", "tool_name": "add", "arguments": {"a": 1}}]});
    let r = normalize_record_value(
        with(v1_snapshot(), &["payload", "pending_llm_response"], ok),
        &thread(),
        KEY,
    )
    .unwrap();
    let pending = r.snapshot().unwrap().pending_llm_response.clone().unwrap();
    assert_eq!(pending.tool_calls[0].tool_name, "add");
}

#[test]
fn snapshot_lists_are_lenient_like_afk() {
    let v = with(
        v1_snapshot(),
        &["payload", "messages"],
        json!([
            {"role": "user", "content": "kept"},
            {"role": 3, "content": "no string role"},
            {"role": "user", "content": 5},
            "not a map",
            {"role": "tool", "content": [{"type": "text"}], "name": 9}
        ]),
    );
    let v = with(
        v,
        &["payload", "tool_executions"],
        json!([{"tool_name": 1}, {"tool_name": "add", "success": true}]),
    );
    let r = normalize_record_value(v, &thread(), KEY).unwrap();
    let s = r.snapshot().unwrap();
    let msgs = s.messages.as_ref().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1].name, None, "a non-string name is dropped");
    assert_eq!(s.tool_executions.len(), 1);
    assert_eq!(s.tool_executions[0].tool_name, "add");
}

#[test]
fn aliases_apply_only_when_canonical_is_absent() {
    let legacy = json!({
        "schemaVersion": "v1", "runId": "run_1", "threadId": "thread_1", "step": 1,
        "phase": "pre_llm", "timestamp_ms": 1_700_000_000_000u64,
        "data": {"model": "m", "provider": "p", "message_count": 2}
    });
    let a = normalize_record_value(legacy, &thread(), KEY).unwrap();
    let b = normalize_record_value(v1_pre_llm(), &thread(), KEY).unwrap();
    assert_eq!(
        a, b,
        "aliases normalize to the canonical record, alias keys consumed"
    );

    // `version` is the second choice for the version; a missing version means v1.
    let v = without(v1_pre_llm(), "schema_version");
    assert_eq!(
        normalize_record_value(v.clone(), &thread(), KEY)
            .unwrap()
            .schema_version,
        "v1"
    );
    let mut vv = v.clone();
    vv["version"] = json!("v999");
    assert_corrupt(vv, &["v999"]);
    let mut both = v.clone();
    both["schemaVersion"] = json!("v1");
    both["version"] = json!("v999");
    let r = normalize_record_value(both, &thread(), KEY).unwrap();
    assert_eq!(
        r.extra.get("version"),
        Some(&json!("v999")),
        "unused alias kept as unknown field"
    );

    // Canonical keys win; the alias stays as an unknown field.
    let mut c = v1_pre_llm();
    c["runId"] = json!("other_run");
    c["data"] = json!({"model": "x"});
    let r = normalize_record_value(c, &thread(), KEY).unwrap();
    assert_eq!(r.run_id.as_str(), "run_1");
    assert!(matches!(r.payload, PhasePayload::PreLlm(ref p) if p.model == "m"));
    assert_eq!(r.extra.get("runId"), Some(&json!("other_run")));

    // Alias with the wrong type is named, not skipped.
    assert_corrupt(
        with(
            without(v1_pre_llm(), "schema_version"),
            &["schemaVersion"],
            json!(1),
        ),
        &["schemaVersion"],
    );
    assert_corrupt(
        with(without(v1_pre_llm(), "payload"), &["data"], json!([])),
        &["data", "payload"],
    );
    assert_corrupt(
        with(without(v1_pre_llm(), "run_id"), &["runId"], json!(1)),
        &["runId"],
    );
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    let mut v = v1_snapshot();
    v["x_top"] = json!({"a": [1, 2.5, "s"]});
    v["payload"]["x_payload"] = json!(18446744073709551615u64);
    v["payload"]["usage"]["cached_tokens"] = json!(4);
    v["payload"]["messages"][0]["x_msg"] = json!(true);
    let r = normalize_record_value(v, &thread(), KEY).unwrap();
    let out: Value = serde_json::from_slice(&r.to_bytes().unwrap()).unwrap();
    assert_eq!(out["x_top"], json!({"a": [1, 2.5, "s"]}));
    assert_eq!(out["payload"]["x_payload"], json!(18446744073709551615u64));
    assert_eq!(out["payload"]["usage"]["cached_tokens"], json!(4));
    assert_eq!(out["payload"]["messages"][0]["x_msg"], json!(true));
    assert_eq!(out["thread_id"], json!("thread_1"));
    let again = normalize_record(&r.to_bytes().unwrap(), &thread(), KEY).unwrap();
    assert_eq!(again, r);
}

#[test]
fn invalid_bytes_are_corrupt() {
    for bytes in [&b""[..], b"{", b"\xff\xfe", b"[1]", b"null"] {
        let err = normalize_record(bytes, &thread(), KEY).unwrap_err();
        assert!(err.is_corrupt(), "{err}");
        assert_eq!(err.key(), Some(KEY));
    }
    let deep = "[".repeat(100_000);
    assert!(
        normalize_record(deep.as_bytes(), &thread(), KEY)
            .unwrap_err()
            .is_corrupt()
    );
}

#[test]
fn effect_rows() {
    let key = "effect:run_1:1:call_1";
    let afk = json!({"input_hash": "ab", "output_hash": "cd", "output": {"r": 1}, "success": true});
    let row = normalize_effect_row_value(afk, key).unwrap();
    assert_eq!(row.status(), crate::schema::EffectStatus::Done);
    assert_eq!(row.output_hash.as_deref(), Some("cd"));
    let intent = json!({"input_hash": "ab", "output": null, "success": false, "status": "intent",
        "idempotency_key": "k", "tool_name": "add", "started_at_ms": 5});
    let row = normalize_effect_row_value(intent.clone(), key).unwrap();
    assert_eq!(row.status(), crate::schema::EffectStatus::Intent);
    assert_eq!(
        serde_json::to_value(&row).unwrap(),
        intent,
        "v2 fields round-trip, unset ones omitted"
    );
    for (bad, field) in [
        (json!({"output": 1}), "input_hash"),
        (json!({"input_hash": 1}), "input_hash"),
        (json!({"input_hash": "a", "success": "yes"}), "success"),
        (json!({"input_hash": "a", "status": "maybe"}), "status"),
        (json!([1]), "not a JSON object"),
    ] {
        let err = normalize_effect_row_value(bad, key).unwrap_err();
        assert!(err.is_corrupt() && err.key() == Some(key), "{err}");
        assert!(
            err.message().contains(field),
            "{} should name {field}",
            err.message()
        );
    }
}
