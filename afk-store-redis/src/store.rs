//! [`RedisStore`]: the store contract over Redis or Redis Cluster.

use std::borrow::Cow;
use std::collections::BTreeMap;

use afk_core::store::validate_key;
use afk_core::store::{
    Capabilities, Commit, Epoch, ListPage, Store, latest_key, run_key, validate_commit,
    validate_list,
};
use afk_core::{Error, Result, RunId, ThreadId};
use async_trait::async_trait;
use redis::{RedisResult, Value};

use crate::config::RedisConfig;
use crate::conn::{Client, Repeat, ScriptCall};
use crate::error::map_err;
use crate::scripts::Scripts;

/// Largest value one put (or the latest pointer) may carry: 32 MiB.
///
/// Redis itself takes bulk strings up to 512 MiB (`proto-max-bulk-len`), but a commit is one
/// command holding all its values, the server is single-threaded while it runs the script, and
/// the command must arrive within the response timeout and under `client-query-buffer-limit`
/// (1 GiB). 32 MiB keeps one commit from stalling every other client of the server for
/// seconds; AFK records are far smaller.
pub const MAX_VALUE_SIZE: usize = 32 * 1024 * 1024;

/// The store contract on Redis (one node) or Redis Cluster.
///
/// Every key of a thread lives under the hash tag `{<prefix>:<thread>}`, so all keys of a run
/// (and the thread's index) are in one slot and every write is one atomic Lua script, on a
/// single node and on Cluster alike. See the crate docs for the key layout.
///
/// Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct RedisStore {
    cfg: RedisConfig,
    client: Client,
    scripts: std::sync::Arc<Scripts>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.cfg)
            .field("client", &self.client)
            .finish()
    }
}

/// Physical key prefix of a thread: `{<prefix>:<thread>}:`.
fn kp(cfg: &RedisConfig, thread: &ThreadId) -> String {
    format!("{{{}:{}}}:", cfg.prefix, thread)
}

/// The thread's index (a sorted set of logical keys), beside the data keys in the same slot.
fn index_key(cfg: &RedisConfig, thread: &ThreadId) -> Vec<u8> {
    format!("{{{}:{}}}#index", cfg.prefix, thread).into_bytes()
}

fn phys(kp: &str, key: &str) -> Vec<u8> {
    [kp.as_bytes(), key.as_bytes()].concat()
}

impl RedisStore {
    /// Connect with `config`. Fails with `InvalidConfig` (bad settings, wrong password, a
    /// cluster node given as a single node) or `Unavailable` (no server within the timeouts).
    pub async fn open(config: RedisConfig) -> Result<Self> {
        config.validate()?;
        let client = Client::connect(&config).await?;
        Ok(RedisStore {
            cfg: config,
            client,
            scripts: std::sync::Arc::new(Scripts::new()),
        })
    }

    /// Parse `url` (see [`RedisConfig::from_url`]) and connect ([`RedisStore::open`]).
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::open(RedisConfig::from_url(url)?).await
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &RedisConfig {
        &self.cfg
    }

    /// Bring the thread index (what [`Store::list_threads`] reads) in line with the data: add
    /// every thread that holds keys but is missing from it (data written before the index
    /// existed), remove every member whose thread holds nothing. Walks the whole key space with
    /// `SCAN` (every primary of a Cluster): a maintenance operation, safe while the store is in
    /// use (a claim racing a removal keeps its thread listed, see the crate's thread-index
    /// notes). Returns what it changed.
    pub async fn rebuild_thread_index(&self) -> Result<crate::threads::IndexRebuild> {
        crate::threads::rebuild(&self.client, &self.scripts, &self.cfg).await
    }

    /// The claim script's KEYS and ARGV (see [`crate::scripts::CLAIM_BODY`]).
    fn claim_call(
        &self,
        thread: &ThreadId,
        run: &RunId,
        if_new: bool,
    ) -> ([Vec<u8>; 4], [Vec<u8>; 4]) {
        let kp = kp(&self.cfg, thread);
        let keys = [
            index_key(&self.cfg, thread),
            phys(&kp, &run_key(run)),
            crate::threads::gen_key(&self.cfg, thread.as_str()),
            phys(&kp, &latest_key(run)),
        ];
        let args = [
            kp.into_bytes(),
            run.as_str().as_bytes().to_vec(),
            self.ttl_ms(),
            if if_new { b"1".to_vec() } else { b"0".to_vec() },
        ];
        (keys, args)
    }

