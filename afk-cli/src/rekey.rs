//! `afk rekey --thread T | --all [--new-data-key]`: rotate the keys of a store sealed at rest
//! ([`afk_seal::SealedStore::rekey`]). Every data key of the thread is wrapped again under the
//! active key-encryption key (the first of `AFK_SEAL_KEYS`, or the key of `AFK_SEAL_KMS`), so
//! older keys can then be dropped; with `--new-data-key`, every value is re-sealed under a
//! fresh data key, run by run under a claim, and the old data key is retired once every value
//! opens with the new one.
//! A run held by a live owner (an unexpired lease) is skipped and reported, never taken; the
//! old data key is then kept, and the command exits 1: run it again later. Interrupted at any
//! point (a crash, SIGKILL), the store stays readable and running the command again finishes
//! the job. `--from-key-file F` and `--from-kms URL` name the key sources that wrapped the data
//! keys until now: the keyring moves from them to the `AFK_SEAL_*` source (from a key file to
//! KMS with `AFK_SEAL_KMS=… afk rekey --all --from-key-file old.keys`, and back with
//! `AFK_SEAL_KEY_FILE=new.keys afk rekey --all --from-kms kms://…`); once the command
//! finishes, they are no longer needed. With `--all`, a thread that fails (a key the key
//! source lacks, a corrupt value, a store error) is reported and the next thread is rotated;
//! the command exits 1 at the end, naming every thread that failed.
//!
//! JSON: `{"threads": [{"thread", "had_keys", "kek", "data_key", "rewrapped", "created",
//! "resealed", "current", "plaintext", "skipped": [{"run", "owner", "lease_until_ms",
//! "reason"}], "retired", "pending"}], "failed": [{"thread", "kind", "message", "key", "hint"}],
//! "resealed", "finished"}`.

use std::process::ExitCode;
use std::sync::Arc;

use afk_core::store::StoreExt;
use afk_core::{Error, ThreadId};
use afk_seal::{KeySource, RekeyAll, RekeyOptions, RekeyReport, StaticKeys};
use serde_json::json;

use super::common::{kms_from_url, open_sealed};
use super::output::{Ctx, Report, hint, utc, wl};
use afk::redact::redact_urls;

/// `afk rekey`
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["thread", "all"])))]
pub struct Args {
    /// The thread whose keys to rotate.
    #[arg(long)]
    thread: Option<String>,
    /// Every thread of the store (a store that lists its threads).
    #[arg(long)]
    all: bool,
    /// Also re-seal every value under a fresh data key and retire the old one (for a data
    /// key that may have leaked).
    #[arg(long)]
    new_data_key: bool,
    /// A key file (`id=<64 hex>` entries, as `AFK_SEAL_KEY_FILE`) whose keys wrapped data keys
    /// until now: they are unwrapped with it and wrapped again under the `AFK_SEAL_*` source,
    /// to move the keyring from this file to KMS or to another file. Repeatable.
    #[arg(long, value_name = "FILE")]
    from_key_file: Vec<std::path::PathBuf>,
    /// A KMS key (a `kms://<key id>?region=…` URL, as `AFK_SEAL_KMS`) that wrapped data keys
    /// until now: they are unwrapped with it and wrapped again under the `AFK_SEAL_*` source,
    /// to move the keyring from KMS to a key file or to another KMS key. Repeatable.
    #[arg(long, value_name = "URL")]
    from_kms: Vec<String>,
}

/// The key sources `--from-key-file` and `--from-kms` name, in that order.
async fn older_sources(args: &Args) -> afk_core::Result<Vec<Arc<dyn KeySource>>> {
    let mut out: Vec<Arc<dyn KeySource>> = Vec::new();
    for path in &args.from_key_file {
        out.push(Arc::new(StaticKeys::from_file(path)?));
    }
    for url in &args.from_kms {
        out.push(kms_from_url(url).await?);
    }
    Ok(out)
}

