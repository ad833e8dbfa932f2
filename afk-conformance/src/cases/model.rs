//! Model-based test (placeholder until the model lands).

use afk_core::Store;

use crate::support::CaseResult;

/// Replays random operation sequences against the store and a `MemoryStore` model.
pub async fn model_based(_store: &dyn Store) -> CaseResult {
    Ok(())
}
