//! The crash level: a writer process killed with `SIGKILL` at random moments leaves only whole
//! commits behind.
//!
//! Only for durable stores ([`Capabilities::durable`](afk_core::store::Capabilities::durable)) that
//! can be reopened at the same location: the factory takes a directory (a store over a server
//! may use its name as a namespace) and opens the store there, also after a crash. Stores
//! without a process boundary (in-memory) report `durable: false`, and the level is skipped
//! with a `skipped:` line saying so.
//!
//! Each round (`kills`, default [`DEFAULT_KILLS`], `AFK_CONFORMANCE_CRASH_KILLS`):
//! 1. the test binary re-executes itself, running just this test, as a child process; the
//!    child opens the store and runs `writers` tasks, each claiming its own run and committing
//!    in a loop (three records of 2 KiB and the latest pointer per commit), appending a line to
//!    an acknowledgement file after each commit returns `Ok`;
//! 2. once the child has acknowledged a commit, the parent waits a random 0 to `max_delay`
//!    and kills it with `SIGKILL`;
//! 3. the parent reopens the store and checks every run: each commit is all there or not at
//!    all (no commit partly visible), with the bytes written; every acknowledged commit is
//!    there; the latest pointer names a commit that is there, and the newest one (no records
//!    landed without their pointer move).
//!
//! Seeded (the kill delays): the seed is printed; `AFK_SEED` replays it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use afk_core::{
    RunId, ThreadId,
    store::{Epoch, Store},
};
use rand::{Rng, SeedableRng};

use crate::IntoSuiteStore;
use crate::support::{
    CaseResult, Ctx, commit, fail, list_all, named_run, seed_from_env, show_bytes, skip,
    unique_suffix,
};

/// Set in the child process: the directory of the store it writes to.
pub const CHILD_ENV: &str = "AFK_CONFORMANCE_CRASH_CHILD";
/// Set in the child process: which round (life) it is.
const LIFE_ENV: &str = "AFK_CONFORMANCE_CRASH_LIFE";
/// Set in the child process: how many writer tasks to run.
const WRITERS_ENV: &str = "AFK_CONFORMANCE_CRASH_WRITERS";
/// Set in the child process: the parent's pid (the child stops when its parent is gone).
const PARENT_ENV: &str = "AFK_CONFORMANCE_CRASH_PARENT";
/// Overrides [`DEFAULT_KILLS`].
pub const KILLS_ENV: &str = "AFK_CONFORMANCE_CRASH_KILLS";
/// Kills per run of the level.
pub const DEFAULT_KILLS: u32 = 20;

/// The name of the case, as `skipped:` lines and failures print it.
pub const CASE: &str = "crash::killed_writer_leaves_whole_commits";

const VALUE_LEN: usize = 2048;
const PARTS: usize = 3;
const LIFE_STRIDE: u64 = 1_000_000;

/// How a run of the crash level goes.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// How many times a writer is killed (one child process each).
    pub kills: u32,
    /// Writer tasks in the child, each on its own run.
    pub writers: usize,
    /// Longest wait between the child's first acknowledged commit and the kill.
    pub max_delay: Duration,
    /// Seed of the kill delays.
    pub seed: u64,
    /// The libtest name of the test calling the level (the child runs just that test);
    /// `None`: the name of the current thread, which libtest names after the test.
    pub test_name: Option<String>,
}

impl CrashConfig {
    /// [`DEFAULT_KILLS`] kills (or `AFK_CONFORMANCE_CRASH_KILLS`), 4 writers, kills within
    /// 15 ms, the seed from `AFK_SEED` (random when unset). `Err` for a variable
    /// that is not a number.
    pub fn from_env() -> Result<Self, String> {
        let kills = match std::env::var(KILLS_ENV) {
            Ok(v) => v
                .trim()
                .parse()
                .map_err(|e| format!("{KILLS_ENV}={v:?}: {e}"))?,
            Err(_) => DEFAULT_KILLS,
        };
        Ok(CrashConfig {
            kills,
            writers: 4,
            max_delay: Duration::from_millis(15),
            seed: seed_from_env()?,
            test_name: None,
        })
    }
}

