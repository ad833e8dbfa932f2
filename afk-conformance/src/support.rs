//! Helpers shared by the cases: unique ids, short error context, listing every page.

use afk_core::{
    ErrorKind, RunId, ThreadId,
    store::{Commit, Epoch, Store},
};

/// What every case returns: `Err` carries a message that says what the store did wrong.
pub type CaseResult = Result<(), String>;

/// A failure message naming the check's own file and line: `<message> [at <file>:<line>]`.
macro_rules! fail {
    ($($fmt:tt)+) => {
        $crate::support::at(::std::format!($($fmt)+), ::std::file!(), ::std::line!())
    };
}
pub(crate) use fail;

/// `return Err(fail!(…))` unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::support::fail!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// `msg` with the place of the check that failed appended, in the one notation of the suite.
pub(crate) fn at(msg: String, file: &str, line: u32) -> String {
    format!("{msg} [at {file}:{line}]")
}

/// `msg` with the place of `loc` appended (for `#[track_caller]` helpers).
pub(crate) fn at_loc(msg: String, loc: &std::panic::Location<'_>) -> String {
    at(msg, loc.file(), loc.line())
}

/// Attach "what was being done" to a store error, turning it into the case's `String` error
/// that names the caller's file and line.
pub(crate) trait Ctx<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String>;
}

impl<T> Ctx<T> for afk_core::Result<T> {
    #[track_caller]
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String> {
        let loc = std::panic::Location::caller();
        self.map_err(|e| at_loc(format!("{what}: unexpected error {}", show_err(&e)), loc))
    }
}

/// Longest key or value text printed in a message; longer ones are cut short.
pub(crate) const SHOW_MAX: usize = 64;

/// A key (or any text) for messages: quoted, cut to 64 characters with the full
/// length noted.
pub fn show_key(key: &str) -> String {
    if key.chars().count() <= SHOW_MAX {
        format!("{key:?}")
    } else {
        let head: String = key.chars().take(SHOW_MAX).collect();
        format!("{head:?}…({} chars)", key.chars().count())
    }
}

/// A value for messages: its text (lossy UTF-8) quoted and cut to 64 bytes, with the
/// full length noted.
pub fn show_bytes(v: &[u8]) -> String {
    if v.len() <= SHOW_MAX {
        format!("{:?}", String::from_utf8_lossy(v))
    } else {
        format!(
            "{:?}…({} bytes)",
            String::from_utf8_lossy(&v[..SHOW_MAX]),
            v.len()
        )
    }
}

/// An error for messages: `Err(<kind>: <message>)`.
pub(crate) fn show_err(e: &afk_core::Error) -> String {
    format!("Err({}: {})", e.kind(), e.message())
}

