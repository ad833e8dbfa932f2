//! The tracing subscriber of the binary: the libraries' `tracing` events (store retries,
//! reconnects, settlements, …) on stderr, never on stdout, so `--json` output stays one document.
//!
//! Level: `warn` by default, `-v` info, `-vv` debug, `-vvv` trace. `RUST_LOG` (the usual
//! `tracing-subscriber` directives, e.g. `afk_store_redis=debug`) is honoured: alone it decides;
//! with `-v` its directives are added after the `-v` level, so they win for the targets they name.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter directives for `verbose` (`-v` count) and the value of `RUST_LOG`.
fn directives(verbose: u8, rust_log: Option<&str>) -> String {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => level.to_owned(),
        Some(env) if verbose == 0 => env.to_owned(),
        Some(env) => format!("{level},{env}"),
    }
}

/// Install the subscriber (once, at start). A `RUST_LOG` that does not parse is reported on
/// stderr and the `-v` level used instead.
pub(crate) fn init(verbose: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let wanted = directives(verbose, rust_log.as_deref());
    let filter = EnvFilter::try_new(&wanted).unwrap_or_else(|e| {
        eprintln!("afk: ignoring RUST_LOG ({e})");
        EnvFilter::new(directives(verbose, None))
    });
    // `try_init` fails only when a subscriber is already set: nothing to do then.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::directives;

    #[test]
    fn verbosity_and_rust_log_combine() {
        assert_eq!(directives(0, None), "warn");
        assert_eq!(directives(1, None), "info");
        assert_eq!(directives(2, None), "debug");
        assert_eq!(directives(7, None), "trace");
        assert_eq!(directives(0, Some("afk_core=debug")), "afk_core=debug");
        assert_eq!(directives(0, Some("  ")), "warn");
        assert_eq!(directives(1, Some("afk_core=trace")), "info,afk_core=trace");
    }
}
