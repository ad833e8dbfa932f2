//! Scaffolding every crate's tests share (feature `test-kit`): the rule for tests that need a
//! server, the one seed variable of randomized tests, and the deterministic runner set-up.
//!
//! It lives here, not in `afk-conformance`, because every crate with tests can reach
//! `afk-core`'s test kit (`afk` and `afk-cli` do not depend on `afk-conformance`, and
//! `afk-core`'s own tests cannot); `afk-conformance` re-exports [`require_env`].
//!
//! Store wrappers for tests are in [`store`](crate::store): [`FaultStore`](crate::store::FaultStore)
//! (injected faults) and [`HookStore`](crate::store::HookStore) (hooks before and after each
//! forwarded call).

use std::sync::Arc;

use crate::CheckpointConfig;
use crate::runner::{ManualClock, Runner, RunnerConfig, SequentialIds};
use crate::store::Store;

/// The environment variable that turns a test that cannot run (a missing server) from a skip
/// into a failure: `AFK_REQUIRE_INTEGRATION=1`, as `cargo xtask test` sets it.
pub const REQUIRE_INTEGRATION: &str = "AFK_REQUIRE_INTEGRATION";

/// The environment variable that replays a randomized test: `AFK_SEED=<seed>`. Every seeded
/// test reads it through [`seed_from_env`] and prints the seed it used.
pub const SEED: &str = "AFK_SEED";

/// The time a [`deterministic_config`] clock starts at (milliseconds since the epoch).
pub const START_MS: u64 = 1_700_000_000_000;

/// Whether `AFK_REQUIRE_INTEGRATION=1`: a test that cannot run must fail.
pub fn integration_required() -> bool {
    std::env::var(REQUIRE_INTEGRATION).is_ok_and(|v| v.trim() == "1")
}

/// A test cannot run, for the reason `why` (a missing server, a server without a feature the
/// test needs): panics if `AFK_REQUIRE_INTEGRATION=1` (in CI that is a failure), otherwise
/// prints `skipped: <why>` and the test is to return.
pub fn skip_or_fail(why: &str) {
    assert!(
        !integration_required(),
        "{why}, and {REQUIRE_INTEGRATION}=1 makes that a failure"
    );
    println!("skipped: {why}");
}

/// The value of the environment variable `name` (a server's address) when it is set and not
/// blank.
///
/// When it is missing: panics if `AFK_REQUIRE_INTEGRATION=1` (in CI a missing server is a
/// failure), otherwise prints `skipped: set <name> …` and returns `None`. Every test that
/// needs a server uses this one rule.
pub fn require_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            skip_or_fail(&format!("set {name} to run this test against a server"));
            None
        }
    }
}

/// The seed of a randomized test: `AFK_SEED` when set, else a random one. `Err` when the
/// variable is not a number. The caller prints the seed it uses, so a failure can be
/// replayed with `AFK_SEED=<seed>`.
pub fn seed_from_env() -> Result<u64, String> {
    match std::env::var(SEED) {
        Ok(s) => s.trim().parse().map_err(|e| format!("{SEED}={s:?}: {e}")),
        Err(_) => Ok(rand::random()),
    }
}

/// The seed of a randomized test: `AFK_SEED` when set, else `default()` (a fixed seed for a
/// test that is to be the same every run unless asked). Panics when the variable is not a
/// number. The caller prints the seed it uses.
pub fn seed_or(default: impl FnOnce() -> u64) -> u64 {
    match std::env::var(SEED) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{SEED}={s:?}: {e}")),
        Err(_) => default(),
    }
}

/// The deterministic runner set-up of tests and benchmarks: a [`ManualClock`] standing at
/// [`START_MS`] and [`SequentialIds`]; otherwise [`RunnerConfig::default`]. Chain
/// `with_checkpoint`, or `with_clock` for a clock the test moves itself.
pub fn deterministic_config() -> RunnerConfig {
    RunnerConfig::default()
        .with_clock(ManualClock::new(START_MS))
        .with_ids(Arc::new(SequentialIds::default()))
}

/// A runner over `store` with [`deterministic_config`] and `checkpoint`.
pub fn deterministic_runner(store: Arc<dyn Store>, checkpoint: CheckpointConfig) -> Runner {
    Runner::new(store, deterministic_config().with_checkpoint(checkpoint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_env_returns_a_set_variable() {
        // Cargo sets CARGO_MANIFEST_DIR for every test process.
        assert!(require_env("CARGO_MANIFEST_DIR").is_some_and(|v| v.ends_with("afk-core")));
    }

    #[test]
    fn require_env_skips_or_fails_on_a_missing_variable() {
        let name = "AFK_TEST_THIS_VARIABLE_IS_NEVER_SET";
        let result = std::panic::catch_unwind(|| require_env(name));
        if integration_required() {
            assert!(
                result.is_err(),
                "with {REQUIRE_INTEGRATION}=1 a missing variable must panic"
            );
        } else {
            assert_eq!(result.ok(), Some(None), "a missing variable is a skip");
        }
    }

    #[test]
    fn the_deterministic_config_has_a_manual_clock_and_sequential_ids() {
        let config = deterministic_config();
        assert_eq!(config.clock.now_ms(), START_MS);
        assert_eq!(config.clock.now_ms(), START_MS, "the clock stands still");
        assert_eq!(config.ids.new_id("run"), "run_1");
        assert_eq!(config.ids.new_id("run"), "run_2");
    }
}