/// Whether this process is a crash-level child (then the level never returns: it writes
/// until it is killed).
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Run the crash level with the store `open` opens at a directory. In the child process
/// (see [`is_child`]) this writes until killed and never returns.
pub async fn killed_writer_leaves_whole_commits<F, Fut, S>(
    open: F,
    config: CrashConfig,
) -> CaseResult
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = S>,
    S: IntoSuiteStore,
{
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        let dir = PathBuf::from(dir);
        let err = child(&open, &dir).await;
        eprintln!("crash-level child: {err}");
        std::process::exit(2);
    }
    let name = match config.test_name.clone() {
        Some(n) => n,
        None => std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .map(str::to_owned)
            .ok_or_else(|| {
                fail!("cannot tell the test's name: set CrashConfig::test_name for the child")
            })?,
    };
    let dir = std::env::temp_dir().join(format!("afk-crash-{}", unique_suffix()));
    std::fs::create_dir_all(&dir).map_err(|e| fail!("create {}: {e}", dir.display()))?;
    let Some(store) = open(dir.clone()).await.into_suite_store() else {
        skip(CASE, "the reopen factory returned None");
        return Ok(());
    };
    let caps = store.capabilities();
    drop(store);
    if !caps.durable {
        let _ = std::fs::remove_dir_all(&dir);
        skip(
            CASE,
            &format!(
                "the {} store reports durable = false (no process boundary to crash across)",
                caps.name
            ),
        );
        return Ok(());
    }
    let seed = config.seed;
    println!(
        "{CASE}: seed {seed}, {} kills, {} writers (replay with AFK_SEED={seed})",
        config.kills, config.writers
    );
    let result = parent(&open, &dir, &name, &config).await;
    match result {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        }
        Err(e) => Err(format!(
            "{e}\n(seed {seed}; the store is kept in {})",
            dir.display()
        )),
    }
}

async fn parent<F, Fut, S>(open: &F, dir: &Path, name: &str, config: &CrashConfig) -> CaseResult
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = S>,
    S: IntoSuiteStore,
{
    let exe = std::env::current_exe().map_err(|e| fail!("current_exe: {e}"))?;
    let acks = dir.join("acks");
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
    for life in 1..=u64::from(config.kills) {
        let before = read_acks(&acks)?.len();
        let log_path = dir.join(format!("child-{life}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| fail!("create log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| fail!("log: {e}"))?;
        let child = Command::new(&exe)
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .env(LIFE_ENV, life.to_string())
            .env(WRITERS_ENV, config.writers.to_string())
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| fail!("start the child {}: {e}", exe.display()))?;
        let mut child = KillOnDrop(child);
        let started = Instant::now();
        loop {
            if read_acks(&acks)?.len() > before {
                break;
            }
            if let Ok(Some(status)) = child.0.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(fail!(
                    "kill {life}: the child exited on its own ({status}) before committing; \
                     its output:\n{}",
                    tail(&log)
                ));
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(fail!("kill {life}: the child committed nothing in 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let max = u64::try_from(config.max_delay.as_micros()).unwrap_or(u64::MAX);
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..=max))).await;
        child.kill();
        let Some(store) = open(dir.to_path_buf()).await.into_suite_store() else {
            return Err(fail!("kill {life}: the reopen factory returned None"));
        };
        let acked = read_acks(&acks)?;
        check(store.as_ref(), dir, config.writers, life, &acked)
            .await
            .map_err(|e| format!("after kill {life} of {}: {e}", config.kills))?;
    }
    Ok(())
}

/// Kills (SIGKILL) and reaps the child when dropped.
struct KillOnDrop(Child);

