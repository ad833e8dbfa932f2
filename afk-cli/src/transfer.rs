//! `afk export` and `afk import`: a run or a thread as JSON Lines, between any two stores.
//!
//! The file holds one JSON object per line:
//! * `{"type": "header", "format": "afk-export", "version": 1, "thread", "runs": [...]}`, with
//!   `"as_stored": true` for `export --ciphertext`;
//! * per key of each run, sorted by run then key: `{"type": "key", "run", "key", "value"}`,
//!   `value` being the stored bytes as a string (every record, effect row and transcript entry
//!   is UTF-8 JSON), or `"value_hex"` for bytes that are not UTF-8. The latest pointer is
//!   included; the fence `run:<run>` is not (an import claims the run afresh);
//! * `{"type": "end", "keys": n}`, so a truncated file is refused.
//!
//! Import writes each run under a fresh claim of the target store: every key but the latest
//! pointer first (commits of at most 100 keys, or the store's `max_commit_keys`), the pointer
//! last, so no reader of the target ever sees a pointer to a missing record. A run that already
//! has keys in the target is refused (nothing written). Then every imported key is read back
//! and compared byte for byte, and the run is checked with `afk_core::verify`; any difference
//! or problem fails the import (exit 1).
//!
//! A store sealed at rest (`AFK_SEAL_*`) moves in one of two ways:
//! * **keeping the ciphertext**: `export --ciphertext` writes the values as the store holds
//!   them, sealed, without opening them (no keys needed), and the import writes them as they
//!   are, whatever `AFK_SEAL_*` says; they open where the source's keyring and key-encryption
//!   keys are given (the same keyring: erasing a thread there also erases it in every such
//!   copy). Given those keys, the import opens and verifies each run and indexes it; without
//!   them it compares the bytes only.
//! * **re-sealed under the target's keys**: `export` with the source's keys opens the values,
//!   and `import` with the target's keys seals them under the target's data keys, e.g.
//!   `AFK_SEAL_KEYRING=src … afk export --thread T | AFK_SEAL_KEYRING=dst … afk import -`
//!   (plaintext only in the pipe). The effect rows' hashes travel in plain form: the export
//!   re-hashes each row of a stored snapshot's pending batch from the source thread's keyed
//!   hashes to plain SHA-256 (which tells nothing the opened file does not), and the import
//!   re-hashes them into the target thread's form (keyed under its own hash key when it is
//!   sealed), so a run stopped in the middle of a tool batch resumes or is settled there as
//!   it would have been at the source. A row that matched no call at the source still
//!   matches none (an integrity conflict is not laundered).
//!
//! On a store that keeps the index of runs that need attention, a last empty commit under the
//! import's claim puts the run where it belongs: a finished run is closed (it enters the index
//! of finished runs of a store with one), an unfinished one gets an entry naming its agent
//! (from its newest snapshot) and its state (`paused`, `uncertain`, `suspended` with its
//! not-before time, else `stopped`), so that a worker of the target finds it as it would have
//! in the source.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::Arc;

use afk_core::hash::EffectHashes;
use afk_core::runner::rehash_effect_rows;
use afk_core::store::{StoreExt, latest_key};
use afk_core::verify::verify_run;
use afk_core::{
    Error, Result, RunId, ThreadId,
    store::{Commit, Store},
};
use serde_json::{Value, json};

use super::common::{ids, keys_of_run};
use super::output::{Ctx, Report, wl};

/// `afk export`
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The thread to export.
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
    /// Write to this file (default: stdout, and the summary goes to stderr).
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
    /// Export the values as the store holds them, sealed at rest, without opening them (no
    /// `AFK_SEAL_*` keys needed): the file stays ciphertext and opens only with the source's
    /// keyring and key-encryption keys; an import writes it as it is. Without it, a store
    /// opened with `AFK_SEAL_*` keys exports its values opened (plaintext), and an import
    /// into a store opened with keys seals them under the target's keys.
    #[arg(long)]
    ciphertext: bool,
}

/// `afk import`
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The export file (`-` reads stdin).
    #[arg(value_name = "FILE")]
    file: std::path::PathBuf,
}

/// A local file (or stdin/stdout) that cannot be read or written: the command's argument, not
/// the store, is what to look at (`InvalidInput`; its hint says so).
fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::invalid_input(format!("{what}: {e}")).with_source(e)
}

fn value_json(bytes: &[u8]) -> (&'static str, Value) {
    match std::str::from_utf8(bytes) {
        Ok(s) => ("value", Value::String(s.to_owned())),
        Err(_) => (
            "value_hex",
            Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect()),
        ),
    }
}

