//! Measure commit round trips: `cargo run -p afk-store-redis --release --example commit_latency
//! -- redis://127.0.0.1:6400 [count]`. Prints median and p99 of single commits and the per-commit
//! cost inside a 64-commit `commit_batch`. A measurement tool, not a test.

use std::time::{Duration, Instant};

use afk_core::store::{Commit, Store};
use afk_core::{RunId, ThreadId};
use afk_store_redis::{RedisConfig, RedisStore};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

#[tokio::main]
async fn main() -> afk_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6400".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut cfg = RedisConfig::from_url(&url)?;
    cfg.prefix = format!("bench{}", std::process::id());
    let s = RedisStore::open(cfg).await?;
    let t = ThreadId::new("bench_thread")?;
    let r = RunId::new("run_bench")?;
    let e = s.claim(&t, &r).await?;
    let value = vec![7u8; 16 * 1024];
    let mk = |i: usize| Commit {
        thread: t.clone(),
        run: r.clone(),
        epoch: e,
        puts: vec![(format!("checkpoint:run_bench:{i}:post_tool"), value.clone())],
        latest: Some(format!("checkpoint:run_bench:{i}:post_tool").into_bytes()),
        attention: None,
    };
    let mut single = Vec::with_capacity(n);
    for i in 0..n {
        let c = mk(i);
        let start = Instant::now();
        s.commit(&c).await?;
        single.push(start.elapsed());
    }
    let batches = (n / 64).max(1);
    let mut per_commit = Vec::with_capacity(batches);
    for b in 0..batches {
        let cs: Vec<Commit> = (0..64).map(|i| mk(n + b * 64 + i)).collect();
        let start = Instant::now();
        for res in s.commit_batch(&cs).await {
            res?;
        }
        per_commit.push(start.elapsed() / 64);
    }
    println!(
        "{} ({} commits of one 16 KiB record + pointer): single median {:?} p99 {:?}; in batches of 64: median {:?} per commit",
        s.config().redacted_url(),
        n,
        pct(&mut single, 0.5),
        pct(&mut single, 0.99),
        pct(&mut per_commit, 0.5)
    );
    s.delete_run(&t, &r).await?;
    Ok(())
}
