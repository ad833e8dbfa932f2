//! The AFK golden-fixture file format (`fixtures/afk-python/README.md`, "File format") and the
//! checks that
//! can be made without running an agent ([`check_normalize`], [`check_hash_vectors`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::{RunId, ThreadId};
use crate::normalize::{normalize_effect_row_value, normalize_record_value};
use crate::store::{Commit, Store, latest_key, run_of_key};

/// What a resume did (`afk_resume`) or must do (`expect`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResumeOutcome {
    /// `"completed"` (resume returned a result) or `"error"` (resume raised).
    pub outcome: String,
    /// Python exception class name, when `outcome` is `"error"`.
    pub error_type: Option<String>,
    /// Exception text, when `outcome` is `"error"`.
    pub error_message: Option<String>,
    /// `AgentResult.final_text` (null on error).
    pub final_text: Option<String>,
    /// `AgentResult.state` (null on error).
    pub state: Option<String>,
    /// LLM requests made during the resume.
    pub llm_calls_during_resume: u64,
    /// tool_call_id → real executions during the resume (replays not counted).
    pub tool_invocations_during_resume: BTreeMap<String, u64>,
    /// `state_snapshot.replayed_effect_count` of the result (null on error).
    pub replayed_effect_count: Option<u64>,
    /// `afk_resume` only: AFK's serialized `AgentResult`, or null.
    #[serde(default)]
    pub result: Option<Value>,
    /// `expect` only: why this is the expected behaviour.
    #[serde(default)]
    pub notes: Option<String>,
    /// `expect` only, optional (an addition to AFK's format): the stored keys whose records
    /// must be rejected as corrupt, exactly. Without it, an `"error"` outcome lets the record
    /// resume reads first (the latest pointer, and step keys holding the same record) be
    /// rejected, and nothing else; see [`check_normalize`].
    #[serde(default)]
    pub rejects: Option<Vec<String>>,
}

/// One fixture file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Fixture {
    /// Identifier (the file stem).
    pub name: String,
    /// What the case is about.
    pub description: String,
    /// Thread id to resume in.
    pub thread_id: ThreadId,
    /// Run id to resume.
    pub run_id: RunId,
    /// Every state key of the thread and its stored JSON value.
    pub state: BTreeMap<String, Value>,
    /// The scripted LLM and tools (interpreted by the runner's test harness).
    pub script: Value,
    /// AFK's `AgentResult` of the uninterrupted run.
    pub uninterrupted: Value,
    /// What AFK did on resume.
    pub afk_resume: ResumeOutcome,
    /// What a correct implementation must do.
    pub expect: ResumeOutcome,
    /// Why `expect` differs from `afk_resume`, or `None`.
    pub deviation: Option<String>,
    /// The file the fixture was loaded from (not part of the format).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// One entry of `hash-vectors.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HashVector {
    /// The hashed JSON value.
    pub value: Value,
    /// AFK's canonical JSON text of `value`.
    pub canonical: String,
    /// Lowercase hex SHA-256 of `canonical`.
    pub sha256: String,
}

/// A file of the fixture folder.
#[derive(Debug, Clone, PartialEq)]
pub enum FixtureFile {
    /// A resume scenario.
    Fixture(Box<Fixture>),
    /// The canonical-hash vectors.
    HashVectors(Vec<HashVector>),
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::invalid_input(format!("cannot read {}", path.display())).with_source(e)
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::invalid_input(format!("{} is not JSON", path.display())).with_source(e))
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, v: Value) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        Error::invalid_input(format!(
            "{}: field {}: {}",
            path.display(),
            e.path(),
            e.inner()
        ))
    })
}

impl Fixture {
    /// Load a fixture file. Errors: `InvalidInput` when it cannot be read or does not have the
    /// fixture format (the message names the field).
    pub fn load(path: impl AsRef<Path>) -> Result<Fixture> {
        let path = path.as_ref();
        let mut f: Fixture = decode(path, read_json(path)?)?;
        f.source = Some(path.to_path_buf());
        Ok(f)
    }
}

impl FixtureFile {
    /// Load a fixture or a hash-vector file (a JSON array is read as hash vectors).
    pub fn load(path: impl AsRef<Path>) -> Result<FixtureFile> {
        let path = path.as_ref();
        let value = read_json(path)?;
        if value.is_array() {
            return Ok(FixtureFile::HashVectors(decode(path, value)?));
        }
        let mut f: Fixture = decode(path, value)?;
        f.source = Some(path.to_path_buf());
        Ok(FixtureFile::Fixture(Box::new(f)))
    }
}

