//! `cargo xtask msrv`: the part of the declared `rust-version` a newer toolchain can check.
//!
//! CI has one toolchain (stable), so it cannot compile with the declared minimum. Two checks
//! stand in for that:
//! - here: no package in the lock (every platform, every feature) declares a `rust-version`
//!   above the workspace's, read from `cargo metadata`;
//! - in clippy (`-D warnings`): `clippy::incompatible_msrv`, denied in the workspace lints,
//!   flags every use of a standard-library item stabilized after the declared version.
//!
//! Neither covers language features or compiler behaviour newer than the declared version:
//! only a build with that toolchain would.

use std::cmp::Ordering;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::system;

/// Fails (with the list) when a locked package needs a newer Rust than the workspace declares.
pub fn run() -> Result<i32> {
    let mut cmd = system::cargo();
    cmd.args([
        "metadata",
        "--format-version",
        "1",
        "--locked",
        "--all-features",
    ])
    .current_dir(system::repo_root());
    let out = system::output(&mut cmd).context("`cargo metadata --locked` failed")?;
    let meta: Value = serde_json::from_str(&out).context("cargo metadata output")?;
    let (declared, too_new) = check(&meta)?;
    if too_new.is_empty() {
        eprintln!(
            "msrv: no locked package declares a rust-version above the workspace's {declared}"
        );
        return Ok(0);
    }
    eprintln!("msrv: these locked packages need a newer rust than the declared {declared}:");
    for line in &too_new {
        eprintln!("  {line}");
    }
    Ok(1)
}

/// The workspace's declared version (all members must agree) and the locked packages above it.
fn check(meta: &Value) -> Result<(String, Vec<String>)> {
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .context("workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let resolved: Vec<&str> = meta["resolve"]["nodes"]
        .as_array()
        .context("resolve.nodes")?
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let packages = meta["packages"].as_array().context("packages")?;
    let version = |p: &Value| p["rust_version"].as_str().map(str::to_owned);
    let mut declared: Option<String> = None;
    for p in packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
    {
        let Some(v) = version(p) else { continue };
        match &declared {
            Some(d) if *d != v => bail!("members declare different rust-versions: {d} and {v}"),
            _ => declared = Some(v),
        }
    }
    let declared = declared.context("no workspace member declares a rust-version")?;
    let mut too_new: Vec<String> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| resolved.contains(&id)))
        .filter_map(|p| {
            let v = version(p)?;
            (compare(&v, &declared) == Ordering::Greater).then(|| {
                format!(
                    "{} {} needs rust {v}",
                    p["name"].as_str().unwrap_or("?"),
                    p["version"].as_str().unwrap_or("?")
                )
            })
        })
        .collect();
    too_new.sort();
    Ok((declared, too_new))
}

/// Compares `1.89` with `1.88.0` numerically; a missing part counts as 0.
fn compare(a: &str, b: &str) -> Ordering {
    let parts = |s: &str| -> Vec<u64> { s.split('.').map(|x| x.parse().unwrap_or(0)).collect() };
    let (a, b) = (parts(a), parts(b));
    (0..a.len().max(b.len()))
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(deps: &[(&str, Option<&str>)]) -> Value {
        let mut packages = vec![serde_json::json!({
            "id": "ws", "name": "afk-core", "version": "0.1.0", "rust_version": "1.89"
        })];
        let mut nodes = vec![serde_json::json!({"id": "ws"})];
        for (i, (name, rv)) in deps.iter().enumerate() {
            let id = format!("dep{i}");
            packages.push(serde_json::json!({
                "id": id, "name": name, "version": "1.0.0", "rust_version": rv
            }));
            nodes.push(serde_json::json!({ "id": id }));
        }
        serde_json::json!({
            "workspace_members": ["ws"], "packages": packages, "resolve": {"nodes": nodes}
        })
    }

    #[test]
    fn a_dependency_above_the_declared_version_is_reported() {
        let (declared, too_new) = check(&meta(&[
            ("old", Some("1.60")),
            ("same", Some("1.89.0")),
            ("none", None),
            ("new", Some("1.90")),
        ]))
        .unwrap();
        assert_eq!(declared, "1.89");
        assert_eq!(too_new, ["new 1.0.0 needs rust 1.90"]);
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare("1.89", "1.88.0"), Ordering::Greater);
        assert_eq!(compare("1.89", "1.89.0"), Ordering::Equal);
        assert_eq!(compare("1.100", "1.99"), Ordering::Greater);
    }
}