impl KillOnDrop {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The thread all writers use, from the directory's name (the same in parent and child).
fn thread_of(dir: &Path) -> ThreadId {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("dir");
    let suffix = name.trim_start_matches("afk-crash-");
    ThreadId::new(format!("conf-crash-{suffix}"))
        .unwrap_or_else(|e| panic!("bad crash directory name {name:?}: {e}"))
}

fn run_of(writer: usize) -> RunId {
    named_run(&format!("crash_w{writer}"))
}

fn keys(run: &RunId, step: u64) -> [String; PARTS] {
    [
        format!("checkpoint:{run}:{step}:runtime_state"),
        format!("messages:{run}:{step:020}"),
        format!("effect:{run}:{step}:call_{step}"),
    ]
}

fn value(writer: usize, step: u64, part: usize) -> Vec<u8> {
    let mut v = format!("writer {writer} step {step} part {part} ").into_bytes();
    let fill = b'a' + u8::try_from((step + part as u64) % 26).unwrap_or(0);
    v.resize(VALUE_LEN, fill);
    v
}

/// The step a key of `run` is for, and which part it is; `None` for other keys.
fn parse(run: &RunId, key: &str) -> Option<(u64, usize)> {
    let pick = |prefix: String, suffix: &str| -> Option<u64> {
        key.strip_prefix(&prefix)?
            .strip_suffix(suffix)?
            .parse()
            .ok()
    };
    if let Some(step) = pick(format!("checkpoint:{run}:"), ":runtime_state") {
        return Some((step, 0));
    }
    if let Some(step) = pick(format!("messages:{run}:"), "") {
        return Some((step, 1));
    }
    let rest = key.strip_prefix(&format!("effect:{run}:"))?;
    let (step, call) = rest.split_once(':')?;
    let step: u64 = step.parse().ok()?;
    (call == format!("call_{step}")).then_some((step, 2))
}

fn describe(step: u64) -> String {
    format!(
        "commit {} of life {}",
        step % LIFE_STRIDE,
        step / LIFE_STRIDE
    )
}

/// `(writer, step)` of every acknowledged commit.
fn read_acks(path: &Path) -> Result<Vec<(usize, u64)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(fail!("read {}: {e}", path.display())),
    };
    // Only whole lines: the child may be killed halfway through writing one.
    Ok(text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let (w, s) = l.trim().split_once(' ')?;
            Some((w.parse().ok()?, s.parse().ok()?))
        })
        .collect())
}

/// Check the reopened store: whole commits only, every acknowledged one there, the pointer on
/// the newest. The bytes are compared for the commits of this `life` (older ones were
/// compared after their own kill), so a round costs the same however many came before.
async fn check(
    store: &dyn Store,
    dir: &Path,
    writers: usize,
    life: u64,
    acked: &[(usize, u64)],
) -> CaseResult {
    let t = thread_of(dir);
    for w in 0..writers {
        let c = RunCheck {
            store,
            t: &t,
            w,
            run: run_of(w),
        };
        let (present, all) = c.records(life).await?;
        c.whole_commits(&present)?;
        c.bytes_written(&all).await?;
        c.acknowledged_there(&present, acked)?;
        c.pointer_on_newest(&present).await?;
    }
    Ok(())
}

/// The checks of one writer's run `run` in the reopened store.
struct RunCheck<'a> {
    store: &'a dyn Store,
    t: &'a ThreadId,
    /// The writer.
    w: usize,
    run: RunId,
}

/// The parts of each commit found, by step.
type Present = BTreeMap<u64, BTreeSet<usize>>;