/// Export. JSON summary: `{"thread", "runs", "keys", "bytes", "out", "ciphertext"}`.
pub fn export(args: ExportArgs, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    let to_stdout = args.out.is_none();
    let ciphertext = args.ciphertext;
    let body = |store: Arc<dyn Store>| async move { export_to(args, &progress, store).await };
    if ciphertext {
        ctx.run_as_stored("export", !to_stdout, false, body)
    } else {
        ctx.run_to("export", !to_stdout, body)
    }
}

/// Write the export of `store` (opened, or as stored for `--ciphertext`).
async fn export_to(
    args: ExportArgs,
    progress: &super::output::Progress,
    store: Arc<dyn Store>,
) -> Result<Report> {
    {
        let (thread, run) = ids(&args.thread, args.run.as_deref())?;
        let runs = match run {
            Some(r) => vec![r],
            None => store.list_runs(&thread).await?,
        };
        let mut lines = Vec::new();
        let mut header = json!({"type": "header", "format": "afk-export", "version": 1,
            "thread": thread.as_str(), "runs": runs.iter().map(RunId::as_str).collect::<Vec<_>>()});
        if args.ciphertext {
            header["as_stored"] = Value::Bool(true);
        }
        lines.push(header.to_string());
        let (mut keys_n, mut bytes_n) = (0usize, 0usize);
        let mut hashes = None;
        for (i, run) in runs.iter().enumerate() {
            progress.tick("exporting runs", i, Some(runs.len()));
            let mut values = run_values(store.as_ref(), &thread, run).await?;
            if !args.ciphertext && values.iter().any(|(k, _)| k.starts_with("effect:")) {
                // The file holds the values opened: their effect hashes go in plain form, which
                // any target re-hashes into its own (and which tells nothing the file does not).
                if hashes.is_none() {
                    hashes = Some(store.effect_hashes(&thread).await?);
                }
                let plain = EffectHashes::plain();
                let from = hashes.as_ref().unwrap_or(&plain);
                rehash_effect_rows(&thread, &mut values, from, &plain);
            }
            for (key, bytes) in &values {
                let (field, value) = value_json(bytes);
                let mut line = json!({"type": "key", "run": run.as_str(), "key": key});
                line[field] = value;
                lines.push(line.to_string());
                keys_n += 1;
                bytes_n += bytes.len();
            }
        }
        progress.done();
        lines.push(json!({"type": "end", "keys": keys_n}).to_string());
        let mut text = lines.join("\n");
        text.push('\n');
        match &args.out {
            Some(path) => std::fs::write(path, text)
                .map_err(|e| io_err(&format!("cannot write {}", path.display()), e))?,
            None => std::io::stdout()
                .lock()
                .write_all(text.as_bytes())
                .map_err(|e| io_err("cannot write to stdout", e))?,
        }
        let out = args
            .out
            .as_ref()
            .map_or_else(|| "-".to_owned(), |p| p.display().to_string());
        let doc = json!({"thread": thread.as_str(), "runs": runs.len(), "keys": keys_n,
            "bytes": bytes_n, "out": out, "ciphertext": args.ciphertext});
        let human = format!(
            "exported {} run(s) of thread {thread}: {keys_n} keys, {bytes_n} bytes{} to {out}\n",
            runs.len(),
            if args.ciphertext { " as stored" } else { "" }
        );
        Ok(Report::ok(doc, human))
    }
}

/// The keys and values of `run` (its fence aside), sorted by key; `NotFound` when it has none.
async fn run_values(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
) -> Result<Vec<(String, Vec<u8>)>> {
    let fence = afk_core::store::run_key(run);
    let mut keys: Vec<String> = keys_of_run(store, thread, run)
        .await?
        .into_iter()
        .filter(|k| *k != fence)
        .collect();
    if keys.is_empty() {
        return Err(Error::not_found(format!(
            "run {run} has no records in thread {thread}"
        )));
    }
    keys.sort();
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(afk_core::store::MAX_LIST_LIMIT) {
        let values = store.get_many(thread, chunk).await?;
        for (key, v) in chunk.iter().zip(values) {
            if let Some(bytes) = v {
                out.push((key.clone(), bytes)); // else deleted meanwhile
            }
        }
    }
    Ok(out)
}

/// One parsed export file: the thread and, per run, its keys and bytes.
struct Parsed {
    thread: ThreadId,
    runs: BTreeMap<RunId, Vec<(String, Vec<u8>)>>,
    /// The values as the source stored them (`export --ciphertext`): written as they are.
    as_stored: bool,
}

