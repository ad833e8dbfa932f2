//! The feature combinations of the published crates that users build, each checked on its own
//! (`cargo check`: type checking is what a feature mistake breaks; the full builds run in
//! `test`). A `cfg` that is wrong only without a feature (an unused import, a missing stub)
//! shows here and nowhere else, since clippy and the tests build with `--all-features`.
//! The README's examples (`examples/embedding`, `examples/fleet-service`) are checked the same
//! way: alone, each gets only what a user gets (no `test-kit`, which the workspace's
//! dev-dependencies enable).

use std::time::Instant;

use anyhow::Result;

use crate::system;

/// `(what, cargo arguments after "check")`.
pub const COMBINATIONS: [(&str, &[&str]); 15] = [
    (
        "afk without a store",
        &["-p", "afk", "--no-default-features"],
    ),
    ("afk with rocksdb only (default)", &["-p", "afk"]),
    (
        "afk with redis only",
        &["-p", "afk", "--no-default-features", "--features", "redis"],
    ),
    (
        "afk with s3 only",
        &["-p", "afk", "--no-default-features", "--features", "s3"],
    ),
    ("afk with every store", &["-p", "afk", "--all-features"]),
    // Each model provider alone, through the facade without a store and in its own crate.
    (
        "afk with openai only",
        &["-p", "afk", "--no-default-features", "--features", "openai"],
    ),
    (
        "afk with anthropic only",
        &[
            "-p",
            "afk",
            "--no-default-features",
            "--features",
            "anthropic",
        ],
    ),
    ("afk-providers without a provider", &["-p", "afk-providers"]),
    (
        "afk-providers with both providers",
        &["-p", "afk-providers", "--features", "openai,anthropic"],
    ),
    // The KMS key source alone: elsewhere it is built with every other feature, whose
    // dependencies could hide one it forgot to ask for.
    (
        "afk-seal with kms",
        &["-p", "afk-seal", "--features", "kms"],
    ),
    ("afk-cli (default)", &["-p", "afk-cli"]),
    (
        "afk-cli with every store",
        &["-p", "afk-cli", "--all-features"],
    ),
    // The README's embedding example, alone: in the workspace's test build, dev-dependencies
    // turn on afk-core's `test-kit`, which users do not get.
    ("the README's embedding example", &["-p", "embedding"]),
    // The README's quick start (a provider and a function tool), alone for the same reason.
    ("the README's quick start", &["-p", "newcomer"]),
    // The README's fleet example, alone for the same reason.
    ("the README's fleet example", &["-p", "fleet-service"]),
];

/// Checks every combination, stopping at the first that fails. Returns the exit code (0 when
/// all build). Prints how long each took.
pub fn run() -> Result<i32> {
    for (what, args) in COMBINATIONS {
        let start = Instant::now();
        let mut cmd = system::cargo();
        cmd.arg("check").args(args);
        let status = system::run_status(&mut cmd)?;
        eprintln!(
            "features: {what}: {} in {:.1} s",
            if status.success() { "ok" } else { "FAILED" },
            start.elapsed().as_secs_f64()
        );
        if !status.success() {
            return Ok(crate::test::code(status));
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::COMBINATIONS;

    /// Each store and provider feature of the facade is checked alone, and none is checked
    /// twice.
    #[test]
    fn every_store_is_checked_alone_once() {
        for store in ["redis", "s3", "openai", "anthropic"] {
            let alone = COMBINATIONS
                .iter()
                .filter(|(_, args)| {
                    args.contains(&"afk")
                        && args.contains(&"--no-default-features")
                        && args.last() == Some(&store)
                })
                .count();
            assert_eq!(alone, 1, "{store}");
        }
        let mut seen: Vec<&[&str]> = COMBINATIONS.iter().map(|(_, a)| *a).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), COMBINATIONS.len());
    }
}
