//! [`KeySources`]: several key sources as one, to move a keyring from one to another
//! (configured keys to AWS KMS, KMS back to configured keys, one key file to another).

use std::sync::Arc;

use afk_core::{Error, ErrorKind, Result, ThreadId};
use async_trait::async_trait;

use crate::format::Key;
use crate::keys::KeySource;

/// Several key sources as one: new data keys are wrapped by the first (the active one, whose
/// [`KeySource::active`] this reports); a wrapped data key is unwrapped by the sources that
/// recognise it ([`KeySource::wrapped_with`] names a key for it), in order, until one holds
/// its key. With it, [`SealedStore::rekey`](crate::SealedStore::rekey) wraps every data key
/// wrapped by the older sources again under the active one, after which the older sources
/// can go: `KeySources::new(kms, vec![configured])` moves a keyring from configured keys to
/// KMS, `KeySources::new(configured, vec![kms])` back.
///
/// A source that recognises a wrapped key but is unreachable or fails answers with its error
/// (`Unavailable`), which is returned as it is: nothing falls back to another source or to
/// plaintext. Only "this source does not hold that key" (`InvalidConfig`) moves on to the
/// next.
#[derive(Debug, Clone)]
pub struct KeySources {
    sources: Vec<Arc<dyn KeySource>>,
}

impl KeySources {
    /// `active` wraps new data keys; `older` only unwrap.
    pub fn new(active: Arc<dyn KeySource>, older: Vec<Arc<dyn KeySource>>) -> Self {
        let mut sources = vec![active];
        sources.extend(older);
        KeySources { sources }
    }

    fn active_source(&self) -> &Arc<dyn KeySource> {
        // `new` always puts the active source first.
        &self.sources[0]
    }
}

#[async_trait]
impl KeySource for KeySources {
    fn active(&self) -> &str {
        self.active_source().active()
    }

    async fn wrap(&self, thread: &ThreadId, dek_id: &str, dek: &Key) -> Result<Vec<u8>> {
        self.active_source().wrap(thread, dek_id, dek).await
    }

    async fn unwrap(&self, thread: &ThreadId, dek_id: &str, wrapped: &[u8]) -> Result<Key> {
        let mut lacking = None;
        for source in self
            .sources
            .iter()
            .filter(|s| s.wrapped_with(wrapped).is_some())
        {
            match source.unwrap(thread, dek_id, wrapped).await {
                Ok(key) => return Ok(key),
                Err(e) if e.kind() == ErrorKind::InvalidConfig => lacking = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(lacking.unwrap_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "data key {dek_id} of thread {thread} is wrapped in a form none of the key \
                     sources reads"
                ),
            )
        }))
    }

    fn wrapped_with(&self, wrapped: &[u8]) -> Option<String> {
        self.sources.iter().find_map(|s| s.wrapped_with(wrapped))
    }
}