/// A store answer for messages, in the suite's one notation: `Ok(<value>)` or
/// `Err(<kind>: <message>)`.
pub(crate) fn show_result<T>(r: &afk_core::Result<T>, value: impl Fn(&T) -> String) -> String {
    match r {
        Ok(v) => format!("Ok({})", value(v)),
        Err(e) => show_err(e),
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
pub(crate) fn named_run(id: &str) -> RunId {
    RunId::new(id).unwrap_or_else(|e| panic!("bad run id literal {id:?}: {e}"))
}

/// A commit of `puts` (and an optional latest pointer) under `epoch`.
pub(crate) fn commit(
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
        attention: None,
    }
}

/// A commit of one record (and the pointer on it) carrying `attention`.
pub(crate) fn commit_with(
    thread: &ThreadId,
    run: &RunId,
    epoch: Epoch,
    step: u64,
    attention: Option<afk_core::store::Attention>,
) -> Commit {
    let record = format!("{{\"step\":{step}}}").into_bytes();
    Commit {
        thread: thread.clone(),
        run: run.clone(),
        epoch,
        puts: vec![(
            format!("checkpoint:{run}:{step}:step_started"),
            record.clone(),
        )],
        latest: Some(record),
        attention,
    }
}

/// `Ok` when `result` is an error of `kind`; otherwise a message naming `what` and the
/// caller's file and line.
#[track_caller]
pub(crate) fn expect_kind<T: std::fmt::Debug>(
    result: afk_core::Result<T>,
    kind: ErrorKind,
    what: &str,
) -> CaseResult {
    let loc = std::panic::Location::caller();
    match result {
        Err(e) if e.kind() == kind => Ok(()),
        Err(e) => Err(at_loc(
            format!("{what}: expected Err({kind}), got {}", show_err(&e)),
            loc,
        )),
        Ok(v) => Err(at_loc(
            format!("{what}: expected Err({kind}), got Ok({v:?})"),
            loc,
        )),
    }
}

/// Short printable form of a read value, for messages (values can be megabytes): `None` or
/// `Some(<value>)` as [`show_bytes`] prints it.
pub(crate) fn show(value: &Option<Vec<u8>>) -> String {
    match value {
        None => "None".into(),
        Some(v) => format!("Some({})", show_bytes(v)),
    }
}

/// Read `key` and require it to equal `want`; a failure names the caller's file and line.
#[track_caller]
pub(crate) fn expect_value<'a>(
    store: &'a dyn Store,
    thread: &'a ThreadId,
    key: &'a str,
    want: Option<&'a [u8]>,
) -> impl std::future::Future<Output = CaseResult> + Send + 'a {
    let loc = std::panic::Location::caller();
    async move {
        let got = store
            .get(thread, key)
            .await
            .map_err(|e| at_loc(format!("get {}: {}", show_key(key), show_err(&e)), loc))?;
        let want = want.map(<[u8]>::to_vec);
        if got != want {
            return Err(at_loc(
                format!(
                    "get {}: expected {}, got {}",
                    show_key(key),
                    show(&want),
                    show(&got)
                ),
                loc,
            ));
        }
        Ok(())
    }
}

/// List every key of `thread` under `prefix`, following cursors with pages of `limit`, and
/// check each page: at most the (clamped) limit, keys under the prefix, strictly increasing
/// across pages, cursors that move forward. A failure names the caller's file and line too.
#[track_caller]
pub fn list_all<'a>(
    store: &'a dyn Store,
    thread: &'a ThreadId,
    prefix: &'a str,
    limit: usize,
) -> impl std::future::Future<Output = Result<Vec<String>, String>> + Send + 'a {
    let loc = std::panic::Location::caller();
    async move {
        list_all_here(store, thread, prefix, limit)
            .await
            .map_err(|e| format!("{e} [called from {}:{}]", loc.file(), loc.line()))
    }
}

async fn list_all_here(
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
    Err(fail!("list prefix {prefix:?}: more than a million pages"))
}

tokio::task_local! {
    /// The seed `store_suite!` fixed for the case running in this task (printed on failure).
    pub(crate) static SEED: u64;
}

/// The seed of a randomized case: the one `store_suite!` fixed for this case, else
/// `AFK_SEED` when set, else random. `Err` when the variable is not a number.
pub(crate) fn seed_from_env() -> Result<u64, String> {
    if let Ok(seed) = SEED.try_with(|s| *s) {
        return Ok(seed);
    }
    afk_core::testkit::seed_from_env()
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

/// The cases skipped in this process, with why (see [`skip`]).
static SKIPPED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Record that `case` was skipped for `reason` (a missing capability or server) and say so on
/// stderr directly, so the line shows even where the test harness captures output.
pub(crate) fn skip(case: &str, reason: &str) {
    use std::io::Write;
    let line = format!("skipped: {case}: {reason}\n");
    print!("{line}");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((case.to_owned(), reason.to_owned()));
}

/// Every case skipped in this process so far: `(case, reason)`.
pub fn skipped() -> Vec<(String, String)> {
    SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}
