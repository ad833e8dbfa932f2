//! The store, taken out of this workspace, still passes the suite: its sources are copied to
//! a crate of their own (its own `[workspace]`, no workspace inheritance, no `.cargo/config`
//! of this repository on the way up when `CARGO_TARGET_DIR` is outside it), depending on
//! `afk-core` and `afk-conformance` by path as a third party's crate would, and its
//! conformance tests are run there with `cargo test`.
//!
//! The copy lives at a fixed place under the target directory with a target directory of its
//! own, so dependencies build once and later runs only rebuild the copy. This workspace's lock
//! file is copied too (same versions, no network).

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn the_store_outside_the_workspace_passes_the_suite() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = here.join("../..").canonicalize().expect("repo root");
    // CARGO_TARGET_TMPDIR is <target>/tmp.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("outside-workspace");
    let krate: PathBuf = target.join("custom-store");
    let _ = std::fs::remove_dir_all(krate.join("src"));
    let _ = std::fs::remove_dir_all(krate.join("tests"));
    copy_dir(&here.join("src"), &krate.join("src"));
    std::fs::create_dir_all(krate.join("tests")).expect("tests dir");
    // Only the suite, as the copy's own `tests/conformance.rs` (the layout a third-party
    // store has): not this test, which would run itself again.
    std::fs::copy(
        here.join("tests/it/conformance.rs"),
        krate.join("tests/conformance.rs"),
    )
    .expect("copy the suite");
    let manifest = format!(
        r#"[package]
name = "custom-store"
version = "0.0.0"
edition = "2024"
publish = false

# A workspace of its own: nothing of the AFK repository is inherited.
[workspace]

[dependencies]
afk-core = {{ path = "{core}" }}
async-trait = "0.1.89"

[dev-dependencies]
afk-conformance = {{ path = "{conformance}" }}
tempfile = "3"
tokio = {{ version = "1.47", features = ["rt-multi-thread", "macros", "sync", "time"] }}
"#,
        core = repo.join("afk-core").display(),
        conformance = repo.join("afk-conformance").display(),
    );
    std::fs::write(krate.join("Cargo.toml"), manifest).expect("write the manifest");
    std::fs::copy(repo.join("Cargo.lock"), krate.join("Cargo.lock")).expect("copy the lock file");

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["test", "--offline", "--test", "conformance"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", target.join("target"))
        .output()
        .expect("run cargo test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo test of the copy in {} failed:\n{stdout}\n{stderr}",
        krate.display()
    );
    // The whole suite ran (every regular case, the optional groups and the crash level).
    let passed: usize = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(passed >= 34, "only {passed} tests passed:\n{stdout}");
    assert!(
        stdout.contains("conformance_crash::killed_writer_leaves_whole_commits ... ok"),
        "{stdout}"
    );
    println!("{passed} conformance tests passed outside the workspace");
}
