//! `afk sweep --older-than AGE`: delete the runs that finished more than AGE ago, the
//! retention sweep a worker runs (`afk::runner::sweep_finished`), once, by hand.
//!
//! Only stores that keep an index of finished runs can be swept (RocksDB, S3); on Redis the
//! per-run time to live expires finished runs, and the command says so (exit 1). Runs that
//! have not finished (in progress, paused, suspended, uncertain) are never deleted, nor a
//! child run without its parent.
//!
//! JSON: `{"older_than_ms", "before_ms", "deleted", "keys", "kept", "forgotten"}`.

use std::process::ExitCode;
use std::time::Duration;

use afk_core::Error;
use afk_core::store::store_now_ms;
use serde_json::json;

use super::output::{Ctx, Report, wl};

/// `afk sweep`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Delete runs that finished more than this long ago: a number and a unit, `s`, `m`, `h`
    /// or `d` (`90m`, `30d`).
    #[arg(long, value_parser = parse_age)]
    older_than: Duration,
}

/// `<n><unit>` with unit `s`, `m`, `h` or `d`.
fn parse_age(s: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("{s:?} is not an age like 90s, 15m, 12h or 30d");
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    };
    secs.map(Duration::from_secs).ok_or_else(bad)
}

/// Prints `deleted N run(s) (K keys) that finished before <time>; kept M listed run(s)`.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    ctx.run("sweep", |store| async move {
        let age = u64::try_from(args.older_than.as_millis()).unwrap_or(u64::MAX);
        let before = store_now_ms().saturating_sub(age);
        let swept = afk_core::runner::sweep_finished(store.as_ref(), before)
            .await
            .map_err(explain)?;
        let mut o = String::new();
        wl!(
            o,
            "deleted {} run(s) ({} keys) that finished more than {} ago; kept {} listed run(s) \
             (not finished, opened again, unreadable, or child runs that go with their parent)",
            swept.deleted,
            swept.keys,
            humanize(args.older_than),
            swept.kept
        );
        let doc = json!({"older_than_ms": age, "before_ms": before, "deleted": swept.deleted,
            "keys": swept.keys, "kept": swept.kept, "forgotten": swept.forgotten});
        Ok(Report::ok(doc, o))
    })
}

/// The store's `Unsupported`, with what to do instead.
fn explain(e: Error) -> Error {
    if e.kind() != afk_core::ErrorKind::Unsupported {
        return e;
    }
    Error::unsupported(format!(
        "{}; a Redis store expires finished runs by its ttl_s parameter instead",
        e.message()
    ))
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_their_unit_and_bad_ones_are_refused() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
        for bad in ["", "d", "30", "3w", "-1d", "1.5h", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        assert_eq!(humanize(Duration::from_secs(2_592_000)), "30d");
        assert_eq!(humanize(Duration::from_secs(90)), "90s");
    }
}
