//! The bench report:
//! `cargo run -p afk --release --features rocksdb,redis,s3 --example bench_report`.
//!
//! Reads the results of the last `cargo bench -p afk --features rocksdb,redis,s3` (criterion's
//! `<target>/criterion/**/new/estimates.json`), measures bytes written per step (not a timing,
//! so done here), and writes `<target>/bench-report.md`: a table per group with ours and the
//! baseline of the same run, units, the machine and the date. `cargo xtask bench` runs both.
//!
//! Arguments: `[--out PATH] [--criterion-dir DIR]`; by default both are in the target
//! directory this example was built into.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a report tool: failures should stop it

#[path = "../../benches/support/mod.rs"]
mod support;

mod bytes;
mod calls;
mod results;
#[cfg(feature = "s3")]
mod s3;
mod tables;

use std::path::PathBuf;

/// The cargo target directory: `CARGO_TARGET_DIR`, else the one holding this executable
/// (`<target>/<profile>/examples/bench_report`).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "- date: {}\n- machine: {} ({cpus} CPUs available to the process; `nproc` = {}), {}\n\
         - rustc: {}\n- profile: release (criterion via `cargo bench`), store servers from \
         `AFK_TEST_*`\n",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        model,
        command_line("nproc", &[]),
        command_line("uname", &["-sr"]),
        command_line("rustc", &["-V"]),
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let target = target_dir();
    let mut out = target.join("bench-report.md");
    let mut criterion_dir = target.join("criterion");
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--out", Some(p)) => out = PathBuf::from(p),
            ("--criterion-dir", Some(p)) => criterion_dir = PathBuf::from(p),
            _ => {
                eprintln!("usage: bench_report [--out PATH] [--criterion-dir DIR]");
                std::process::exit(2);
            }
        }
    }
    let rt = support::runtime();
    let rows = rt.block_on(bytes::rows());
    let calls = rt.block_on(calls::rows());
    #[cfg(feature = "s3")]
    let long_s3 = rt.block_on(s3::measure());
    let found = results::load(&criterion_dir);
    let mut report = String::from("# AFK for Rust: bench report\n\n");
    report.push_str(&machine());
    report.push_str(&format!(
        "- criterion results: `{}` ({} benchmarks)\n\n",
        criterion_dir.display(),
        found.len()
    ));
    report.push_str(&tables::commit(&found));
    report.push_str(&tables::steps(&found));
    report.push_str(&calls::section(&calls));
    report.push_str(&bytes::section(&rows));
    report.push('\n');
    #[cfg(feature = "s3")]
    report.push_str(&s3::section(&long_s3));
    report.push_str(&tables::resume(&found));
    report.push_str(&tables::stale(&found));
    if let Some(parent) = out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    std::fs::write(&out, &report).expect("write the report");
    println!("{report}");
    eprintln!("wrote {}", out.display());
}
