//! A small durable store for the crash level's own tests: every successful operation is one
//! line appended to a log file (one `write` call), replayed into a `MemoryStore` on open. A
//! process killed at any moment leaves whole lines plus at most one torn last line, which
//! replay ignores (that operation was never acknowledged).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use afk_core::store::{
    AttentionPage, ThreadPage, attention_unsupported, commit_each, threads_unsupported,
};
use afk_core::{
    Error, MemoryStore, Result, RunId, ThreadId,
    store::{Capabilities, Commit, Epoch, ListPage, Store},
};
use async_trait::async_trait;
use serde_json::{Value, json};

/// The store. Operations are serialized by one async mutex held across the memory update and
/// the log append.
#[derive(Debug)]
pub struct FileLog {
    mem: MemoryStore,
    log: tokio::sync::Mutex<File>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn bad(what: &str) -> Error {
    Error::corrupt(format!("filelog: bad {what}"))
}

impl FileLog {
    /// Open (or create) the log `dir/log`, replaying what it holds.
    pub async fn open(dir: impl AsRef<Path>) -> Result<FileLog> {
        let path: PathBuf = dir.as_ref().join("log");
        let mem = MemoryStore::new();
        let bytes = std::fs::read(&path).unwrap_or_default();
        // A torn last line (the process died while writing it) was never acknowledged: drop it,
        // so the next append starts a line of its own.
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&bytes[..whole]);
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).map_err(|_| bad("a line is not JSON"))?;
            let s = |k: &str| v[k].as_str().ok_or_else(|| bad(k));
            let thread = ThreadId::new(s("thread")?)?;
            match s("op")? {
                "claim" => {
                    mem.claim(&thread, &RunId::new(s("run")?)?).await?;
                }
                "commit" => {
                    let puts = v["puts"]
                        .as_array()
                        .ok_or_else(|| bad("puts"))?
                        .iter()
                        .map(|p| Some((p[0].as_str()?.to_owned(), unhex(p[1].as_str()?)?)))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| bad("puts"))?;
                    let latest = match v["latest"].as_str() {
                        Some(h) => Some(unhex(h).ok_or_else(|| bad("latest"))?),
                        None => None,
                    };
                    mem.commit(&Commit {
                        thread,
                        run: RunId::new(s("run")?)?,
                        epoch: Epoch(v["epoch"].as_u64().ok_or_else(|| bad("epoch"))?),
                        puts,
                        latest,
                        attention: None,
                    })
                    .await?;
                }
                "delete" => {
                    let keys: Vec<String> = v["keys"]
                        .as_array()
                        .ok_or_else(|| bad("keys"))?
                        .iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect();
                    mem.delete(&thread, &keys).await?;
                }
                "delete_run" => {
                    mem.delete_run(&thread, &RunId::new(s("run")?)?).await?;
                }
                _ => return Err(bad("unknown op")),
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::unavailable("open the log").with_source(e))?;
        file.set_len(whole as u64)
            .map_err(|e| Error::unavailable("truncate the log").with_source(e))?;
        Ok(FileLog {
            mem,
            log: tokio::sync::Mutex::new(file),
        })
    }
}

fn append(file: &mut File, entry: &Value) -> Result<()> {
    let mut line = entry.to_string();
    line.push('\n');
    file.write_all(line.as_bytes())
        .map_err(|e| Error::unavailable("append to the log").with_source(e))
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Store for FileLog {
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::new("filelog");
        c.durable = true;
        c
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        self.mem.get(thread, key).await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        self.mem.get_many(thread, keys).await
    }

    /// The capability is off (the log keeps no index of threads).
    async fn list_threads(&self, _cursor: Option<&str>, _limit: usize) -> Result<ThreadPage> {
        Err(threads_unsupported("filelog"))
    }

    async fn list_attention(&self, _cursor: Option<&str>, _limit: usize) -> Result<AttentionPage> {
        Err(attention_unsupported("filelog"))
    }

    async fn effect_hashes(&self, thread: &ThreadId) -> Result<afk_core::hash::EffectHashes> {
        self.mem.effect_hashes(thread).await
    }

    async fn attention(&self, _thread: &ThreadId, _run: &RunId) -> Result<Option<Vec<u8>>> {
        Err(attention_unsupported("filelog"))
    }

    async fn list_finished(
        &self,
        _before_ms: u64,
        _cursor: Option<&str>,
        _limit: usize,
    ) -> Result<afk_core::store::FinishedPage> {
        Err(afk_core::store::finished_unsupported("filelog"))
    }

    async fn forget_finished(&self, _entries: &[afk_core::store::FinishedRun]) -> Result<()> {
        Err(afk_core::store::finished_unsupported("filelog"))
    }

    async fn claim_if(
        &self,
        _thread: &ThreadId,
        _run: &RunId,
        _seen: Epoch,
    ) -> Result<Option<Epoch>> {
        Err(afk_core::Error::unsupported(
            "filelog cannot claim on condition",
        ))
    }

    /// Each commit appended to the log by [`FileLog::commit`].
    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        commit_each(self, commits).await
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        self.mem.list(thread, prefix, cursor, limit).await
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        let mut log = self.log.lock().await;
        self.mem.delete(thread, keys).await?;
        append(
            &mut log,
            &json!({"op": "delete", "thread": thread.as_str(), "keys": keys}),
        )
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let mut log = self.log.lock().await;
        let n = self.mem.delete_run(thread, run).await?;
        append(
            &mut log,
            &json!({"op": "delete_run", "thread": thread.as_str(), "run": run.as_str()}),
        )?;
        Ok(n)
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        let _ = (thread, run, epoch);

        Ok(())
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let mut log = self.log.lock().await;
        let e = self.mem.claim(thread, run).await?;
        append(
            &mut log,
            &json!({"op": "claim", "thread": thread.as_str(), "run": run.as_str()}),
        )?;
        Ok(e)
    }

    /// Through this store's own `claim`, which logs it.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        afk_core::store::claim_if_new_each(self, thread, run).await
    }

    /// Through this store's own `commit` (which logs it).
    async fn commit_owned(
        &self,
        commit: Commit,
    ) -> std::result::Result<(), afk_core::store::CommitRejected> {
        afk_core::store::commit_by_ref(self, commit).await
    }

    async fn commit(&self, c: &Commit) -> Result<()> {
        let mut log = self.log.lock().await;
        self.mem.commit(c).await?;
        let puts: Vec<Value> = c.puts.iter().map(|(k, v)| json!([k, hex(v)])).collect();
        append(
            &mut log,
            &json!({
                "op": "commit",
                "thread": c.thread.as_str(),
                "run": c.run.as_str(),
                "epoch": c.epoch.0,
                "puts": puts,
                "latest": c.latest.as_deref().map(hex),
            }),
        )
    }
}
