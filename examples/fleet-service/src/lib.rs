//! A service that never calls `resume`: it starts a run for each request and leaves every
//! unfinished run (a crash, a restart, a deploy, a model outage) to a [`Worker`] that shares
//! its store. See [`serve()`] (the part the root README quotes) and `src/main.rs`.
//!
//! Requests are lines (`<thread> <text>`) on stdin, so that the example needs no HTTP server;
//! a real service would start runs from its handlers the same way. The agent's model and tool
//! are the example's own, rule-based and deterministic, so it runs without a provider key.
//!
//! [`Worker`]: afk::runner::Worker

mod agent;
mod serve;

use std::time::Duration;

use afk::runner::{Outcome, RunEvent, RunHandle, WorkerHandle, WorkerStats};
use afk::{ErrorKind, RunId, ThreadId};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;

pub use agent::{Model, WordCount, agent};
pub use serve::serve;

/// The command line: `--store URL`, `--worker-id ID`, `--tool-delay-ms N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The store, as a URL (default `rocksdb://./.afk-fleet`).
    pub store: String,
    /// This process's owner id: given, or the host name.
    pub worker_id: String,
    /// How long the tool takes (a slow external call; default 0).
    pub tool_delay: Duration,
}

impl Options {
    /// Parse `args` (without the program name); the worker id defaults to the host name.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            store: "rocksdb://./.afk-fleet".to_owned(),
            worker_id: String::new(),
            tool_delay: Duration::ZERO,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--store" => o.store = value,
                "--worker-id" => o.worker_id = value,
                "--tool-delay-ms" => {
                    let ms = value.parse().map_err(|e| format!("--tool-delay-ms: {e}"))?;
                    o.tool_delay = Duration::from_millis(ms);
                }
                _ => {
                    return Err(format!(
                        "unknown option {flag} (--store, --worker-id, --tool-delay-ms)"
                    ));
                }
            }
        }
        if o.worker_id.is_empty() {
            o.worker_id = hostname().ok_or("no host name: pass --worker-id")?;
        }
        Ok(o)
    }
}

/// The host name (Linux: the kernel's; else `HOSTNAME`).
fn hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// A request line `<thread> <text>`: its thread and text.
pub fn parse_request(line: &str) -> Result<(ThreadId, String), String> {
    let (thread, text) = line
        .trim()
        .split_once(char::is_whitespace)
        .ok_or("expected `<thread> <text>`")?;
    let thread = ThreadId::new(thread).map_err(|e| e.to_string())?;
    Ok((thread, text.trim().to_owned()))
}

/// The runs this process started, each watched by a task that prints its outcome; none is
/// awaited by whoever started it.
#[derive(Debug)]
pub struct Runs {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Default for Runs {
    fn default() -> Self {
        Runs {
            stop: watch::channel(false).0,
            tasks: JoinSet::new(),
        }
    }
}

impl Runs {
    /// Watch `handle`: print its outcome when it ends; interrupt it on [`Runs::interrupt`].
    pub fn watch(&mut self, mut handle: RunHandle) {
        let events = handle.events();
        let mut stop = self.stop.subscribe();
        while self.tasks.try_join_next().is_some() {} // forget the runs that ended
        self.tasks.spawn(async move {
            let (thread, run) = (handle.thread_id().clone(), handle.run_id().clone());
            if let Some(events) = events {
                tokio::select! {
                    () = until_stopped(events) => {}
                    _ = stop.wait_for(|s| *s) => handle.interrupt(),
                }
            }
            print_outcome(&thread, &run, handle.result().await);
        });
    }

    /// Interrupt every run still going (it stops at its next safe point, writes nothing
    /// terminal and lets go of its lease) and wait for them, at most `deadline`.
    pub async fn interrupt(mut self, deadline: Duration) {
        let _ = self.stop.send(true);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(deadline, all).await;
    }
}

/// Until the run stops: its event stream reports an ending or closes with the run's task.
async fn until_stopped(mut events: broadcast::Receiver<RunEvent>) {
    loop {
        match events.recv().await {
            Ok(
                RunEvent::Finished { .. }
                | RunEvent::Failed { .. }
                | RunEvent::Paused { .. }
                | RunEvent::Suspended { .. },
            )
            | Err(broadcast::error::RecvError::Closed) => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
        }
    }
}

fn print_outcome(thread: &ThreadId, run: &RunId, outcome: afk::Result<Outcome>) {
    match outcome {
        Ok(Outcome::Completed(r)) => println!(
            "run {run} in thread {thread}: {}: {}",
            r.state, r.final_text
        ),
        Ok(Outcome::Paused { .. }) => println!("run {run} in thread {thread}: paused for a human"),
        Ok(Outcome::Suspended { not_before_ms, .. }) => {
            println!(
                "run {run} in thread {thread}: suspended; a worker resumes it from {not_before_ms} ms"
            )
        }
        Ok(other) => println!("run {run} in thread {thread}: {other:?}"),
        // Interrupted (a shutdown), or a store outage: the run is unfinished, not lost.
        Err(e) if matches!(e.kind(), ErrorKind::Cancelled) || e.is_retryable() => {
            println!("run {run} in thread {thread}: stopped ({e}); a worker finishes it")
        }
        Err(e) => println!("run {run} in thread {thread}: failed: {e}"),
    }
}

/// Print the worker's counters when they changed since `seen`.
pub fn print_worker(worker: &WorkerHandle, seen: &mut WorkerStats) {
    let now = worker.stats();
    if now != *seen {
        println!(
            "worker: resumed {} run(s) ({} taken over), completed {}, stopped {}, failed {}",
            now.resumed, now.taken_over, now.completed, now.stopped, now.failed
        );
        *seen = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_and_requests_parse() {
        let o = Options::parse(args(&["--worker-id", "w1", "--tool-delay-ms", "250"])).unwrap();
        assert_eq!(o.worker_id, "w1");
        assert_eq!(o.tool_delay, Duration::from_millis(250));
        assert_eq!(o.store, "rocksdb://./.afk-fleet");
        match Options::parse(Vec::new()) {
            Ok(o) => assert!(!o.worker_id.is_empty()),
            Err(e) => assert!(e.contains("--worker-id"), "{e}"), // a host without a name
        }
        assert!(Options::parse(args(&["--port", "80"])).is_err());
        let (t, text) = parse_request("user-42  count these words ").unwrap();
        assert_eq!(
            (t.as_str(), text.as_str()),
            ("user-42", "count these words")
        );
        assert!(parse_request("lonely").is_err());
    }
}
