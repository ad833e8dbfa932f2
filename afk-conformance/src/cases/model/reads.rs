//! The read operations of the model test that compare more than one answer: `get_many` and
//! explicit paging.

use afk_core::ThreadId;
use afk_core::store::{MAX_LIST_LIMIT, Store};

use super::is_fence;
use crate::support::{CaseResult, fail, show, show_err, show_key};

/// `get_many` of `keys` (any order, repeats included): one answer per key, in order, equal to
/// the model's (the fence key by presence only).
pub(super) async fn get_many(
    i: usize,
    store: &dyn Store,
    model: &dyn Store,
    t: &ThreadId,
    keys: &[String],
) -> CaseResult {
    let got = store
        .get_many(t, keys)
        .await
        .map_err(|e| fail!("op {i}: get_many {keys:?}: {}", show_err(&e)))?;
    let want = model
        .get_many(t, keys)
        .await
        .map_err(|e| fail!("op {i}: model get_many: {}", show_err(&e)))?;
    if got.len() != keys.len() {
        return Err(fail!(
            "op {i}: get_many of {} keys {keys:?} answered {} values",
            keys.len(),
            got.len()
        ));
    }
    for (j, key) in keys.iter().enumerate() {
        let same = if is_fence(key) {
            got[j].is_some() == want[j].is_some()
        } else {
            got[j] == want[j]
        };
        if !same {
            return Err(fail!(
                "op {i}: get_many {keys:?}: answer {j} (key {}) is {}, the model has {}",
                show_key(key),
                show(&got[j]),
                show(&want[j])
            ));
        }
    }
    Ok(())
}

/// List `prefix` from `cursor` with pages of `limit`, following the cursors: every page holds
/// at most the (clamped) limit and exactly the model's next keys (the keys under the prefix
/// strictly after the cursor, in byte order), and the last page ends where the model's keys
/// end. A cursor before the prefix starts at the prefix; one after it gives nothing.
pub(super) async fn page(
    i: usize,
    store: &dyn Store,
    model: &dyn Store,
    t: &ThreadId,
    prefix: &str,
    cursor: Option<String>,
    limit: usize,
) -> CaseResult {
    let what = format!("list prefix {prefix:?} from cursor {cursor:?} limit {limit}");
    let want = all_from(model, t, prefix, cursor.clone())
        .await
        .map_err(|e| fail!("op {i}: model {what}: {e}"))?;
    let max = limit.clamp(1, MAX_LIST_LIMIT);
    let (mut pos, mut cur) = (0usize, cursor);
    for n in 1..=want.len() + 100 {
        let page = store
            .list(t, prefix, cur.as_deref(), limit)
            .await
            .map_err(|e| fail!("op {i}: {what}: page {n}: {}", show_err(&e)))?;
        let expected = &want[pos.min(want.len())..(pos + page.keys.len()).min(want.len())];
        if page.keys.len() > max || page.keys != expected {
            return Err(fail!(
                "op {i}: {what}: page {n} (cursor {cur:?}) is {:?}; the model's next keys are \
                 {:?} (pages hold at most {max})",
                page.keys,
                &want[pos.min(want.len())..(pos + max).min(want.len())]
            ));
        }
        pos += page.keys.len();
        match page.next_cursor {
            None if pos == want.len() => return Ok(()),
            None => {
                return Err(fail!(
                    "op {i}: {what}: the listing ended after {pos} keys; the model has {} more: \
                     {:?}",
                    want.len() - pos,
                    &want[pos..]
                ));
            }
            Some(next) => cur = Some(next),
        }
    }
    Err(fail!(
        "op {i}: {what}: more pages than keys ({}) and still a cursor",
        want.len()
    ))
}

/// Every key of the reference listing from `cursor` on.
async fn all_from(
    store: &dyn Store,
    t: &ThreadId,
    prefix: &str,
    mut cursor: Option<String>,
) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    loop {
        let page = store
            .list(t, prefix, cursor.as_deref(), MAX_LIST_LIMIT)
            .await
            .map_err(|e| show_err(&e))?;
        keys.extend(page.keys);
        match page.next_cursor {
            None => return Ok(keys),
            Some(c) => cursor = Some(c),
        }
    }
}