/// A normalized stored value, for comparison.
#[derive(Debug, PartialEq)]
enum Normalized {
    Record(Box<crate::schema::CheckpointRecord>),
    Effect(Box<crate::schema::EffectRow>),
    Other,
}

fn normalize_entry(thread: &ThreadId, key: &str, value: &Value) -> Result<Normalized> {
    if key.starts_with("checkpoint:") {
        normalize_record_value(value.clone(), thread, key).map(|r| Normalized::Record(Box::new(r)))
    } else if key.starts_with("effect:") {
        normalize_effect_row_value(value.clone(), key).map(|r| Normalized::Effect(Box::new(r)))
    } else {
        Ok(Normalized::Other)
    }
}

/// The stored keys whose records the fixture's `expect` block says must be rejected, and
/// whether that set is exact (`expect.rejects`) or only allowed (derived from the outcome).
fn must_reject(fixture: &Fixture) -> (Vec<String>, bool) {
    if let Some(keys) = &fixture.expect.rejects {
        return (keys.clone(), true);
    }
    if fixture.expect.outcome != "error" {
        return (Vec::new(), true);
    }
    // Resume reads the latest pointer first: that record may be what makes it fail, and then
    // so must every step key holding the same record.
    let latest = latest_key(&fixture.run_id);
    let Some(value) = fixture.state.get(&latest) else {
        return (Vec::new(), true);
    };
    let keys = fixture
        .state
        .iter()
        .filter(|(k, v)| **k == latest || (k.starts_with("checkpoint:") && *v == value))
        .map(|(k, _)| k.clone())
        .collect();
    (keys, false)
}

/// Whether a normalized checkpoint record belongs where it is stored: the fixture's run and
/// thread, and (for step keys) the step and phase its key names.
fn check_place(fixture: &Fixture, key: &str, n: &Normalized) -> std::result::Result<(), String> {
    let Normalized::Record(r) = n else {
        return Ok(());
    };
    if r.run_id != fixture.run_id || r.thread_id != fixture.thread_id {
        return Err(format!(
            "{key}: normalizes to run {} thread {}, not the fixture's run {} thread {}",
            r.run_id, r.thread_id, fixture.run_id, fixture.thread_id
        ));
    }
    let parts: Vec<&str> = key.split(':').collect();
    if let [_, _, step, phase] = parts[..] {
        let at = format!("{}:{}", r.step, r.phase.as_str());
        if at != format!("{step}:{phase}") {
            return Err(format!("{key}: normalizes to a record of {at}"));
        }
    }
    Ok(())
}

/// The normalize level of `afk fixtures check`, driven by the fixture's own `expect` block
/// (never by its name):
///
/// * every stored checkpoint record and effect row normalizes, and each checkpoint record to
///   one of the fixture's run and thread, at the step and phase its key names;
/// * except the records that must be rejected: with `expect.rejects`, exactly those keys;
///   without it, an `"error"` outcome allows the record resume reads first (the latest
///   pointer, with every step key holding the same record) to be rejected, all of them or
///   none (an error that shows only when resuming, such as an effect-journal conflict or a
///   missing pointer, is the resume level's to check). A rejection must be a `Corrupt` error
///   naming the key.
///
/// `Err` says what differed.
pub fn check_normalize(fixture: &Fixture) -> std::result::Result<(), String> {
    let thread = &fixture.thread_id;
    let (reject, exact) = must_reject(fixture);
    let mut rejected = Vec::new();
    for (key, value) in &fixture.state {
        match normalize_entry(thread, key, value) {
            Ok(n) => {
                check_place(fixture, key, &n)?;
                if exact && reject.contains(key) {
                    return Err(format!(
                        "{key}: normalized, but the fixture's expect block says it must be \
                         rejected as corrupt"
                    ));
                }
            }
            Err(e) if reject.contains(key) => {
                if !e.is_corrupt() || e.key() != Some(key.as_str()) {
                    return Err(format!(
                        "{key}: expected a corruption error naming this key, got: {e}"
                    ));
                }
                rejected.push(key.clone());
            }
            Err(e) if fixture.expect.outcome == "error" => {
                return Err(format!(
                    "{key}: {e} (the resume is expected to fail, but not on this record: only \
                     {reject:?} may be rejected)"
                ));
            }
            Err(e) => return Err(format!("{key}: {e} (the resume is expected to complete)")),
        }
    }
    if exact {
        if let Some(missing) = reject.iter().find(|k| !fixture.state.contains_key(*k)) {
            return Err(format!(
                "{missing}: missing, but it is a record that must be rejected"
            ));
        }
    } else if !rejected.is_empty() && rejected.len() != reject.len() {
        return Err(format!(
            "{rejected:?} rejected, but {reject:?} hold the same record: all or none"
        ));
    }
    Ok(())
}

