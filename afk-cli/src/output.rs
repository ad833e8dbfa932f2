//! How commands answer: one JSON document with `--json`, aligned tables otherwise, errors that
//! name the store, the key and what to do, and progress on a terminal only.
//!
//! Every command builds a [`Report`] (its JSON document and its human text) or fails with an
//! [`Error`]; [`Ctx::run`] prints whichever the operator asked for. With `--json` an error is
//! the document `{"error": {"command", "store", "kind", "message", "key", "retryable",
//! "hint"}}` on stdout (and the human text on stderr); the exit code is 1 either way.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use afk_core::{Error, ErrorKind, Result, store::Store};
use serde_json::{Value, json};

/// What every command gets: the store URL and how to print.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The store URL (may hold secrets: print only [`Ctx::store_name`]).
    pub url: String,
    /// `--json`: one JSON document on stdout.
    pub json: bool,
}

/// A command's answer.
#[derive(Debug)]
pub struct Report {
    /// The `--json` document.
    pub json: Value,
    /// The human text (tables and lines).
    pub human: String,
    /// 0, or 1 for a command that ran but found something wrong (`verify` problems).
    pub failed: bool,
}

impl Report {
    /// A successful answer.
    pub fn ok(json: Value, human: String) -> Self {
        Report {
            json,
            human,
            failed: false,
        }
    }
}

impl Ctx {
    /// The store URL with its secrets redacted.
    pub fn store_name(&self) -> String {
        afk::redact::redact_urls(&self.url)
    }

    /// Whether to show progress: stdout is a terminal and the output is for humans.
    pub fn progress(&self) -> Progress {
        Progress::on_terminal(self.json)
    }

    /// Open the store (an existing one: see [`afk::open_existing`]), run `body` on a fresh
    /// runtime and print its report or its error.
    pub fn run<F, Fut>(&self, cmd: &str, body: F) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        self.run_with(cmd, true, false, body)
    }

    /// [`Ctx::run`] for a command that fills a store it may have to create (`demo`, `import`,
    /// `fixtures`): a RocksDB path without a database gets a new one.
    pub fn run_creating<F, Fut>(&self, cmd: &str, body: F) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        self.run_with(cmd, true, true, body)
    }

    /// [`Ctx::run`], printing the report on stderr unless `on_stdout` (for a command whose
    /// stdout carries data, like `export` without `--out`).
    pub fn run_to<F, Fut>(&self, cmd: &str, on_stdout: bool, body: F) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        self.run_with(cmd, on_stdout, false, body)
    }

    fn run_with<F, Fut>(&self, cmd: &str, on_stdout: bool, create: bool, body: F) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        self.run_opened(cmd, (on_stdout, create, true), body)
    }

    /// [`Ctx::run_to`] (`create`: [`Ctx::run_creating`]) with the store as it is stored: not
    /// sealed even when `AFK_SEAL_*` is set (its sealed values read and written as they are).
    pub fn run_as_stored<F, Fut>(
        &self,
        cmd: &str,
        on_stdout: bool,
        create: bool,
        body: F,
    ) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        self.run_opened(cmd, (on_stdout, create, false), body)
    }

    fn run_opened<F, Fut>(
        &self,
        cmd: &str,
        (on_stdout, create, sealed): (bool, bool, bool),
        body: F,
    ) -> ExitCode
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = Result<Report>>,
    {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let e = Error::unexpected(format!("cannot start the async runtime: {e}"));
                return self.fail(cmd, &e);
            }
        };
        let url = self.url.clone();
        let res = rt.block_on(async move {
            let store = if sealed {
                super::common::open(cmd, &url, create).await?
            } else {
                super::common::open_as_stored(cmd, &url, create).await?
            };
            body(store).await
        });
        self.print_to(cmd, on_stdout, res)
    }

    /// Print the report of a command that opens no store (or its error); the exit code.
    pub fn print(&self, cmd: &str, res: Result<Report>) -> ExitCode {
        self.print_to(cmd, true, res)
    }

    fn print_to(&self, cmd: &str, on_stdout: bool, res: Result<Report>) -> ExitCode {
        match res {
            Ok(report) => {
                let text = if self.json {
                    let mut t = serde_json::to_string_pretty(&report.json).unwrap_or_default();
                    t.push('\n');
                    t
                } else {
                    report.human
                };
                if on_stdout {
                    print!("{text}");
                } else {
                    eprint!("{text}");
                }
                if report.failed {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => self.fail(cmd, &e),
        }
    }

    /// Print `e` (naming the store, the key and what to do) and return exit code 1.
    pub fn fail(&self, cmd: &str, e: &Error) -> ExitCode {
        let store = self.store_name();
        eprint!("{}", error_text(cmd, &store, e));
        if self.json {
            let doc = error_doc(cmd, &store, e);
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        ExitCode::FAILURE
    }
}

/// The text of an error of command `cmd` on the store named `store` (already redacted):
/// `afk <cmd>: <kind>: <message>: <sources>`, then the store, the key and what to do, with
/// every URL's password redacted.
pub fn error_text(cmd: &str, store: &str, e: &Error) -> String {
    let mut text = format!("afk {cmd}: {}: {}", e.kind(), e.message());
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text.push_str(&format!("\n  store: {store}\n"));
    if let Some(key) = e.key() {
        text.push_str(&format!("  key:   {key}\n"));
    }
    text.push_str(&format!("  what to do: {}\n", hint(e)));
    afk::redact::redact_urls(&text)
}

/// The `--json` document of an error: `{"error": {"command", "store", "kind", "message",
/// "key", "retryable", "hint"}}`.
pub fn error_doc(cmd: &str, store: &str, e: &Error) -> Value {
    json!({"error": {
        "command": cmd,
        "store": store,
        "kind": e.kind().as_str(),
        "message": afk::redact::redact_urls(&e.to_string()),
        "key": e.key(),
        "retryable": e.is_retryable(),
        "hint": hint(e),
    }})
}

/// What the operator can do about `e`.
pub fn hint(e: &Error) -> &'static str {
    // The KMS key source's errors all name KMS; they are about `AFK_SEAL_KMS`, not the store.
    if e.message().contains("KMS") {
        match e.kind() {
            ErrorKind::Unavailable | ErrorKind::Timeout => {
                return "KMS (or the AWS credentials provider) did not answer: check the \
                        endpoint, region and credentials of AFK_SEAL_KMS and the network, then \
                        retry";
            }
            ErrorKind::InvalidConfig => {
                return "fix the KMS key in AFK_SEAL_KMS, its state (enabled) or what the \
                        credentials may do with it (key policy, grants)";
            }
            _ => {}
        }
    }
    match e.kind() {
        ErrorKind::NotFound => {
            "check --thread and --run: `afk threads` lists the threads, `afk runs --thread T` \
             their runs"
        }
        ErrorKind::Conflict => {
            "the run's stored state does not allow this: look at it with `afk show --thread T \
             --run R`"
        }
        ErrorKind::Fenced => {
            "another process claimed the run meanwhile; look at it again before retrying"
        }
        ErrorKind::Unavailable | ErrorKind::Timeout => {
            "the store did not answer: check that it runs and that the URL is right, then retry"
        }
        ErrorKind::Corrupt => {
            "a stored record cannot be used: `afk verify --thread T --run R` and `afk timeline` \
             show what is wrong; nothing was changed"
        }
        ErrorKind::InvalidConfig
            if e.message().contains("AFK_SEAL") || e.message().contains(" key ") =>
        {
            "fix the keys: AFK_SEAL_KEYS (or AFK_SEAL_KEY_FILE) lists every key-encryption key \
             still in use, the active one first, and AFK_SEAL_KEYRING names the keyring"
        }
        ErrorKind::InvalidConfig => "fix the store URL (--store or AFK_STORE)",
        ErrorKind::InvalidInput => "check the command's arguments (`afk <command> --help`)",
        ErrorKind::Unsupported => "this store or build cannot do that; see the message",
        _ => "see the message; `afk verify` checks the run's stored state",
    }
}

/// A progress line on stderr, shown only on a terminal.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    on: bool,
}

