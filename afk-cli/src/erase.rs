//! `afk erase --thread T`: destroy a thread's data keys in the keyring of a store sealed at
//! rest (`AFK_SEAL_KEYRING`), so that every value of the thread, in the store and in every copy
//! of it, can no longer be opened (crypto-shredding). Other threads are untouched. The store's
//! keys stay (a later `afk prune` may delete them); reading them through the seal gives
//! `not_found` (the thread has no data key).
//!
//! JSON: `{"thread", "erased"}` (`erased`: whether the thread had keys).

use std::process::ExitCode;

use afk_core::{Error, ErrorKind, ThreadId};
use serde_json::json;

use super::common::{SEAL_KEYRING, keyring_from_env};
use super::output::{Ctx, Report, wl};

/// `afk erase`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The thread whose data keys to destroy.
    #[arg(long)]
    thread: String,
}

/// Prints `erased the data keys of thread T: …` or `thread T had no data keys`.
pub fn run(args: Args, ctx: &Ctx) -> ExitCode {
    let res = (|| {
        let thread = ThreadId::new(&args.thread)?;
        let ring = keyring_from_env()?.ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("set {SEAL_KEYRING} to the keyring directory of the sealed store"),
            )
        })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| Error::unexpected(format!("cannot start the async runtime: {e}")))?;
        let erased = rt.block_on(afk_seal::Keyring::erase(&ring, &thread))?;
        let mut o = String::new();
        if erased {
            wl!(
                o,
                "erased the data keys of thread {thread}: none of its values, in this store or \
                 any copy of it, can be opened any more"
            );
        } else {
            wl!(o, "thread {thread} had no data keys in the keyring");
        }
        Ok::<_, Error>(Report::ok(
            json!({"thread": thread.as_str(), "erased": erased}),
            o,
        ))
    })();
    ctx.print("erase", res)
}