/// One paragraph per thread; exit 0 when every thread is done, 1 when a run was skipped or
/// an old data key is still needed.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let progress = ctx.progress();
    let url = ctx.url.clone();
    let res = (|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::unexpected(format!("cannot start the async runtime: {e}")))?;
        rt.block_on(async {
            let store = open_sealed("rekey", &url, older_sources(&args).await?).await?;
            let opts = RekeyOptions {
                new_data_key: args.new_data_key,
                ..RekeyOptions::default()
            };
            let all = match &args.thread {
                // One thread named on the command line: its error is the command's.
                Some(t) => RekeyAll {
                    threads: vec![store.rekey(&ThreadId::new(t)?, &opts).await?],
                    failed: Vec::new(),
                },
                None => {
                    let threads = store.list_all_threads().await?;
                    let n = threads.len();
                    let mut tick = |i| progress.tick("rekeying threads", i, Some(n));
                    store.rekey_each(&threads, &opts, &mut tick).await
                }
            };
            progress.done();
            Ok::<_, Error>(report(&all))
        })
    })();
    ctx.print("rekey", res)
}

/// The report of every thread, and of those that failed.
fn report(all: &RekeyAll) -> Report {
    let (reports, failed) = (&all.threads, &all.failed);
    let mut o = String::new();
    for r in reports {
        wl!(o, "{}", paragraph(r));
    }
    for f in failed {
        wl!(
            o,
            "thread {}: failed: {}: {}",
            f.thread,
            f.error.kind(),
            redact_urls(f.error.message())
        );
    }
    let resealed: u64 = reports.iter().map(|r| r.resealed).sum();
    let held = !reports.iter().all(RekeyReport::finished);
    let finished = all.finished();
    if reports.is_empty() && failed.is_empty() {
        wl!(o, "no threads to rekey");
    }
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|f| f.thread.as_str()).collect();
        wl!(
            o,
            "not finished: {} thread(s) failed ({}); fix what each says and run `afk rekey` again",
            failed.len(),
            names.join(", ")
        );
    }
    if held {
        wl!(
            o,
            "not finished: run `afk rekey` again once the runs above are no longer held"
        );
    }
    let failed_doc: Vec<_> = failed
        .iter()
        .map(|f| {
            let e = &f.error;
            json!({"thread": f.thread.as_str(), "kind": e.kind().as_str(),
                "message": redact_urls(e.message()), "key": e.key(), "hint": hint(e)})
        })
        .collect();
    let doc = json!({"threads": reports, "failed": failed_doc, "resealed": resealed,
        "finished": finished});
    let mut report = Report::ok(doc, o);
    report.failed = !finished;
    report
}

/// The lines of one thread.
fn paragraph(r: &RekeyReport) -> String {
    let t = &r.thread;
    if !r.had_keys {
        return format!("thread {t}: no data keys (never sealed, or erased); nothing to do");
    }
    let mut o = format!(
        "thread {t}: data key {} wrapped by key {}: {} data key(s) wrapped again, {} value(s) \
         re-sealed, {} already current",
        r.data_key, r.kek, r.rewrapped, r.resealed, r.current
    );
    if r.plaintext > 0 {
        o.push_str(&format!(", {} plaintext (left as they are)", r.plaintext));
    }
    if r.created {
        o.push_str(&format!("\n  created data key {}", r.data_key));
    }
    for s in &r.skipped {
        let owner = s.owner.as_deref().unwrap_or("another process");
        let until = if s.lease_until_ms > 0 {
            format!(" until {}", utc(s.lease_until_ms))
        } else {
            String::new()
        };
        o.push_str(&format!(
            "\n  skipped run {}: {} ({owner}{until})",
            s.run, s.reason
        ));
    }
    if !r.retired.is_empty() {
        o.push_str(&format!(
            "\n  retired data key(s) {}: they open nothing any more",
            r.retired.join(", ")
        ));
    }
    if !r.pending.is_empty() {
        o.push_str(&format!(
            "\n  old data key(s) {} kept: some values still need them",
            r.pending.join(", ")
        ));
    }
    o
}
