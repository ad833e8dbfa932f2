//! Scaffolding every crate's tests share (feature `test-kit`): the rule for tests that need a
//! server.
//!
//! It lives here, not in `afk-conformance`, because every crate with tests can reach
//! `afk-core`'s test kit (`afk` and `afk-cli` do not depend on `afk-conformance`, and
//! `afk-core`'s own tests cannot); `afk-conformance` re-exports [`require_env`].

/// The environment variable that turns a test that cannot run (a missing server) from a skip
/// into a failure: `AFK_REQUIRE_INTEGRATION=1`, as `cargo xtask test` sets it.
pub const REQUIRE_INTEGRATION: &str = "AFK_REQUIRE_INTEGRATION";

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
}
