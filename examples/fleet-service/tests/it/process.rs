//! The binary on RocksDB: it serves two requests from stdin and stops on SIGTERM with exit 0;
//! killed with SIGKILL while both runs are inside the tool, and started again with the same
//! `--worker-id`, it finishes both (through the store's index of runs that need attention;
//! `restart.rs` checks the same recovery in process on the memory store).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// Catches a hang; measures nothing.
const NO_HANG: Duration = Duration::from_secs(60);

/// A running `fleet-service` and the lines it printed so far.
struct Service {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Receiver<String>,
    seen: Vec<String>,
}

impl Service {
    fn start(url: &str, tool_delay_ms: u64) -> Service {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-service"))
            .args(["--store", url, "--worker-id", "w1"])
            .args(["--tool-delay-ms", &tool_delay_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, out) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stdin = child.stdin.take();
        Service {
            child,
            stdin,
            out,
            seen: Vec::new(),
        }
    }

    fn request(&mut self, line: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    /// Wait until `n` lines printed so far contain `needle`.
    fn wait_for(&mut self, needle: &str, n: usize) {
        let deadline = Instant::now() + NO_HANG;
        while self.seen.iter().filter(|l| l.contains(needle)).count() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("never {n} line(s) with {needle:?}; saw:\n{:#?}", self.seen),
            }
        }
    }

    /// SIGTERM, then the exit status and every line printed.
    fn terminate(mut self) -> (bool, Vec<String>) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.out.iter());
        (status.success(), self.seen)
    }
}

fn rocks(dir: &Path) -> String {
    format!("rocksdb://{}", dir.join("db").display())
}

fn has_index(url: &str) -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async { afk::open(url).await.unwrap().capabilities().attention })
}

#[test]
fn the_binary_serves_requests_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Service::start(&rocks(dir.path()), 0);
    s.request("user-1 count these four words");
    s.request("user-2 and these three");
    s.wait_for(": completed: Your request has", 2);
    let (ok, lines) = s.terminate();
    assert!(ok, "exit status not 0: {lines:#?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("started run "))
            .count(),
        2
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("completed: Your request has 4 words."))
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("completed: Your request has 3 words."))
    );
    assert_eq!(
        lines.last().unwrap(),
        "stopped; the worker resumed 0 run(s)"
    );
}

#[test]
fn killed_mid_tool_and_restarted_with_its_worker_id_it_finishes_both_runs() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    let mut s = Service::start(&url, 60_000);
    s.request("user-1 count these four words");
    s.request("user-2 and these three");
    s.wait_for("started run ", 2);
    std::thread::sleep(Duration::from_millis(500)); // into the minute-long tool call
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    assert!(
        has_index(&url),
        "the RocksDB store keeps no index of runs that need attention: nothing to recover"
    );
    let mut again = Service::start(&url, 0);
    again.wait_for("worker: resumed 2 run(s)", 1);
    again.wait_for("completed 2", 1);
    let (ok, lines) = again.terminate();
    assert!(ok, "exit status not 0: {lines:#?}");
    assert_eq!(
        lines.last().unwrap(),
        "stopped; the worker resumed 2 run(s)"
    );
}