fn parse(text: &str) -> Result<Parsed> {
    let bad = |n: usize, why: String| Error::invalid_input(format!("export line {n}: {why}"));
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (n, first) = lines
        .next()
        .ok_or_else(|| Error::invalid_input("the export file is empty"))?;
    let header: Value = serde_json::from_str(first).map_err(|e| bad(n, e.to_string()))?;
    if header["type"] != "header" || header["format"] != "afk-export" || header["version"] != 1 {
        return Err(bad(n, "not an afk-export version 1 header".into()));
    }
    let thread = ThreadId::new(header["thread"].as_str().unwrap_or_default())?;
    let as_stored = header["as_stored"] == true;
    let mut runs: BTreeMap<RunId, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    for r in header["runs"].as_array().into_iter().flatten() {
        runs.insert(RunId::new(r.as_str().unwrap_or_default())?, Vec::new());
    }
    let mut count = 0usize;
    for (n, line) in lines {
        let v: Value = serde_json::from_str(line).map_err(|e| bad(n, e.to_string()))?;
        match v["type"].as_str() {
            Some("key") => {
                let run = RunId::new(v["run"].as_str().unwrap_or_default())?;
                let key = v["key"].as_str().unwrap_or_default().to_owned();
                afk_core::store::validate_key(&key)?;
                if afk_core::store::run_of_key(&key) != Some(run.as_str()) {
                    return Err(bad(n, format!("key {key:?} does not belong to run {run}")));
                }
                let bytes = match (v["value"].as_str(), v["value_hex"].as_str()) {
                    (Some(s), _) => s.as_bytes().to_vec(),
                    (None, Some(h)) => hex(h).ok_or_else(|| bad(n, "bad value_hex".into()))?,
                    _ => return Err(bad(n, "a key line without a value".into())),
                };
                runs.get_mut(&run)
                    .ok_or_else(|| bad(n, format!("run {run} is not in the header")))?
                    .push((key, bytes));
                count += 1;
            }
            Some("end") => {
                if v["keys"].as_u64() != Some(count as u64) {
                    return Err(bad(n, format!("the file ends after {count} keys")));
                }
                return Ok(Parsed {
                    thread,
                    runs,
                    as_stored,
                });
            }
            _ => return Err(bad(n, "unknown line type".into())),
        }
    }
    Err(Error::invalid_input(
        "the export file has no end line: it is truncated; export again",
    ))
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Write one run under a fresh claim, the pointer last; `reader` (the store opened, when it
/// can be) reads the run's state for its index entry.
async fn import_run(
    store: &dyn Store,
    reader: Option<&dyn Store>,
    thread: &ThreadId,
    run: &RunId,
    keys: &[(String, Vec<u8>)],
) -> Result<()> {
    let lk = latest_key(run);
    if !keys_of_run(store, thread, run).await?.is_empty() {
        return Err(Error::conflict(format!(
            "run {run} already has keys in thread {thread} of the target store; nothing \
             imported (delete it first with `afk prune --thread {thread} --run {run} --force`)"
        ))
        .with_key(lk));
    }
    let epoch = store.claim(thread, run).await?;
    // Looked at again under the claim: a runner may have started a run under this id since
    // (its commits are fenced from now on). Mixing the export into it would tear both.
    let fence = afk_core::store::run_key(run);
    if keys_of_run(store, thread, run)
        .await?
        .iter()
        .any(|k| *k != fence)
    {
        return Err(Error::conflict(format!(
            "run {run} was started in thread {thread} of the target store while it was being \
             imported; nothing imported, and the import's claim fenced that run (resume it, or \
             delete it first with `afk prune --thread {thread} --run {run} --force`)"
        ))
        .with_key(lk));
    }
    let per = store
        .capabilities()
        .max_commit_keys
        .unwrap_or(100)
        .clamp(1, 100);
    let latest = keys.iter().find(|(k, _)| *k == lk).map(|(_, v)| v.clone());
    let puts: Vec<(String, Vec<u8>)> = keys.iter().filter(|(k, _)| *k != lk).cloned().collect();
    let commit = |puts: Vec<(String, Vec<u8>)>, latest: Option<Vec<u8>>| Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts,
        latest,
        attention: None,
    };
    for chunk in puts.chunks(per) {
        store.commit(&commit(chunk.to_vec(), None)).await?;
    }
    if latest.is_some() {
        store.commit(&commit(Vec::new(), latest)).await?;
    }
    if store.capabilities().attention
        && let Some(reader) = reader
        && let Some(attention) = attention_of(reader, thread, run, keys, epoch).await?
    {
        let mut c = commit(Vec::new(), None);
        c.attention = Some(attention);
        store.commit(&c).await?;
    }
    Ok(())
}

/// Where the imported run belongs in the index of runs that need attention: closed when it
/// has finished, else open with an entry for its state and agent; `None` for a run whose
/// pointer is unreadable or missing (`afk verify` says why; no worker could resume it).
async fn attention_of(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    keys: &[(String, Vec<u8>)],
    epoch: afk_core::store::Epoch,
) -> Result<Option<afk_core::store::Attention>> {
    use afk_core::schema::{MarkState, PhasePayload, RunMark};
    use afk_core::store::Attention;
    let st = super::status::run_status(store, thread, run).await?;
    if st.is_terminal() {
        return Ok(Some(Attention::Closed));
    }
    // The newest snapshot names the agent and, for a suspended run, its not-before time.
    let prefix = format!("checkpoint:{run}:");
    let snapshot = keys
        .iter()
        .filter_map(|(k, v)| {
            let step: u64 = k
                .strip_prefix(&prefix)?
                .strip_suffix(":runtime_state")?
                .parse()
                .ok()?;
            Some((step, k, v))
        })
        .max_by_key(|(step, _, _)| *step)
        .and_then(|(_, k, v)| afk_core::normalize::normalize_record(v, thread, k).ok())
        .and_then(|r| match r.payload {
            PhasePayload::RuntimeState(s) => Some(s),
            _ => None,
        });
    let state = match st.state.as_str() {
        "paused" => MarkState::Paused,
        "uncertain" => MarkState::Uncertain,
        "suspended" => MarkState::Suspended,
        // Unreadable, or keys without a pointer: nothing a worker could resume.
        "unreadable" | "claimed" => return Ok(None),
        _ => MarkState::Stopped,
    };
    let mut mark = RunMark::new(state);
    mark.epoch = epoch.0;
    // A child run is resumed by its parent, not by a worker.
    mark.depth = u32::from(afk_core::runner::is_child_run_id(run));
    mark.updated_ms = afk_core::store::store_now_ms();
    if let Some(s) = &snapshot {
        if let Some(agent) = s.agent() {
            mark.agent = agent.name;
            mark.version = Some(agent.version).filter(|v| !v.is_empty());
        }
        if state == MarkState::Suspended {
            mark.not_before_ms = s.suspension().map_or(0, |x| x.not_before_ms);
        }
    }
    Ok(Some(Attention::Open(mark.encode())))
}

/// Read every imported key back and compare; then verify the run through `reader` (the store
/// opened), when there is one.
async fn check_run(
    store: &dyn Store,
    reader: Option<&dyn Store>,
    thread: &ThreadId,
    run: &RunId,
    keys: &[(String, Vec<u8>)],
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for chunk in keys.chunks(afk_core::store::MAX_LIST_LIMIT) {
        let names: Vec<String> = chunk.iter().map(|(k, _)| k.clone()).collect();
        for ((key, want), got) in chunk.iter().zip(store.get_many(thread, &names).await?) {
            if got.as_deref() != Some(want.as_slice()) {
                problems.push(format!("{key}: read back differs from the export"));
            }
        }
    }
    if let Some(reader) = reader {
        let report = verify_run(reader, thread, run).await?;
        problems.extend(report.problems.iter().map(|p| p.message.clone()));
    }
    Ok(problems)
}

/// The text of the export file `file` (`-`: stdin).
fn read_export(file: &std::path::Path) -> Result<String> {
    if file.as_os_str() == "-" {
        let mut s = String::new();
        for line in std::io::stdin().lock().lines() {
            s.push_str(&line.map_err(|e| io_err("cannot read stdin", e))?);
            s.push('\n');
        }
        Ok(s)
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| io_err(&format!("cannot read {}", file.display()), e))
    }
}

