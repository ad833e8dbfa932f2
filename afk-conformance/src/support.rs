//! Helpers shared by the cases: unique ids, short error context, listing every page.

use afk_core::{Commit, Epoch, ErrorKind, RunId, Store, ThreadId};

/// What every case returns: `Err` carries a message that says what the store did wrong.
pub type CaseResult = Result<(), String>;

/// `return Err(format!(…))` unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// Attach "what was being done" to a store error, turning it into the case's `String` error.
pub(crate) trait Ctx<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String>;
}

impl<T> Ctx<T> for afk_core::Result<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error {e}"))
    }
}

/// A fresh random suffix, so that cases can run concurrently against one shared server.
pub fn unique_suffix() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A thread id no other case (or other run of the suite) uses: `conf-<tag>-<random>`.
pub fn unique_thread(tag: &str) -> ThreadId {
    let id = format!("conf-{tag}-{}", unique_suffix());
    ThreadId::new(id.clone()).unwrap_or_else(|e| panic!("bad tag {tag:?} for thread id {id}: {e}"))
}

/// A run id `run_<random>`.
pub fn unique_run() -> RunId {
    named_run(&format!("run_{}", unique_suffix()))
}

/// A run id from a literal the suite controls.
pub fn named_run(id: &str) -> RunId {
    RunId::new(id).unwrap_or_else(|e| panic!("bad run id literal {id:?}: {e}"))
}

/// A commit of `puts` (and an optional latest pointer) under `epoch`.
pub fn commit(
    thread: &ThreadId,
    run: &RunId,
    epoch: Epoch,
    puts: Vec<(String, Vec<u8>)>,
    latest: Option<Vec<u8>>,
) -> Commit {
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts,
        latest,
    }
}

/// `Ok` when `result` is an error of `kind`; otherwise a message naming `what`.
pub fn expect_kind<T: std::fmt::Debug>(
    result: afk_core::Result<T>,
    kind: ErrorKind,
    what: &str,
) -> CaseResult {
    match result {
        Err(e) if e.kind() == kind => Ok(()),
        Err(e) => Err(format!("{what}: expected a {kind} error, got {e}")),
        Ok(v) => Err(format!("{what}: expected a {kind} error, got Ok({v:?})")),
    }
}

/// Short printable form of a value, for messages (values can be megabytes).
pub fn show(value: &Option<Vec<u8>>) -> String {
    match value {
        None => "None".into(),
        Some(v) if v.len() <= 48 => format!("Some({:?})", String::from_utf8_lossy(v)),
        Some(v) => format!("Some(<{} bytes>)", v.len()),
    }
}

/// Read `key` and require it to equal `want`.
pub async fn expect_value(
    store: &dyn Store,
    thread: &ThreadId,
    key: &str,
    want: Option<&[u8]>,
) -> CaseResult {
    let got = store.get(thread, key).await.ctx(format!("get {key}"))?;
    let want = want.map(<[u8]>::to_vec);
    ensure!(
        got == want,
        "get {key}: expected {}, got {}",
        show(&want),
        show(&got)
    );
    Ok(())
}

/// List every key of `thread` under `prefix`, following cursors with pages of `limit`, and
/// check each page: at most the (clamped) limit, keys under the prefix, strictly increasing
/// across pages, cursors that move forward.
pub async fn list_all(
    store: &dyn Store,
    thread: &ThreadId,
    prefix: &str,
    limit: usize,
) -> Result<Vec<String>, String> {
    let max = limit.clamp(1, afk_core::store::MAX_LIST_LIMIT);
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1_000_000 {
        let page = store
            .list(thread, prefix, cursor.as_deref(), limit)
            .await
            .ctx(format!(
                "list prefix {prefix:?} cursor {cursor:?} limit {limit}"
            ))?;
        ensure!(
            page.keys.len() <= max,
            "list prefix {prefix:?} limit {limit}: page of {} keys, more than {max}",
            page.keys.len()
        );
        for key in &page.keys {
            ensure!(
                key.starts_with(prefix),
                "list prefix {prefix:?} returned {key:?}"
            );
            if let Some(prev) = keys.last() {
                ensure!(
                    prev.as_bytes() < key.as_bytes(),
                    "list prefix {prefix:?}: {key:?} came after {prev:?} (not sorted, or repeated)"
                );
            }
            keys.push(key.clone());
        }
        match page.next_cursor {
            None => return Ok(keys),
            Some(next) => {
                ensure!(
                    cursor.as_deref() != Some(next.as_str()),
                    "list prefix {prefix:?}: cursor {next:?} did not move"
                );
                cursor = Some(next);
            }
        }
    }
    Err(format!("list prefix {prefix:?}: more than a million pages"))
}

/// The seed of a randomized case: `AFK_CONFORMANCE_SEED` when set, else random. `Err` when the
/// variable is not a number.
pub(crate) fn seed_from_env() -> Result<u64, String> {
    match std::env::var("AFK_CONFORMANCE_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("AFK_CONFORMANCE_SEED={s:?}: {e}")),
        Err(_) => Ok(rand::random()),
    }
}

/// How many random cases to run: `PROPTEST_CASES` when set to a number, else `default`.
pub(crate) fn cases_from_env(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A proptest runner whose generator is seeded with `seed` (no failure persistence), running
/// `cases` cases and at most `max_shrink_iters` shrinking steps (proptest's default if `None`).
pub(crate) fn test_runner(
    seed: u64,
    cases: u32,
    max_shrink_iters: Option<u32>,
) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut seed_bytes = [0u8; 32];
    for (i, chunk) in seed_bytes.chunks_mut(8).enumerate() {
        let word = seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    let mut config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    if let Some(n) = max_shrink_iters {
        config.max_shrink_iters = n;
    }
    TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    )
}
