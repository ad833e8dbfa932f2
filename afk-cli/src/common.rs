//! What the subcommands share: the async runtime, opening the store, listing a thread's keys,
//! reading a run's records.

use std::process::ExitCode;
use std::sync::Arc;

use afk_core::keys::messages_key;
use afk_core::normalize::normalize_transcript_entry;
use afk_core::schema::{RuntimeSnapshot, StepRecords, reassemble};
use afk_core::store::{Store, StoreExt};
pub use afk_core::verify::{latest_record as latest, newest_snapshot};
use afk_core::{Error, Result, RunId, ThreadId};

/// The store used when neither `--store` nor a command default says otherwise.
pub const DEFAULT_STORE: &str = "rocksdb://./.afk-data";

/// Run `body` on a fresh multi-thread runtime with the store `url` opened (created if it is a
/// RocksDB path without a database); print errors as `afk <cmd>: <error>` (with the store, the
/// key and what to do) and exit 1.
pub fn with_store<F, Fut>(cmd: &str, url: &str, body: F) -> ExitCode
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("afk {cmd}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(async {
        let store = open(cmd, url, true).await?;
        body(store).await
    });
    match res {
        Ok(code) => code,
        Err(e) => super::output::Ctx {
            url: url.to_owned(),
            json: false,
        }
        .fail(cmd, &e),
    }
}

/// Open the store `url` names for command `cmd`, logging it (info) with its password hidden and
/// its capabilities (debug). Unless `create`, a store that opening would create (a RocksDB path
/// without a database) is refused with `InvalidConfig`: a command that only inspects or changes
/// what is there must not turn a mistyped path into a new, empty store.
pub async fn open(cmd: &str, url: &str, create: bool) -> Result<Arc<dyn Store>> {
    seal_from_env(open_as_stored(cmd, url, create).await?).await
}

/// [`open`] without the seal the `AFK_SEAL_*` variables would put around it: values as the
/// store holds them.
pub async fn open_as_stored(cmd: &str, url: &str, create: bool) -> Result<Arc<dyn Store>> {
    let store = if create {
        afk::open(url).await?
    } else {
        afk::open_existing(url).await?
    };
    tracing::info!(command = cmd, store = %afk::redact::redact_urls(url), "store opened");
    tracing::debug!(capabilities = ?store.capabilities(), "store capabilities");
    Ok(store)
}

/// The existing store `url` names, sealed as the `AFK_SEAL_*` variables say, with `older`
/// key sources too (they unwrap data keys, the `AFK_SEAL_*` one wraps them): for a command
/// that works on the seal itself (`rekey`). `InvalidConfig` naming the variables when no keys
/// are set.
pub async fn open_sealed(
    cmd: &str,
    url: &str,
    older: Vec<Arc<dyn afk_seal::KeySource>>,
) -> Result<afk_seal::SealedStore> {
    let store = afk::open_existing(url).await?;
    tracing::info!(command = cmd, store = %afk::redact::redact_urls(url), "store opened");
    sealed_with(store, older).await?.ok_or_else(|| {
        afk_core::Error::new(
            afk_core::ErrorKind::InvalidConfig,
            format!(
                "no key-encryption keys: set {SEAL_KEYS} (or {SEAL_KEY_FILE}, or {SEAL_KMS}) to \
                 the keys, the new active one first and the older ones after it, and \
                 {SEAL_KEYRING} to the keyring directory"
            ),
        )
    })
}

/// The variables that open a store sealed at rest: the key-encryption keys (`id=<64 hex>`
/// entries, the first active) in `AFK_SEAL_KEYS` or the file named by `AFK_SEAL_KEY_FILE`, or
/// a KMS key as a `kms://<key id>?region=…` URL in `AFK_SEAL_KMS` (the `kms` feature); the
/// keyring directory in `AFK_SEAL_KEYRING`, and `AFK_SEAL_MODE` (`sealed`, the default;
/// `migrate`; `decrypt-only`).
pub const SEAL_KEYS: &str = "AFK_SEAL_KEYS";
/// See [`SEAL_KEYS`].
pub const SEAL_KEY_FILE: &str = "AFK_SEAL_KEY_FILE";
/// See [`SEAL_KEYS`].
pub const SEAL_KMS: &str = "AFK_SEAL_KMS";
/// See [`SEAL_KEYS`].
pub const SEAL_KEYRING: &str = "AFK_SEAL_KEYRING";
/// See [`SEAL_KEYS`].
pub const SEAL_MODE: &str = "AFK_SEAL_MODE";

/// The keyring `AFK_SEAL_KEYRING` names; `None` when unset.
pub fn keyring_from_env() -> Result<Option<afk_seal::DirKeyring>> {
    match std::env::var_os(SEAL_KEYRING) {
        Some(dir) if !dir.is_empty() => afk_seal::DirKeyring::open(dir).map(Some),
        _ => Ok(None),
    }
}

/// The key source the `AFK_SEAL_*` variables name (at most one of them), `None` when none is
/// set. A KMS source is connected (its key checked) here: `Unavailable` when KMS cannot be
/// reached.
async fn key_source_from_env() -> Result<Option<(&'static str, Arc<dyn afk_seal::KeySource>)>> {
    use afk_core::{Error, ErrorKind};
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let given: Vec<&str> = [SEAL_KEYS, SEAL_KEY_FILE, SEAL_KMS]
        .into_iter()
        .filter(|name| set(name).is_some())
        .collect();
    if given.len() > 1 {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("{} are all set: set one key source", given.join(" and ")),
        ));
    }
    let source: Arc<dyn afk_seal::KeySource> = match given.first().copied() {
        None => return Ok(None),
        Some(SEAL_KEYS) => Arc::new(afk_seal::StaticKeys::parse(
            &set(SEAL_KEYS).unwrap_or_default().to_string_lossy(),
        )?),
        Some(SEAL_KEY_FILE) => Arc::new(afk_seal::StaticKeys::from_file(std::path::Path::new(
            &set(SEAL_KEY_FILE).unwrap_or_default(),
        ))?),
        Some(_) => kms_from_url(&set(SEAL_KMS).unwrap_or_default().to_string_lossy()).await?,
    };
    Ok(given.first().map(|name| (*name, source)))
}

