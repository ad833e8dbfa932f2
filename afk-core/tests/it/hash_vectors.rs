//! Every vector AFK's own `json_hash` produced (fixtures/afk-python/hash-vectors.json) is
//! reproduced byte for byte.

use std::path::PathBuf;

use afk_core::hash::{canonical_json, json_hash};
use serde_json::Value;

#[test]
fn every_afk_hash_vector_matches() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python/hash-vectors.json");
    let text = std::fs::read_to_string(&path).expect("read hash-vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("parse hash-vectors.json");
    assert_eq!(vectors.len(), 49, "the corpus has 49 vectors");
    let mut failures = Vec::new();
    for (i, v) in vectors.iter().enumerate() {
        let value = &v["value"];
        let want_text = v["canonical"].as_str().expect("canonical is a string");
        let want_hash = v["sha256"].as_str().expect("sha256 is a string");
        let got = canonical_json(value);
        if got != want_text {
            failures.push(format!("#{i}: canonical {got:?} != {want_text:?}"));
        }
        if json_hash(value) != want_hash {
            failures.push(format!("#{i}: sha256 differs for {want_text:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
