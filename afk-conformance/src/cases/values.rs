//! Values: large ones, empty ones, every byte value; stored as copies.

use afk_core::{ErrorKind, store::Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, unique_run, unique_thread,
};

/// Values used when the store declares no limit.
pub const DEFAULT_LARGE_VALUE: usize = 1 << 20;

/// The largest value the case writes, whatever the store's limit.
pub const MAX_TESTED_VALUE: usize = 8 << 20;

/// A value of the store's `max_value_size` (or 1 MiB when it has none; at most 8 MiB)
/// round-trips byte for byte, as a put and as the latest pointer; when the limit is at most
/// 8 MiB, one byte more is `InvalidInput` and writes nothing.
pub async fn large_value_round_trips(store: &dyn Store) -> CaseResult {
    let t = unique_thread("values-large");
    let r = unique_run();
    let max = store.capabilities().max_value_size;
    let size = max.map_or(DEFAULT_LARGE_VALUE, |m| m.min(MAX_TESTED_VALUE));
    let value: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
    let key = format!("checkpoint:{r}:0:pre_llm");
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let c = commit(
        &t,
        &r,
        e,
        vec![(key.clone(), value.clone())],
        Some(value.clone()),
    );
    store
        .commit(&c)
        .await
        .ctx(format!("commit of a {size}-byte value"))?;
    expect_value(store, &t, &key, Some(&value)).await?;
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), Some(&value)).await?;
    if let Some(max) = max.filter(|m| *m <= MAX_TESTED_VALUE) {
        let over = format!("checkpoint:{r}:1:pre_llm");
        let c = commit(&t, &r, e, vec![(over.clone(), vec![0; max + 1])], None);
        expect_kind(
            store.commit(&c).await,
            ErrorKind::InvalidInput,
            "a value one byte over max_value_size",
        )?;
        expect_value(store, &t, &over, None).await?;
    }
    Ok(())
}

/// The empty value, every single byte value, all 256 byte values in one value, and bytes
/// that are not UTF-8 all round-trip exactly; an empty value is not a missing key.
pub async fn odd_byte_values_round_trip(store: &dyn Store) -> CaseResult {
    let t = unique_thread("values-odd");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let mut puts: Vec<(String, Vec<u8>)> = vec![
        (format!("checkpoint:{r}:0:empty"), Vec::new()),
        (format!("checkpoint:{r}:0:all"), (0..=255u8).collect()),
        (format!("checkpoint:{r}:0:rev"), (0..=255u8).rev().collect()),
        (format!("checkpoint:{r}:0:nul"), vec![0; 64]),
        (
            format!("checkpoint:{r}:0:badutf8"),
            vec![0xff, 0xfe, 0xc0, 0x80, 0xed, 0xa0, 0x80],
        ),
        (
            format!("checkpoint:{r}:0:crlf"),
            b"a\r\nb\n\0\"'\\{}".to_vec(),
        ),
    ];
    for chunk in (0..=255u8).collect::<Vec<_>>().chunks(64) {
        let mut chunk_puts = puts.split_off(0);
        chunk_puts.extend(
            chunk
                .iter()
                .map(|b| (format!("effect:{r}:1:b{b:03}"), vec![*b])),
        );
        store
            .commit(&commit(&t, &r, e, chunk_puts.clone(), Some(Vec::new())))
            .await
            .ctx("commit")?;
        for (key, value) in &chunk_puts {
            expect_value(store, &t, key, Some(value)).await?;
        }
    }
    expect_value(store, &t, &format!("checkpoint:{r}:latest"), Some(&[])).await?;
    let keys = vec![
        format!("checkpoint:{r}:0:empty"),
        format!("checkpoint:{r}:0:none"),
    ];
    let got = store.get_many(&t, &keys).await.ctx("get_many")?;
    ensure!(
        got == vec![Some(Vec::new()), None],
        "get_many of an empty value and a missing key: {got:?}"
    );
    Ok(())
}