/// The KMS key source of a `kms://` URL (`AFK_SEAL_KMS`'s form), connected: its key checked.
#[cfg(feature = "kms")]
pub async fn kms_from_url(url: &str) -> Result<Arc<dyn afk_seal::KeySource>> {
    Ok(Arc::new(afk_seal::KmsKeys::from_url(url).await?))
}

/// Without the `kms` feature: `InvalidConfig` saying how to get it.
#[cfg(not(feature = "kms"))]
pub async fn kms_from_url(_url: &str) -> Result<Arc<dyn afk_seal::KeySource>> {
    Err(afk_core::Error::new(
        afk_core::ErrorKind::InvalidConfig,
        format!(
            "a KMS key ({SEAL_KMS} or --from-kms) is given, but this afk was built without KMS: \
             build it with --features kms"
        ),
    ))
}

/// `store` sealed as the `AFK_SEAL_*` variables say, or as it is when none is set.
async fn seal_from_env(store: Arc<dyn Store>) -> Result<Arc<dyn Store>> {
    match sealed_from_env(store.clone()).await? {
        Some(sealed) => Ok(Arc::new(sealed)),
        None => Ok(store),
    }
}

/// `store` sealed as the `AFK_SEAL_*` variables say; `None` when no key source is set.
pub async fn sealed_from_env(store: Arc<dyn Store>) -> Result<Option<afk_seal::SealedStore>> {
    sealed_with(store, Vec::new()).await
}

/// [`sealed_from_env`] with `older` key sources after the `AFK_SEAL_*` one
/// ([`afk_seal::KeySources`]): data keys they wrapped unwrap, new ones are wrapped by the
/// `AFK_SEAL_*` source, and a rekey wraps theirs again under it.
async fn sealed_with(
    store: Arc<dyn Store>,
    older: Vec<Arc<dyn afk_seal::KeySource>>,
) -> Result<Option<afk_seal::SealedStore>> {
    use afk_core::{Error, ErrorKind};
    let Some((var, keys)) = key_source_from_env().await? else {
        return Ok(None);
    };
    let keys: Arc<dyn afk_seal::KeySource> = if older.is_empty() {
        keys
    } else {
        Arc::new(afk_seal::KeySources::new(keys, older))
    };
    let ring = keyring_from_env()?.ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidConfig,
            format!("{var} is set: set {SEAL_KEYRING} to the keyring directory too"),
        )
    })?;
    let mode = match std::env::var(SEAL_MODE).unwrap_or_default().as_str() {
        "" | "sealed" => afk_seal::Mode::Sealed,
        "migrate" => afk_seal::Mode::Migrate,
        "decrypt-only" => afk_seal::Mode::DecryptOnly,
        other => {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("{SEAL_MODE}={other:?}: expected sealed, migrate or decrypt-only"),
            ));
        }
    };
    tracing::info!(mode = ?mode, "store sealed at rest");
    Ok(Some(
        afk_seal::SealedStore::new(store, keys, Arc::new(ring)).with_mode(mode),
    ))
}

/// Every key of one run (records, pointer, effect rows, transcript log, background rows, fence).
pub async fn keys_of_run(store: &dyn Store, thread: &ThreadId, run: &RunId) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for prefix in afk_core::keys::run_prefixes(run) {
        out.extend(store.list_all(thread, &prefix).await?);
    }
    let fence = afk_core::store::run_key(run);
    if store.get(thread, &fence).await?.is_some() {
        out.push(fence);
    }
    Ok(out)
}

/// Parse `--thread` and `--run` values.
pub fn ids(thread: &str, run: Option<&str>) -> Result<(ThreadId, Option<RunId>)> {
    let t = ThreadId::new(thread)?;
    let r = run.map(RunId::new).transpose()?;
    Ok((t, r))
}

/// The execution records of a snapshot: its inline lists (AFK v1, or v2 written before records
/// moved into the log) followed by those of the transcript log it references, read with one
/// `get_many` and verified (a torn or edited log is `Corrupt`).
pub async fn snapshot_records(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    snap: &RuntimeSnapshot,
) -> Result<StepRecords> {
    let mut out = StepRecords {
        tool_executions: snap.tool_executions.clone(),
        subagent_executions: snap.subagent_executions.clone(),
        skill_reads: snap.skill_reads.clone(),
        skill_command_executions: snap.skill_command_executions.clone(),
    };
    let Some(tref) = &snap.transcript else {
        return Ok(out);
    };
    let keys: Vec<String> = (0..tref.len).map(|i| messages_key(run, i)).collect();
    let mut entries = Vec::with_capacity(keys.len());
    for (key, value) in keys.iter().zip(store.get_many(thread, &keys).await?) {
        let Some(bytes) = value else {
            return Err(Error::corrupt_record(
                key.clone(),
                "transcript entry referenced by the snapshot is missing",
            ));
        };
        entries.push(normalize_transcript_entry(&bytes, key)?);
    }
    let logged = reassemble(&entries, tref)?.records;
    out.tool_executions.extend(logged.tool_executions);
    out.subagent_executions.extend(logged.subagent_executions);
    out.skill_reads.extend(logged.skill_reads);
    out.skill_command_executions
        .extend(logged.skill_command_executions);
    Ok(out)
}