    /// The claim script's answer: `None` for a refused `claim_if_new`, else the epoch, after
    /// the stamped add when the claim's thread-index add saw stamp `seen` and may have lost to
    /// a removal.
    async fn claim_answer(
        &self,
        thread: &ThreadId,
        run: &RunId,
        seen: u64,
        answer: Result<Value>,
    ) -> Result<Option<Epoch>> {
        let claimed: Option<(u64, u64)> = match answer {
            Ok(v) => redis::from_redis_value(v).map_err(|e| map_err(e.into(), "claim"))?,
            Err(e) => return Err(fence_not_integer(run, e)),
        };
        let Some((e, g)) = claimed else {
            return Ok(None);
        };
        if must_add_again(seen, g) {
            self.add_again(thread, g).await?;
        }
        Ok(Some(Epoch(e)))
    }

    /// The claim script, after the claim's `ZADD` to the thread index saw stamp `seen` (split
    /// from `claim` so tests can put a removal between the two).
    pub(crate) async fn claim_after_remember(
        &self,
        thread: &ThreadId,
        run: &RunId,
        seen: u64,
    ) -> Result<Epoch> {
        let (keys, args) = self.claim_call(thread, run, false);
        let answer = self
            .client
            .eval::<Value, _>(&self.scripts.claim, &keys, &args, Repeat::Never, "claim")
            .await;
        self.claim_answer(thread, run, seen, answer)
            .await?
            .ok_or_else(|| Error::unexpected("redis: the claim script refused a plain claim"))
    }

    async fn add_again(&self, thread: &ThreadId, g: u64) -> Result<()> {
        let up = crate::threads::Update::Add(g);
        crate::threads::update(&self.client, &self.scripts, &self.cfg, thread.as_str(), up)
            .await
            .map(|_| ())
    }

    #[cfg(test)]
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    #[cfg(test)]
    pub(crate) fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    fn ttl_ms(&self) -> Vec<u8> {
        self.cfg
            .ttl_s
            .map_or(0, |s| s.saturating_mul(1000))
            .to_string()
            .into_bytes()
    }