impl Progress {
    /// Progress that shows only when stdout and stderr are a terminal and `json` is off.
    pub fn on_terminal(json: bool) -> Self {
        Progress {
            on: !json && std::io::stderr().is_terminal() && std::io::stdout().is_terminal(),
        }
    }

    /// No progress at all (for a report built for a page or an API answer).
    pub fn none() -> Self {
        Progress { on: false }
    }

    /// Show `what` (`n` of `total`) on one overwritten line.
    pub fn tick(&self, what: &str, n: usize, total: Option<usize>) {
        if self.on {
            match total {
                Some(t) => eprint!("\r\x1b[2K{what} {n}/{t}"),
                None => eprint!("\r\x1b[2K{what} {n}"),
            }
        }
    }

    /// Clear the progress line.
    pub fn done(&self) {
        if self.on {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Rows as a table with aligned columns (two spaces apart, the last column unpadded).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                l.push_str(c);
            } else {
                let pad = widths[i].saturating_sub(c.chars().count());
                l.push_str(c);
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["RUN", "STEP", "STATE"],
            &[
                vec!["run_1".into(), "3".into(), "paused".into()],
                vec!["r".into(), "12".into(), "completed".into()],
            ],
        );
        assert_eq!(
            t,
            "RUN    STEP  STATE\nrun_1  3     paused\nr      12    completed\n"
        );
    }

    #[test]
    fn errors_never_print_the_password() {
        let url = "redis://user:hunter2@localhost:6379";
        let text = afk::redact::redact_urls(&format!("cannot reach {url}"));
        assert!(!text.contains("hunter2"), "{text}");
    }
}

/// A timestamp in ms since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}

/// `writeln!` into a `String` (which cannot fail).
macro_rules! wl {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($t)*);
    }};
}
pub(crate) use wl;
