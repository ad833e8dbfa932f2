//! Helpers shared by the CLI tests: run the real binary, find the corpus.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The output of one `afk` invocation.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `afk` with `args` in `dir` (no `AFK_STORE`, no `RUST_LOG`).
pub fn afk_in(dir: &Path, args: &[&str]) -> Out {
    afk_env(dir, args, &[])
}

/// [`afk_in`] with environment variables set.
pub fn afk_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_afk"))
        .args(args)
        .current_dir(dir)
        .env_remove("AFK_STORE")
        .env_remove("RUST_LOG")
        .env_remove("AFK_SEAL_KEYS")
        .env_remove("AFK_SEAL_KEY_FILE")
        .env_remove("AFK_SEAL_KMS")
        .env_remove("AFK_SEAL_KEYRING")
        .env_remove("AFK_SEAL_MODE")
        .envs(env.iter().copied())
        .output()
        .expect("run afk");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The repo's copy of the AFK fixtures.
pub fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python")
}

/// A `rocksdb://` URL for a directory.
pub fn rocks(dir: &Path) -> String {
    format!("rocksdb://{}", dir.display())
}

/// The numbers in a line, in order.
pub fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The first line containing `needle` (panics with the whole text otherwise).
pub fn line<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
}