/// Import. JSON summary: `{"thread", "runs": [{"run", "keys", "problems"}], "keys", "ok",
/// "as_stored", "opened", "rehashed"}` (`rehashed`: effect rows whose hashes were written in
/// the target thread's form).
pub fn import(args: ImportArgs, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    // The file is read and checked before the store is opened: one that cannot be imported
    // leaves no new, empty store behind.
    let parsed = match read_export(&args.file).and_then(|text| parse(&text)) {
        Ok(parsed) => parsed,
        Err(e) => return ctx.fail("import", &e),
    };
    if parsed.as_stored {
        // Written as they are; opened (to verify them and index the runs) with the
        // `AFK_SEAL_*` keys when given: the source's keyring and keys.
        ctx.run_as_stored("import", true, true, |store| async move {
            let opened = super::common::sealed_from_env(store.clone()).await?;
            let opened = opened.map(|s| Arc::new(s) as Arc<dyn Store>);
            import_all(parsed, &progress, store, opened).await
        })
    } else {
        ctx.run_creating("import", |store| async move {
            import_all(parsed, &progress, store.clone(), Some(store)).await
        })
    }
}

/// Import every run of `parsed` into `store`, verified through `reader`.
async fn import_all(
    parsed: Parsed,
    progress: &super::output::Progress,
    store: Arc<dyn Store>,
    reader: Option<Arc<dyn Store>>,
) -> Result<Report> {
    {
        let thread = parsed.thread;
        let reader = reader.as_deref();
        let mut o = String::new();
        let (mut docs, mut total, mut bad) = (Vec::new(), 0, 0);
        let mut runs = parsed.runs;
        let mut rehashed = 0;
        if !parsed.as_stored
            && runs
                .values()
                .flatten()
                .any(|(k, _)| k.starts_with("effect:"))
        {
            // Opened values carry plain effect hashes: written in the target thread's form.
            let to = store.effect_hashes(&thread).await?;
            for keys in runs.values_mut() {
                let plain = EffectHashes::plain();
                rehashed += rehash_effect_rows(&thread, keys, &plain, &to).rehashed;
            }
        }
        for (i, (run, keys)) in runs.iter().enumerate() {
            progress.tick("importing runs", i, Some(runs.len()));
            import_run(store.as_ref(), reader, &thread, run, keys).await?;
            let problems = check_run(store.as_ref(), reader, &thread, run, keys).await?;
            total += keys.len();
            if problems.is_empty() && reader.is_none() {
                wl!(
                    o,
                    "imported {run} ({} keys as stored, read back byte for byte; not opened: \
                     no AFK_SEAL_* keys)",
                    keys.len()
                );
            } else if problems.is_empty() {
                wl!(o, "imported {run} ({} keys, verified)", keys.len());
            } else {
                bad += 1;
                for p in &problems {
                    wl!(o, "PROBLEM {run}: {p}");
                }
            }
            docs.push(json!({"run": run.as_str(), "keys": keys.len(), "problems": problems}));
        }
        progress.done();
        wl!(
            o,
            "{} run(s) imported into thread {thread}, {total} keys",
            docs.len()
        );
        let doc = json!({"thread": thread.as_str(), "runs": docs, "keys": total, "ok": bad == 0,
            "as_stored": parsed.as_stored, "opened": reader.is_some(), "rehashed": rehashed});
        let mut report = Report::ok(doc, o);
        report.failed = bad > 0;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use afk_core::store::{Commit, FaultStore, Op, Store};
    use afk_core::{ErrorKind, MemoryStore, RunId, ThreadId};

    use super::import_run;

    /// A run started under the same id between the import's look and its claim: the import
    /// writes nothing, and the run keeps exactly what it had.
    #[tokio::test]
    async fn an_import_overtaken_by_a_run_writes_nothing() {
        let (thread, run) = (ThreadId::new("t").unwrap(), RunId::new("r").unwrap());
        let inner = Arc::new(MemoryStore::new());
        let held = Arc::new(FaultStore::from_arc(inner.clone()));
        let claim = held.hold_nth(Op::Claim, 1);
        let exported = vec![
            ("checkpoint:r:1:pre_llm".to_owned(), b"{}".to_vec()),
            ("checkpoint:r:latest".to_owned(), b"{}".to_vec()),
        ];
        let import = tokio::spawn({
            let (held, thread, run) = (held.clone(), thread.clone(), run.clone());
            async move { import_run(held.as_ref(), None, &thread, &run, &exported).await }
        });
        tokio::time::timeout(std::time::Duration::from_secs(60), claim.reached())
            .await
            .expect("the import never claimed");
        let epoch = inner.claim(&thread, &run).await.unwrap();
        inner
            .commit(&Commit {
                thread: thread.clone(),
                run: run.clone(),
                epoch,
                puts: vec![("checkpoint:r:0:run_started".to_owned(), b"live".to_vec())],
                latest: Some(b"live".to_vec()),
                attention: None,
            })
            .await
            .unwrap();
        let mut before = inner.snapshot(&thread);
        claim.release();
        let err = import.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        let mut after = inner.snapshot(&thread);
        let fence = afk_core::store::run_key(&run);
        assert!(after.remove(&fence).is_some());
        before.remove(&fence);
        assert_eq!(after, before, "the import wrote into the live run");
    }
}
