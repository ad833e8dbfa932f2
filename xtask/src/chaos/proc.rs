//! One `chaos_agent` process: started, watched line by line, killed with SIGKILL.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// A running (or finished) agent process. Dropping it kills it if it still runs.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    lines: Receiver<String>,
    /// Every stdout line seen so far.
    pub out: Vec<String>,
    status: Option<ExitStatus>,
    pid_file: PathBuf,
    stderr: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout piped to us and stderr to `stderr`; its pid goes to
    /// `pid_file` (so the reaper stops it if xtask dies).
    pub fn spawn(mut cmd: Command, pid_file: PathBuf, stderr: PathBuf) -> Result<Proc> {
        let err = File::create(&stderr)?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .context("cannot start chaos_agent")?;
        fs::write(&pid_file, child.id().to_string())?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            child,
            lines,
            out: Vec::new(),
            status: None,
            pid_file,
            stderr,
        })
    }

    /// Waits until the process printed `ready` (its store is open). False if it ended (or
    /// `limit` passed) first.
    pub fn wait_ready(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let ready = line == "ready";
                    self.out.push(line);
                    if ready {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Waits up to `limit` for a line starting with `prefix`; true if it came (the process
    /// still runs, or just printed it), false if the process ended or `limit` passed first.
    pub fn wait_line(&mut self, prefix: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.starts_with(prefix);
                    self.out.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Waits up to `limit` for the process to end; its status if it did. Collects its output.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        while self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                break;
            }
            if Instant::now() >= end {
                return None;
            }
            thread::sleep(Duration::from_millis(1));
        }
        self.drain();
        self.status
    }

    /// Takes the lines printed so far into [`Proc::out`], without waiting.
    pub fn poll_lines(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.out.push(line);
        }
    }

    fn drain(&mut self) {
        let end = Instant::now() + Duration::from_secs(2);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.out.push(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// SIGKILL, then reap it.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        let _ = fs::remove_file(&self.pid_file);
    }

    /// `(word, steps)` of its `outcome <word> steps=<n>` line.
    pub fn outcome(&self) -> Option<(String, u64)> {
        self.out.iter().rev().find_map(|l| {
            let mut words = l.strip_prefix("outcome ")?.split(' ');
            let word = words.next()?.to_owned();
            let steps = words
                .next()
                .and_then(|s| s.strip_prefix("steps="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            Some((word, steps))
        })
    }

    /// The number on a `<prefix> <n>` line, if printed.
    pub fn number(&self, prefix: &str) -> Option<u64> {
        self.out
            .iter()
            .find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
    }

    /// Whether it died of a panic (exit code 101) or a signal we did not send.
    pub fn crashed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .is_some_and(|s| s.code() == Some(101) || s.signal().is_some())
    }

    /// The last lines of its stderr, indented, for a failure message.
    pub fn stderr_tail(&self) -> String {
        let text = fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(6)..]
            .iter()
            .map(|l| format!("\n    {l}"))
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
