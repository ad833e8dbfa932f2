//! What the thread index costs a claim and a delete: `cargo run -p afk-store-redis --release
//! --example claim_cost -- redis://127.0.0.1:6400 [count]` (a single node: it reads the
//! server's `INFO commandstats`). Prints, side by side in one run, the median time of a claim,
//! of one bare round trip (`PING`) and of the index's own step (`ZADD NX`), and the commands the
//! server counted per claim and per delete that empties a thread. A measurement tool, not a test.

use std::time::{Duration, Instant};

use afk_core::store::Store;
use afk_core::{RunId, ThreadId};
use afk_store_redis::{RedisConfig, RedisStore};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `cmdstat_<name>` calls, summed over every command.
async fn calls(
    c: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), n))
        })
        .collect()
}

fn delta(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
    n: usize,
) -> String {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| format!("{k} {:.2}", d as f64 / n as f64))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() -> afk_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6400".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut cfg = RedisConfig::from_url(&url)?;
    cfg.prefix = format!("claimcost{}", std::process::id());
    let s = RedisStore::open(cfg.clone()).await?;
    let mut raw = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    let t = ThreadId::new("t")?;
    // Warm up (script cache, connections).
    s.claim(&t, &RunId::new("warm")?).await?;

    let mut claims = Vec::with_capacity(n);
    let before = calls(&mut raw).await;
    for i in 0..n {
        let r = RunId::new(format!("r{i}"))?;
        let start = Instant::now();
        s.claim(&t, &r).await?;
        claims.push(start.elapsed());
    }
    let after = calls(&mut raw).await;
    println!(
        "claim:           median {:?}; commands per claim: {}",
        median(claims),
        delta(&before, &after, n)
    );

    let mut pings = Vec::with_capacity(n);
    let mut zadds = Vec::with_capacity(n);
    let key = format!("{{{}}}#threads", cfg.prefix);
    for _ in 0..n {
        let start = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut raw)
            .await
            .expect("ping");
        pings.push(start.elapsed());
        let start = Instant::now();
        let _: i64 = redis::cmd("ZADD")
            .arg(&key)
            .arg("NX")
            .arg(0)
            .arg("t")
            .query_async(&mut raw)
            .await
            .expect("zadd");
        zadds.push(start.elapsed());
    }
    println!(
        "PING:            median {:?} (one round trip)",
        median(pings)
    );
    println!("ZADD NX (index): median {:?}", median(zadds));

    // Deletes: the last run of a thread (the index removal runs) vs one of two runs.
    let mut last = Vec::with_capacity(n);
    let mut not_last = Vec::with_capacity(n);
    let (mut d_last, mut d_other) = (Vec::new(), Vec::new());
    for i in 0..n.min(500) {
        let t = ThreadId::new(format!("d{i}"))?;
        let (a, b) = (RunId::new("a")?, RunId::new("b")?);
        s.claim(&t, &a).await?;
        s.claim(&t, &b).await?;
        let c0 = calls(&mut raw).await;
        let start = Instant::now();
        s.delete_run(&t, &a).await?;
        not_last.push(start.elapsed());
        let c1 = calls(&mut raw).await;
        let start = Instant::now();
        s.delete_run(&t, &b).await?;
        last.push(start.elapsed());
        let c2 = calls(&mut raw).await;
        if i == 0 {
            d_other.push(delta(&c0, &c1, 1));
            d_last.push(delta(&c1, &c2, 1));
        }
    }
    println!(
        "delete_run, other runs left: median {:?}; commands: {}",
        median(not_last),
        d_other.join("")
    );
    println!(
        "delete_run, last run:        median {:?}; commands: {}",
        median(last),
        d_last.join("")
    );
    Ok(())
}