    /// The commits sent as one pipeline each, by position: everything on a single node; per
    /// thread (one hash slot, hence one node) on Cluster. Order is kept inside a group.
    fn pipeline_groups(&self, commits: &[Commit]) -> Vec<Vec<usize>> {
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, c) in commits.iter().enumerate() {
            let g = if self.client.is_cluster() {
                c.thread.as_str()
            } else {
                ""
            };
            groups.entry(g).or_default().push(i);
        }
        groups.into_values().collect()
    }

    /// Record in `out` what one pipeline of the commits at `sent` answered (`r`): each
    /// commit's answer, resolved by reading back where it is uncertain.
    async fn pipeline_answers(
        &self,
        commits: &[Commit],
        sent: Vec<usize>,
        r: Result<Vec<RedisResult<Value>>>,
        out: &mut [Option<Result<()>>],
    ) {
        match r {
            Ok(answers) if answers.len() == sent.len() => {
                for (i, a) in sent.into_iter().zip(answers) {
                    let c = &commits[i];
                    out[i] = Some(match Self::commit_answer(c, a) {
                        Err(e) if e.is_retryable() => self.resolve(c, e).await,
                        other => other,
                    });
                }
            }
            Ok(answers) => {
                let n = answers.len();
                for i in sent {
                    out[i] = Some(Err(Error::unexpected(format!(
                        "redis: a pipeline of commits answered {n} results"
                    ))));
                }
            }
            Err(e) => {
                // Read back commit by commit while the server answers; once a read-back
                // fails too, the rest are reported as they are (no n-fold wait).
                let mut answering = e.is_retryable();
                for i in sent {
                    let err = e.clone();
                    let r = if answering {
                        self.resolve(&commits[i], err).await
                    } else {
                        Err(err)
                    };
                    if matches!(&r, Err(x) if x.message().contains("unknown outcome")) {
                        answering = false;
                    }
                    out[i] = Some(r);
                }
            }
        }
    }

    /// Check a commit and turn it into the commit script's KEYS and ARGV (the values borrowed
    /// from the commit).
    fn commit_call<'c>(&self, c: &'c Commit) -> Result<ScriptCall<'c>> {
        validate_commit(c)?;
        let run = c.run.as_str();
        let kp = kp(&self.cfg, &c.thread);
        let n = c.puts.len() + usize::from(c.latest.is_some());
        let mut keys = Vec::with_capacity(2 + n);
        keys.push(index_key(&self.cfg, &c.thread));
        keys.push(phys(&kp, &run_key(&c.run)));
        let mut args: Vec<Cow<'c, [u8]>> = Vec::with_capacity(4 + n);
        args.push(Cow::Owned(c.epoch.0.to_string().into_bytes()));
        args.push(Cow::Owned(self.ttl_ms()));
        args.push(Cow::Owned(kp.as_bytes().to_vec()));
        args.push(Cow::Borrowed(run.as_bytes()));
        for (k, v) in &c.puts {
            check_size(k, v.len())?;
            keys.push(phys(&kp, k));
            args.push(Cow::Borrowed(v));
        }
        if let Some(latest) = &c.latest {
            let k = latest_key(&c.run);
            check_size(&k, latest.len())?;
            keys.push(phys(&kp, &k));
            args.push(Cow::Borrowed(latest));
        }
        Ok((keys, args))
    }

    /// Decode the commit script's answer.
    fn commit_answer(c: &Commit, v: RedisResult<Value>) -> Result<()> {
        let what = || format!("commit of run {}", c.run);
        let v = v.map_err(|e| map_err(e, &what()))?;
        let s: Vec<u8> = redis::from_redis_value(v).map_err(|e| map_err(e.into(), &what()))?;
        match s.as_slice() {
            b"ok" => Ok(()),
            other => match other.strip_prefix(b"fenced:") {
                Some(b"never claimed") => Err(Error::fenced(format!(
                    "run {} was never claimed; this commit carries epoch {}",
                    c.run, c.epoch
                ))),
                Some(cur) => Err(Error::fenced(format!(
                    "run {} is claimed at epoch {}, this commit carries epoch {}",
                    c.run,
                    String::from_utf8_lossy(cur),
                    c.epoch
                ))),
                None => Err(Error::unexpected(format!(
                    "redis: commit script answered {:?}",
                    String::from_utf8_lossy(other)
                ))),
            },
        }
    }

    /// After a commit failed with `Unavailable` (the request may or may not have been applied),
    /// read back: if the fence still carries the commit's epoch and every key holds the
    /// commit's bytes, the commit was applied. Otherwise the script did not run (it is atomic),
    /// and the error stands; a commit is idempotent, so the caller may retry it.
    async fn resolve(&self, c: &Commit, err: Error) -> Result<()> {
        if !err.is_retryable() {
            return Err(err);
        }
        let Ok((keys, args)) = self.commit_call(c) else {
            return Err(err);
        };
        let mut cmd = redis::cmd("MGET");
        cmd.arg(&keys[1..]);
        match self
            .client
            .query::<Vec<Option<Vec<u8>>>>(&cmd, "read back a commit")
            .await
        {
            Ok(got) => {
                let fence_ok =
                    got.first().cloned().flatten() == Some(c.epoch.0.to_string().into_bytes());
                let data_ok = got.len() == keys.len() - 1
                    && got[1..]
                        .iter()
                        .zip(&args[4..])
                        .all(|(g, want)| g.as_deref() == Some(want.as_ref()));
                if fence_ok && data_ok {
                    tracing::debug!(run = %c.run, "redis: ambiguous commit found applied");
                    Ok(())
                } else {
                    Err(err)
                }
            }
            Err(_) => Err(Error::unavailable(format!(
                "redis: commit of run {} has an unknown outcome (the server did not answer); \
                 retrying the same commit is safe",
                c.run
            ))
            .with_source(err)),
        }
    }
}

fn check_size(key: &str, len: usize) -> Result<()> {
    if len > MAX_VALUE_SIZE {
        return Err(Error::invalid_input(format!(
            "value of {key:?} is {len} bytes; the redis store takes at most {MAX_VALUE_SIZE}"
        )));
    }
    Ok(())
}