impl RunCheck<'_> {
    /// The run's records: the parts of every commit found, and the key, step and part of each
    /// record written in `life`.
    async fn records(&self, life: u64) -> Result<(Present, Vec<(String, u64, usize)>), String> {
        let (store, t, run) = (self.store, self.t, &self.run);
        let mut present: Present = BTreeMap::new();
        let mut all = Vec::new();
        for family in ["checkpoint", "messages", "effect"] {
            let prefix = format!("{family}:{run}:");
            for key in list_all(store, t, &prefix, 1000).await? {
                if let Some((step, part)) = parse(run, &key) {
                    present.entry(step).or_default().insert(part);
                    if step / LIFE_STRIDE == life {
                        all.push((key, step, part));
                    }
                }
            }
        }
        Ok((present, all))
    }

    /// No commit is partly visible.
    fn whole_commits(&self, present: &Present) -> CaseResult {
        let run = &self.run;
        for (step, parts) in present {
            if parts.len() != PARTS {
                let have: Vec<String> =
                    parts.iter().map(|p| keys(run, *step)[*p].clone()).collect();
                return Err(fail!(
                    "run {run}: {} is partly visible: it has {have:?} of its {PARTS} records",
                    describe(*step)
                ));
            }
        }
        Ok(())
    }

    /// Every record of `all` reads the bytes written.
    async fn bytes_written(&self, all: &[(String, u64, usize)]) -> CaseResult {
        let run = &self.run;
        for chunk in all.chunks(200) {
            let ks: Vec<String> = chunk.iter().map(|(k, _, _)| k.clone()).collect();
            let got = self.store.get_many(self.t, &ks).await.ctx("get_many")?;
            for ((key, step, part), value_got) in chunk.iter().zip(got) {
                let want = value(self.w, *step, *part);
                if value_got.as_deref() != Some(want.as_slice()) {
                    return Err(fail!(
                        "run {run}: {key} ({}) reads {}, not the {} bytes written",
                        describe(*step),
                        value_got.as_deref().map_or("None".into(), show_bytes),
                        want.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every commit of this writer in `acked` (writer, step) is there.
    fn acknowledged_there(&self, present: &Present, acked: &[(usize, u64)]) -> CaseResult {
        let run = &self.run;
        for (_, step) in acked.iter().filter(|(aw, _)| *aw == self.w) {
            if !present.contains_key(step) {
                return Err(fail!(
                    "run {run}: {} was acknowledged (commit returned Ok) but is gone",
                    describe(*step)
                ));
            }
        }
        Ok(())
    }

    /// The latest pointer names a commit that is there, and the newest one.
    async fn pointer_on_newest(&self, present: &Present) -> CaseResult {
        let run = &self.run;
        let latest = afk_core::store::latest_key(run);
        let pointer = self.store.get(self.t, &latest).await.ctx("get latest")?;
        let newest = present.keys().next_back().copied();
        match (pointer, newest) {
            (None, None) => {}
            (None, Some(n)) => {
                return Err(fail!(
                    "run {run}: {} is there but the run has no latest pointer",
                    describe(n)
                ));
            }
            (Some(p), newest) => {
                let key = String::from_utf8_lossy(&p).into_owned();
                let named = parse(run, &key).filter(|(_, part)| *part == 0);
                let Some((step, _)) = named else {
                    return Err(fail!("run {run}: the pointer reads {}", show_bytes(&p)));
                };
                if !present.contains_key(&step) {
                    return Err(fail!(
                        "run {run}: the pointer names {key} ({}), which is not there",
                        describe(step)
                    ));
                }
                if newest != Some(step) {
                    return Err(fail!(
                        "run {run}: {} is there, but the pointer still names the older {}: \
                         records landed without their pointer move",
                        describe(newest.unwrap_or(step)),
                        describe(step)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The child: open the store, run the writers until killed (or the parent is gone).
async fn child<F, Fut, S>(open: &F, dir: &Path) -> String
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = S>,
    S: IntoSuiteStore,
{
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let (Some(life), Some(writers), Some(parent)) =
        (env(LIFE_ENV), env(WRITERS_ENV), env(PARENT_ENV))
    else {
        return format!("{LIFE_ENV}, {WRITERS_ENV} and {PARENT_ENV} must be set");
    };
    let Some(store) = open(dir.to_path_buf()).await.into_suite_store() else {
        return "the reopen factory returned None".into();
    };
    let acks = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("acks"))
    {
        Ok(f) => Arc::new(Mutex::new(f)),
        Err(e) => return format!("open the acknowledgement file: {e}"),
    };
    let t = thread_of(dir);
    let mut tasks = Vec::new();
    for w in 0..usize::try_from(writers).unwrap_or(1) {
        tasks.push(tokio::spawn(write(
            store.clone(),
            t.clone(),
            w,
            life,
            acks.clone(),
        )));
    }
    // Stop when the parent is gone or after two minutes: never outlive the test.
    let started = Instant::now();
    loop {
        if let Some(done) = tasks.iter().position(tokio::task::JoinHandle::is_finished) {
            let task = tasks.swap_remove(done);
            return match task.await {
                Ok(Err(e)) => e,
                Ok(Ok(())) => "a writer stopped".into(),
                Err(e) => format!("a writer panicked: {e}"),
            };
        }
        if u64::from(std::os::unix::process::parent_id()) != parent
            || started.elapsed() > Duration::from_secs(120)
        {
            return "the parent is gone".into();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn write(
    store: Arc<dyn Store>,
    t: ThreadId,
    w: usize,
    life: u64,
    acks: Arc<Mutex<std::fs::File>>,
) -> Result<(), String> {
    let run = run_of(w);
    let epoch: Epoch = store.claim(&t, &run).await.ctx("claim")?;
    for j in 1..LIFE_STRIDE {
        let step = life * LIFE_STRIDE + j;
        let ks = keys(&run, step);
        let puts = ks
            .iter()
            .enumerate()
            .map(|(p, k)| (k.clone(), value(w, step, p)))
            .collect();
        let c = commit(&t, &run, epoch, puts, Some(ks[0].clone().into_bytes()));
        store.commit(&c).await.ctx(format!("commit {step}"))?;
        let line = format!("{w} {step}\n");
        let mut f = acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.write_all(line.as_bytes())
            .map_err(|e| format!("append to the acknowledgement file: {e}"))?;
    }
    Ok(())
}