/// The keys whose records [`check_normalize`] found rejected as corrupt: the records a
/// resume must fail on, naming one of them. Empty when every record normalizes.
pub fn rejected_keys(fixture: &Fixture) -> Vec<String> {
    fixture
        .state
        .iter()
        .filter(|(k, v)| normalize_entry(&fixture.thread_id, k, v).is_err())
        .map(|(k, _)| k.clone())
        .collect()
}

/// Check every hash vector against [`crate::hash::canonical_json`] and [`crate::hash::json_hash`].
/// `Err` names the first vector that differs.
pub fn check_hash_vectors(vectors: &[HashVector]) -> std::result::Result<(), String> {
    for (i, v) in vectors.iter().enumerate() {
        let canonical = crate::hash::canonical_json(&v.value);
        if canonical != v.canonical {
            return Err(format!(
                "vector {i}: canonical JSON {canonical:?}, expected {:?}",
                v.canonical
            ));
        }
        let hash = crate::hash::json_hash(&v.value);
        if hash != v.sha256 {
            return Err(format!("vector {i}: sha256 {hash}, expected {}", v.sha256));
        }
    }
    Ok(())
}

/// Run the normalize-level check on any fixture-folder file.
pub fn check_file_normalize(file: &FixtureFile) -> std::result::Result<(), String> {
    match file {
        FixtureFile::Fixture(f) => check_normalize(f),
        FixtureFile::HashVectors(v) => check_hash_vectors(v),
    }
}

/// The puts and the latest-pointer value of one run.
type RunWrites = (Vec<(String, Vec<u8>)>, Option<Vec<u8>>);

/// Load a fixture's `state` map (key -> JSON value) into `store` under `thread`.
///
/// Each run of the map is claimed once, then its keys are committed under that epoch, with the
/// `checkpoint:<run>:latest` value as the latest pointer of the run's last commit, so the
/// pointer never names a record that is not there yet. Runs are written in key order. A store
/// with [`Capabilities::max_commit_keys`](crate::store::Capabilities::max_commit_keys) gets
/// the keys in chunks that fit (the pointer counted as a key). Works for any store, e.g.
/// `load_state(arc.as_ref(), …)` for an `Arc<dyn Store>`.
///
/// Errors: `InvalidInput` for a key that belongs to no run or an invalid run id; the store's
/// errors.
pub async fn load_state(
    store: &dyn Store,
    thread: &ThreadId,
    state: &Map<String, Value>,
) -> Result<()> {
    let mut by_run: BTreeMap<String, RunWrites> = BTreeMap::new();
    for (key, value) in state {
        let run = run_of_key(key)
            .ok_or_else(|| Error::invalid_input(format!("state key {key:?} belongs to no run")))?;
        let bytes = serde_json::to_vec(value)
            .map_err(|e| Error::invalid_input(format!("state value of {key}: {e}")))?;
        let entry = by_run.entry(run.to_owned()).or_default();
        let run_id = RunId::new(run)?;
        if *key == latest_key(&run_id) {
            entry.1 = Some(bytes);
        } else {
            entry.0.push((key.clone(), bytes));
        }
    }
    let chunk = store
        .capabilities()
        .max_commit_keys
        .map_or(usize::MAX, |m| m.saturating_sub(1).max(1));
    for (run, (puts, latest)) in by_run {
        let run = RunId::new(run)?;
        let epoch = store.claim(thread, &run).await?;
        let mut chunks: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
        let mut rest = puts.into_iter().peekable();
        while rest.peek().is_some() {
            chunks.push(rest.by_ref().take(chunk).collect());
        }
        if chunks.is_empty() {
            chunks.push(Vec::new());
        }
        let last = chunks.len() - 1;
        let mut latest = latest;
        for (i, puts) in chunks.into_iter().enumerate() {
            store
                .commit(&Commit {
                    thread: thread.clone(),
                    run: run.clone(),
                    epoch,
                    puts,
                    latest: if i == last { latest.take() } else { None },
                    attention: None,
                })
                .await?;
        }
    }
    Ok(())
}
