//! [`RedisStore`]: the store contract over Redis or Redis Cluster.

use std::borrow::Cow;
use std::collections::BTreeMap;

use afk_core::store::validate_key;
use afk_core::store::{
    AttentionPage, Capabilities, Commit, Epoch, ListPage, Store, latest_key, run_key,
    validate_commit, validate_list,
};
use afk_core::{Error, Result, RunId, ThreadId};
use async_trait::async_trait;
use redis::{RedisResult, Value};

use crate::attention::Follow;
use crate::config::RedisConfig;
use crate::conn::{Client, Repeat, ScriptCall};
use crate::error::map_err;
use crate::scripts::Scripts;
use crate::stamped::{Seen, Set};

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
        unless: Unless,
    ) -> ([Vec<u8>; 5], [Vec<u8>; 4]) {
        let kp = kp(&self.cfg, thread);
        let keys = [
            index_key(&self.cfg, thread),
            phys(&kp, &run_key(run)),
            Set::Threads.gen_key(&self.cfg, thread.as_str()),
            Set::Attention.gen_key(&self.cfg, thread.as_str()),
            phys(&kp, &latest_key(run)),
        ];
        let args = [
            kp.into_bytes(),
            run.as_str().as_bytes().to_vec(),
            self.ttl_ms(),
            match unless {
                Unless::Never => b"0".to_vec(),
                Unless::Stored => b"1".to_vec(),
                Unless::Moved(seen) => format!("e:{seen}").into_bytes(),
            },
        ];
        (keys, args)
    }

    /// The claim script's answer: `None` for a refused `claim_if_new`, else the epoch, after
    /// the stamped adds to the thread and attention indexes whose first add (which saw the
    /// stamps `seen`) may have lost to a removal.
    async fn claim_answer(
        &self,
        thread: &ThreadId,
        run: &RunId,
        seen: Seen,
        answer: Result<Value>,
    ) -> Result<Option<Epoch>> {
        let claimed: Option<(u64, u64, u64)> = match answer {
            Ok(v) => redis::from_redis_value(v).map_err(|e| map_err(e.into(), "claim"))?,
            Err(e) => return Err(fence_not_integer(run, e)),
        };
        let Some((e, g, ga)) = claimed else {
            return Ok(None);
        };
        let threads = self.add_again(Set::Threads, thread, must_add_again(seen.threads, g), g);
        let attention = self.add_again(
            Set::Attention,
            thread,
            must_add_again(seen.attention, ga),
            ga,
        );
        futures::future::try_join(threads, attention).await?;
        Ok(Some(Epoch(e)))
    }

    /// The claim script, after the claim's `ZADD` to the thread index saw stamp `seen` (split
    /// from `claim` so tests can put a removal between the two).
    pub(crate) async fn claim_after_remember(
        &self,
        thread: &ThreadId,
        run: &RunId,
        seen: Seen,
    ) -> Result<Epoch> {
        let (keys, args) = self.claim_call(thread, run, Unless::Never);
        let answer = self
            .client
            .eval::<Value, _>(&self.scripts.claim, &keys, &args, Repeat::Never, "claim")
            .await;
        self.claim_answer(thread, run, seen, answer)
            .await?
            .ok_or_else(|| Error::unexpected("redis: the claim script refused a plain claim"))
    }

    /// The add to `set` stamped with generation `g`, when `needed`.
    async fn add_again(&self, set: Set, thread: &ThreadId, needed: bool, g: u64) -> Result<()> {
        if !needed {
            return Ok(());
        }
        let up = crate::stamped::Update::Add(g);
        crate::stamped::update(
            &self.client,
            &self.scripts,
            &self.cfg,
            set,
            thread.as_str(),
            up,
        )
        .await
        .map(|_| ())
    }

    /// What a commit of `thread` left to do in the attention index.
    async fn follow(&self, thread: &ThreadId, follow: Follow) {
        crate::attention::follow(
            &self.client,
            &self.scripts,
            &self.cfg,
            thread.as_str(),
            follow,
        )
        .await;
    }

    #[cfg(test)]
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    #[cfg(test)]
    pub(crate) fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// The commit script alone, as a committer killed right after it would leave it: what was
    /// left to do in the attention index is returned, not done.
    #[cfg(test)]
    pub(crate) async fn commit_script_only(&self, commit: &Commit) -> Result<Follow> {
        let (keys, args) = self.commit_call(commit)?;
        let answer = self
            .client
            .eval::<Value, _>(&self.scripts.commit, &keys, &args, Repeat::Never, "commit")
            .await?;
        Self::commit_answer(commit, Ok(answer))
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
        out: &mut [Option<Result<Follow>>],
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
        let mut args: Vec<Cow<'c, [u8]>> = Vec::with_capacity(COMMIT_ARGS + n);
        args.push(Cow::Owned(c.epoch.0.to_string().into_bytes()));
        args.push(Cow::Owned(self.ttl_ms()));
        args.push(Cow::Owned(kp.as_bytes().to_vec()));
        args.push(Cow::Borrowed(run.as_bytes()));
        let (op, entry) = crate::attention::op_args(c);
        args.push(Cow::Borrowed(op));
        args.push(Cow::Borrowed(entry));
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

    /// Decode the commit script's answer: what is left to do in the attention index.
    fn commit_answer(c: &Commit, v: RedisResult<Value>) -> Result<Follow> {
        let what = || format!("commit of run {}", c.run);
        let v = v.map_err(|e| map_err(e, &what()))?;
        let s: Vec<u8> = redis::from_redis_value(v).map_err(|e| map_err(e.into(), &what()))?;
        match crate::attention::follow_of(&s) {
            Some(follow) => Ok(follow),
            None => match s.strip_prefix(b"fenced:") {
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
                    String::from_utf8_lossy(&s)
                ))),
            },
        }
    }

    /// After a commit failed with `Unavailable` (the request may or may not have been applied),
    /// read back: if the fence still carries the commit's epoch, every key holds the commit's
    /// bytes and the run's attention entry is where the commit puts it, the commit was applied
    /// (and which way it moved the attention index is unknown: [`Follow::Settle`]). Otherwise
    /// the script did not run (it is atomic), and the error stands; a commit is idempotent, so
    /// the caller may retry it.
    async fn resolve(&self, c: &Commit, err: Error) -> Result<Follow> {
        if !err.is_retryable() {
            return Err(err);
        }
        let Ok((keys, args)) = self.commit_call(c) else {
            return Err(err);
        };
        let mut cmd = redis::cmd("MGET");
        cmd.arg(&keys[1..]);
        let read = async {
            let got: Vec<Option<Vec<u8>>> = self.client.query(&cmd, "read back a commit").await?;
            let attention_ok = self.attention_applied(c, &keys[1]).await?;
            Ok::<_, Error>((got, attention_ok))
        };
        match read.await {
            Ok((got, attention_ok)) => {
                let fence_ok =
                    got.first().cloned().flatten() == Some(c.epoch.0.to_string().into_bytes());
                let data_ok = got.len() == keys.len() - 1
                    && got[1..]
                        .iter()
                        .zip(&args[COMMIT_ARGS..])
                        .all(|(g, want)| g.as_deref() == Some(want.as_ref()));
                if fence_ok && data_ok && attention_ok {
                    tracing::debug!(run = %c.run, "redis: ambiguous commit found applied");
                    Ok(if c.attention.is_some() {
                        Follow::Settle
                    } else {
                        Follow::Nothing
                    })
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

    /// Whether the run's attention entry is where `c` puts it (for a read-back): its entry for
    /// `Open`; none for `Closed`, and with a TTL the fence (physical key `fence`) expiring.
    async fn attention_applied(&self, c: &Commit, fence: &[u8]) -> Result<bool> {
        use afk_core::store::Attention;
        let Some(attention) = &c.attention else {
            return Ok(true);
        };
        let keys = [
            crate::attention::hash_key(&self.cfg, c.thread.as_str()),
            fence.to_vec(),
        ];
        let (entry, pttl): (Option<Vec<u8>>, i64) = self
            .client
            .eval(
                &self.scripts.attention_read_back,
                &keys,
                &[c.run.as_str()],
                Repeat::Safe,
                "read back a commit's attention entry",
            )
            .await?;
        Ok(match attention {
            Attention::Open(want) => entry.as_ref() == Some(want),
            Attention::Closed => entry.is_none() && (self.cfg.ttl_s.is_none() || pttl >= 0),
        })
    }
}

/// The commit script's ARGV before the values: epoch, ttl, kp, run, attention, entry.
const COMMIT_ARGS: usize = 6;

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
        c.attention = true;
        c.claim_if = true;
        c
    }

    /// The attention index `{<prefix>}#attention` and each listed thread's runs (see
    /// `attention.rs`); in `(thread, run)` order.
    async fn list_attention(&self, cursor: Option<&str>, limit: usize) -> Result<AttentionPage> {
        crate::attention::list(&self.client, &self.scripts, &self.cfg, cursor, limit).await
    }

    async fn attention(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Vec<u8>>> {
        crate::attention::entry(&self.client, &self.cfg, thread, run).await
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
            let t = thread.as_str();
            crate::stamped::forget(&self.client, &self.scripts, &self.cfg, Set::Threads, t, g)
                .await?;
        }
        Ok(())
    }

    async fn delete_run(&self, thread: &ThreadId, run: &RunId) -> Result<u64> {
        let kp = kp(&self.cfg, thread);
        let keys = [index_key(&self.cfg, thread), phys(&kp, &run_key(run))];
        let args = [kp.into_bytes(), run.as_str().as_bytes().to_vec()];
        let (n, g, ga): (u64, u64, u64) = self
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
        if ga > 0 {
            self.follow(thread, Follow::Remove(ga)).await;
        }
        if g > 0 {
            let t = thread.as_str();
            crate::stamped::forget(&self.client, &self.scripts, &self.cfg, Set::Threads, t, g)
                .await?;
        }
        Ok(n)
    }

    async fn claim(&self, thread: &ThreadId, run: &RunId) -> Result<Epoch> {
        let seen = crate::stamped::remember(&self.client, &self.scripts, &self.cfg, thread).await?;
        self.claim_after_remember(thread, run, seen).await
    }

    /// The indexes' adds, then the claim script, which claims only while the fence still
    /// holds `seen` (the look and the claim in one script: atomic).
    async fn claim_if(&self, thread: &ThreadId, run: &RunId, seen: Epoch) -> Result<Option<Epoch>> {
        let remembered =
            crate::stamped::remember(&self.client, &self.scripts, &self.cfg, thread).await?;
        let (keys, args) = self.claim_call(thread, run, Unless::Moved(seen));
        let answer = self
            .client
            .eval::<Value, _>(&self.scripts.claim, &keys, &args, Repeat::Never, "claim")
            .await;
        self.claim_answer(thread, run, remembered, answer).await
    }

    /// Single node: the thread index's add and the claim script (which looks at the pointer
    /// first) in one pipeline, one round trip. Cluster: the add, then the script (two: they
    /// live in two hash slots). Either way the add is applied before the claim can make the
    /// thread hold a key, as for `claim`.
    async fn claim_if_new(&self, thread: &ThreadId, run: &RunId) -> Result<Option<Epoch>> {
        let (keys, args) = self.claim_call(thread, run, Unless::Stored);
        let (seen, answer) = if self.client.is_cluster() {
            let seen =
                crate::stamped::remember(&self.client, &self.scripts, &self.cfg, thread).await?;
            let answer = self
                .client
                .eval::<Value, _>(&self.scripts.claim, &keys, &args, Repeat::Never, "claim")
                .await;
            (seen, answer)
        } else {
            let (add_keys, add_args) = crate::stamped::add_call(&self.cfg, thread);
            let (add, answer) = self
                .client
                .eval_then(
                    (&self.scripts.index_add, &add_keys, &add_args),
                    (&self.scripts.claim, &keys, &args),
                    "claim",
                )
                .await?;
            let stamps = add
                .and_then(|v| Ok(redis::from_redis_value::<Vec<u64>>(v)?))
                .map_err(|e| map_err(e, "add the thread to the thread and attention indexes"))?;
            let seen = crate::stamped::seen_of(stamps)?;
            (seen, answer.map_err(|e| map_err(e, "claim")))
        };
        self.claim_answer(thread, run, seen, answer).await
    }

    async fn commit(&self, commit: &Commit) -> Result<()> {
        let (keys, args) = self.commit_call(commit)?;
        let what = format!("commit of run {}", commit.run);
        let follow = match self
            .client
            .eval::<Value, _>(&self.scripts.commit, &keys, &args, Repeat::Never, &what)
            .await
        {
            Ok(v) => Self::commit_answer(commit, Ok(v)),
            Err(e) => self.resolve(commit, e).await,
        }?;
        self.follow(&commit.thread, follow).await;
        Ok(())
    }

    async fn commit_batch(&self, commits: &[Commit]) -> Vec<Result<()>> {
        let mut out: Vec<Option<Result<Follow>>> = (0..commits.len()).map(|_| None).collect();
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
        let follows = commits.iter().zip(&out).filter_map(|(c, r)| match r {
            Some(Ok(f)) if *f != Follow::Nothing => Some(self.follow(&c.thread, *f)),
            _ => None,
        });
        futures::future::join_all(follows).await;
        out.into_iter()
            .map(|r| match r {
                Some(r) => r.map(|_| ()),
                None => Err(Error::unexpected("redis: commit left without an answer")),
            })
            .collect()
    }
}

/// When the claim script claims nothing.
#[derive(Debug, Clone, Copy)]
enum Unless {
    /// Always claims (`claim`).
    Never,
    /// Not when the run has a latest pointer (`claim_if_new`).
    Stored,
    /// Not when the fence holds another epoch than this one (`claim_if`).
    Moved(Epoch),
}
