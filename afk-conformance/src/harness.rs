//! How `store_suite!` runs a case: a fresh runtime and store, the seed fixed up front, the
//! timing-sensitive cases alone and repeated, and a failure message a store author can act
//! on (the check's file and line, the seed, a command that reruns just that case).

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use afk_core::store::Store;

use crate::cases::crash::{self, CrashConfig};
use crate::support::{SEED, seed_from_env, skip};
use crate::{CaseFuture, timing_sensitive};

/// Where a generated test lives, for the rerun command.
#[derive(Debug, Clone, Copy)]
pub struct TestId {
    /// `CARGO_PKG_NAME` of the crate calling `store_suite!`.
    pub package: &'static str,
    /// `CARGO_CRATE_NAME` of the test target.
    pub krate: &'static str,
    /// `module_path!()` of the generated test.
    pub module: &'static str,
    /// The case's group.
    pub group: &'static str,
    /// The case's name.
    pub case: &'static str,
}

impl TestId {
    /// `group::case`.
    fn case_path(&self) -> String {
        format!("{}::{}", self.group, self.case)
    }

    /// The test's name as libtest knows it (the module path without the crate, then the fn).
    fn test_path(&self) -> String {
        let module = self.module.split_once("::").map_or("", |(_, rest)| rest);
        if module.is_empty() {
            self.case.to_owned()
        } else {
            format!("{module}::{}", self.case)
        }
    }

    /// A shell command that reruns just this test with `seed`.
    fn rerun(&self, seed: u64) -> String {
        let target = if self.krate == self.package.replace('-', "_") {
            "--lib".to_owned()
        } else {
            format!("--test {}", self.krate)
        };
        format!(
            "AFK_SEED={seed} cargo test -p {} {target} -- --exact {}",
            self.package,
            self.test_path()
        )
    }
}

/// Timing-sensitive cases take it for writing, the others for reading: the former run alone.
static ALONE: RwLock<()> = RwLock::new(());

/// `AFK_CONFORMANCE_REPEAT` (at least 1).
fn repeat() -> u32 {
    std::env::var("AFK_CONFORMANCE_REPEAT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
}

fn seed_or_panic(id: &TestId) -> u64 {
    seed_from_env().unwrap_or_else(|e| panic!("{}: {e}", id.case_path()))
}

/// Runs one case on a fresh multi-thread runtime, with a fresh store from `factory` for each
/// repetition; panics with the case's message on failure.
pub fn run_case<F, Fut>(id: TestId, factory: F, case: fn(Arc<dyn Store>) -> CaseFuture<'static>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Arc<dyn Store>>>,
{
    let timing = timing_sensitive(id.group, id.case);
    let _turn = if timing {
        Err(ALONE
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    } else {
        Ok(ALONE
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    };
    let times = if timing { repeat() } else { 1 };
    let seed = seed_or_panic(&id);
    runtime().block_on(SEED.scope(seed, async {
        for i in 1..=times {
            let Some(store) = factory().await else {
                skip(&id.case_path(), "the store factory returned None");
                return;
            };
            let backend = store.capabilities().name;
            if let Err(msg) = case(store).await {
                let rep = if times > 1 {
                    format!(", repetition {i} of {times}")
                } else {
                    String::new()
                };
                panic!(
                    "conformance case {} failed against the {backend} store (seed {seed}{rep}):\n  \
                     {msg}\nrerun just this case:\n  {}",
                    id.case_path(),
                    id.rerun(seed)
                );
            }
        }
    }));
}

/// Runs the crash level with a reopen factory.
pub fn run_crash<F, Fut>(id: TestId, reopen: F)
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = Option<Arc<dyn Store>>>,
{
    let seed = seed_or_panic(&id);
    let _turn = ALONE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let times = if crash::is_child() { 1 } else { repeat() };
    runtime().block_on(SEED.scope(seed, async {
        for i in 1..=times {
            let config = CrashConfig {
                test_name: Some(id.test_path()),
                ..CrashConfig::from_env().unwrap_or_else(|e| panic!("{e}"))
            };
            if let Err(msg) = crash::killed_writer_leaves_whole_commits(&reopen, config).await {
                panic!(
                    "conformance case {} failed (seed {seed}, repetition {i} of {times}):\n  \
                     {msg}\nrerun just this case:\n  {}",
                    id.case_path(),
                    id.rerun(seed)
                );
            }
        }
    }));
}

/// The crash level for a suite without a reopen factory: a visible skip for a store that is
/// not durable, a failure for one that says it is.
pub fn run_crash_without_reopen<F, Fut>(id: TestId, factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Arc<dyn Store>>>,
{
    runtime().block_on(async {
        let Some(store) = factory().await else {
            skip(&id.case_path(), "the store factory returned None");
            return;
        };
        let caps = store.capabilities();
        if caps.durable {
            panic!(
                "the {} store reports durable = true, so the crash level must run: give \
                 store_suite! a way to open the store at a directory, `store_suite!(store(), \
                 reopen = open_at)`, or leave the level out knowingly with `skip_crash`",
                caps.name
            );
        }
        skip(
            &id.case_path(),
            &format!(
                "the {} store reports durable = false (no process boundary to crash across)",
                caps.name
            ),
        );
    });
}
