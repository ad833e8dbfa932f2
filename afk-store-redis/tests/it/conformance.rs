//! The shared conformance suite, against a single node and against the 3-master Cluster.

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