/// Whether a claim whose thread-index add saw stamp `seen` must send the add stamped with the
/// thread's generation `g`: the removal of the emptying to `g` (stamp `2g`) may land after
/// that add (`threads.rs`).
pub(crate) fn must_add_again(seen: u64, g: u64) -> bool {
    g > 0 && seen < 2 * g
}

/// A claim script's error: a fence key that does not hold an integer is a corrupt record.
fn fence_not_integer(run: &RunId, e: Error) -> Error {
    if e.to_string().contains("not an integer") {
        Error::corrupt_record(run_key(run), "the fence key does not hold an integer epoch")
            .with_source(e)
    } else {
        e
    }
}

#[async_trait]
impl Store for RedisStore {
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::new("redis");
        c.max_value_size = Some(MAX_VALUE_SIZE);
        c.ttl = self.cfg.ttl_s.is_some();
        c.batch_commit = true;
        c.durable = false;
        c.multi_process = true;
        c.list_threads = true;
        c
    }

    /// The thread index `{<prefix>}#threads` (see `threads.rs`); sorted by id.
    async fn list_threads(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<afk_core::store::ThreadPage> {
        crate::threads::list_threads(&self.client, &self.cfg, cursor, limit).await
    }

    async fn get(&self, thread: &ThreadId, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(phys(&kp(&self.cfg, thread), key));
        self.client.query(&cmd, "get").await
    }

    async fn get_many(&self, thread: &ThreadId, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let kp = kp(&self.cfg, thread);
        let mut cmd = redis::cmd("MGET");
        for k in keys {
            validate_key(k)?;
            cmd.arg(phys(&kp, k));
        }
        let out: Vec<Option<Vec<u8>>> = self.client.query(&cmd, "get_many").await?;
        if out.len() != keys.len() {
            return Err(Error::unexpected(format!(
                "redis: MGET of {} keys answered {} values",
                keys.len(),
                out.len()
            )));
        }
        Ok(out)
    }

    async fn list(
        &self,
        thread: &ThreadId,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = validate_list(prefix, cursor, limit)?;
        let min = match cursor {
            Some(c) => {
                if c.as_bytes() < prefix.as_bytes() {
                    format!("[{prefix}")
                } else {
                    format!("({c}")
                }
            }
            None if prefix.is_empty() => "-".to_string(),
            None => format!("[{prefix}"),
        };
        // Every key is printable ASCII, so `<prefix>\x7f` bounds all keys starting with prefix.
        let max: Vec<u8> = if prefix.is_empty() {
            b"+".to_vec()
        } else {
            [b"(", prefix.as_bytes(), b"\x7f"].concat()
        };
        let keys = [index_key(&self.cfg, thread)];
        let args = [
            kp(&self.cfg, thread).into_bytes(),
            min.into_bytes(),
            max,
            limit.to_string().into_bytes(),
        ];
        let (more, last, keys): (i64, String, Vec<String>) = self
            .client
            .eval(&self.scripts.list, &keys, &args, Repeat::Safe, "list")
            .await?;
        Ok(ListPage {
            keys,
            next_cursor: (more == 1).then_some(last),
        })
    }

    async fn delete(&self, thread: &ThreadId, keys: &[String]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let kp = kp(&self.cfg, thread);
        let mut ks = vec![index_key(&self.cfg, thread)];
        for k in keys {
            validate_key(k)?;
            ks.push(phys(&kp, k));
        }
        let (_, g): (i64, u64) = self
            .client
            .eval(
                &self.scripts.delete,
                &ks,
                &[kp.into_bytes()],
                Repeat::Safe,
                "delete",
            )
            .await?;
        if g > 0 {
            crate::threads::forget(&self.client, &self.scripts, &self.cfg, thread.as_str(), g)
                .await?;
        }
        Ok(())
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let kp = kp(&self.cfg, thread);
        let keys = [index_key(&self.cfg, thread), phys(&kp, &run_key(run))];
        let args = [kp.into_bytes(), run.as_str().as_bytes().to_vec()];
        let (n, g): (u64, u64) = self
            .client
            .eval(
                &self.scripts.delete_run,
                &keys,
                &args,
                // Its answer is the number of keys deleted: a replay would answer 0.
                Repeat::Never,
                "delete_run",
            )
            .await?;
        if g > 0 {
            crate::threads::forget(&self.client, &self.scripts, &self.cfg, thread.as_str(), g)
                .await?;
        }
        Ok(n)
    }

    async fn finish_run(&self, thread: &ThreadId, run: &RunId, epoch: Epoch) -> Result<()> {
        // Without a TTL nothing expires: no round trip.
        if self.cfg.ttl_s.is_none() {
            return Ok(());
        }
        let kp = kp(&self.cfg, thread);
        let keys = [index_key(&self.cfg, thread), phys(&kp, &run_key(run))];
        let args = [
            epoch.0.to_string().into_bytes(),
            self.ttl_ms(),
            kp.into_bytes(),
            run.as_str().as_bytes().to_vec(),
        ];
        let what = format!("finish of run {run}");
        let answer = self
            .client
            .eval::<Value, _>(&self.scripts.finish, &keys, &args, Repeat::Safe, &what)
            .await?;
        let s: Vec<u8> = redis::from_redis_value(answer).map_err(|e| map_err(e.into(), &what))?;
        match s.as_slice() {
            b"ok" => Ok(()),
            other => Err(Error::fenced(format!(
                "run {run} is claimed at epoch {}; this finish carries epoch {epoch}",
                String::from_utf8_lossy(other.strip_prefix(b"fenced:").unwrap_or(other))
            ))),
        }
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let seen = crate::threads::remember(&self.client, &self.scripts, &self.cfg, thread).await?;
        self.claim_after_remember(thread, run, seen).await
    }

    /// Single node: the thread index's add and the claim script (which looks at the pointer
    /// first) in one pipeline, one round trip. Cluster: the add, then the script (two: they
    /// live in two hash slots). Either way the add is applied before the claim can make the
    /// thread hold a key, as for `claim`.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        let (keys, args) = self.claim_call(thread, run, true);
        let (seen, answer) = if self.client.is_cluster() {
            let seen =
                crate::threads::remember(&self.client, &self.scripts, &self.cfg, thread).await?;
            let answer = self
                .client
                .eval::<Value, _>(&self.scripts.claim, &keys, &args, Repeat::Never, "claim")
                .await;
            (seen, answer)
        } else {
            let (add_keys, add_args) = crate::threads::add_call(&self.cfg, thread);
            let (add, answer) = self
                .client
                .eval_then(
                    (&self.scripts.index_add, &add_keys, &add_args),
                    (&self.scripts.claim, &keys, &args),
                    "claim",
                )
                .await?;
            let seen = add
                .and_then(|v| Ok(redis::from_redis_value::<u64>(v)?))
                .map_err(|e| map_err(e, "add the thread to the thread index"))?;
            (seen, answer.map_err(|e| map_err(e, "claim")))
        };
        self.claim_answer(thread, run, seen, answer).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        let (keys, args) = self.commit_call(commit)?;
        let what = format!("commit of run {}", commit.run);
        match self
            .client
            .eval::<Value, _>(&self.scripts.commit, &keys, &args, Repeat::Never, &what)
            .await
        {
            Ok(v) => Self::commit_answer(commit, Ok(v)),
            Err(e) => self.resolve(commit, e).await,
        }
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        let mut out: Vec<Option<Result<()>>> = (0..commits.len()).map(|_| None).collect();
        let mut futs = Vec::new();
        for idx in self.pipeline_groups(commits) {
            let mut calls = Vec::new();
            let mut sent = Vec::new();
            for i in idx {
                match self.commit_call(&commits[i]) {
                    Ok(call) => {
                        calls.push(call);
                        sent.push(i);
                    }
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
            if calls.is_empty() {
                continue;
            }
            futs.push(async move {
                let r = self
                    .client
                    .eval_many(&self.scripts.commit, &calls, "commit batch")
                    .await;
                (sent, r)
            });
        }
        for (sent, r) in futures::future::join_all(futs).await {
            self.pipeline_answers(commits, sent, r, &mut out).await;
        }
        out.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::unexpected("redis: commit left without an answer")))
            })
            .collect()
    }
}
