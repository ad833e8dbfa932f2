//! What the process and the Redis server report about themselves: CPU time (`/proc/self/stat`),
//! resident memory (`VmRSS` of `/proc/self/status`), and Redis's `INFO memory`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// User plus system CPU time of this process so far, in microseconds: `utime` + `stime` of
/// `/proc/self/stat`, the counters `getrusage(RUSAGE_SELF)` reads, in clock ticks of 10 ms
/// (`getrusage` itself needs `unsafe`, which the workspace forbids). 0 where `/proc` is missing.
pub fn cpu_us() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // The fields after the command name (which may hold spaces), from field 3 on.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks * 10_000
}

/// `VmRSS` of this process, in bytes (0 where `/proc` is missing).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Runs in flight, the most at once, and the RSS and in-flight count at the RSS peak.
#[derive(Debug, Default)]
pub struct Gauge {
    /// Runs started and not finished.
    pub in_flight: AtomicUsize,
    /// Most runs in flight at once.
    pub peak_in_flight: AtomicUsize,
    /// Highest `VmRSS` sampled.
    pub peak_rss: AtomicU64,
    /// The most scheduling lag of the sampler (how late a 10 ms tick woke), microseconds.
    pub lags_us: std::sync::Mutex<Vec<u64>>,
}

impl Gauge {
    /// A run started.
    pub fn start(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::Relaxed);
    }

    /// A run finished.
    pub fn end(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Sample `VmRSS` and the runtime's lag every 10 ms until the task is aborted.
    pub fn sample(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let tick = Duration::from_millis(10);
            loop {
                let t = std::time::Instant::now();
                tokio::time::sleep(tick).await;
                let late = t.elapsed().saturating_sub(tick).as_micros() as u64;
                if let Ok(mut l) = self.lags_us.lock() {
                    l.push(late);
                }
                self.peak_rss.fetch_max(rss_bytes(), Ordering::Relaxed);
            }
        })
    }
}

/// `used_memory` and the number of keys of the Redis server at `url` (`INFO memory`,
/// `DBSIZE`), or `None` if it cannot say.
pub async fn redis_memory(url: &str) -> Option<(u64, u64)> {
    let client = redis::Client::open(url).ok()?;
    let mut con = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut con)
        .await
        .ok()?;
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())?;
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut con).await.ok()?;
    Some((used, keys))
}

/// The `q`-quantile of sorted `v` (0 when empty).
pub fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}
