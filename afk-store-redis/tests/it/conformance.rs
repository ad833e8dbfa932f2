//! The shared conformance suite, against a single node and against the 3-master Cluster, each
//! also sealed at rest (`afk-seal`).

use crate::common;

use std::sync::Arc;

use afk_store_redis::RedisStore;

mod single {
    afk_conformance::store_suite!(crate::conformance::store("AFK_TEST_REDIS_URL"));
}

mod cluster {
    afk_conformance::store_suite!(crate::conformance::store("AFK_TEST_REDIS_CLUSTER_URLS"));
}

/// A store on the server named by `var`, under a fresh key prefix; `None` skips.
async fn store(var: &str) -> Option<Arc<RedisStore>> {
    let url = afk_conformance::require_env(var)?;
    Some(Arc::new(common::connect(common::config(&url)).await))
}

/// The suite again on a single node sealed at rest (`afk-seal`): sealing changes nothing a
/// store user can see.
mod sealed {
    use std::sync::Arc;

    use afk_seal::{Key, MemoryKeyring, SealedStore, StaticKeys};

    afk_conformance::store_suite!(store("AFK_TEST_REDIS_URL"));

    /// The Cluster sealed at rest.
    mod cluster {
        afk_conformance::store_suite!(crate::conformance::sealed::store(
            "AFK_TEST_REDIS_CLUSTER_URLS"
        ));
    }

    async fn store(var: &str) -> Option<Arc<SealedStore>> {
        let inner = crate::conformance::store(var).await?;
        let keys = StaticKeys::new("k1", Key::generate()).expect("keys");
        Some(Arc::new(SealedStore::new(
            inner,
            Arc::new(keys),
            Arc::new(MemoryKeyring::default()),
        )))
    }
}
