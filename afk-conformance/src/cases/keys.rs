//! Keys: every valid logical key works, every invalid one is rejected.

use afk_core::ErrorKind;
use afk_core::store::{MAX_KEY_LEN, Store};

use crate::support::{
    CaseResult, Ctx, commit, ensure, expect_kind, expect_value, list_all, unique_run, unique_thread,
};

/// Valid but unusual keys round-trip and list: escaped tool call ids (`effect:r:1:a%3Ab`),
/// punctuation a backend may treat specially (`{}` hash tags, `*` globs, `/` and `\` path
/// separators, `..`, `#`, `?`, `%`), extra `:` fields, and a key of the maximum length.
pub async fn odd_valid_keys_round_trip(store: &dyn Store) -> CaseResult {
    let t = unique_thread("keys-odd");
    let r = unique_run();
    let mut keys: Vec<String> = [
        "a%3Ab",
        "a%2Fb",
        "%25",
        "{tag}",
        "x{y}z",
        "*",
        "?",
        "[a-z]",
        "a/b",
        "..",
        "../..",
        "\\",
        "#frag",
        "a:b:c",
        "~!@$^&()+=|;<>,'\"`",
        "-",
        "_",
        ".",
    ]
    .iter()
    .map(|s| format!("effect:{r}:1:{s}"))
    .collect();
    let prefix = format!("messages:{r}:");
    keys.push(format!(
        "{prefix}{}",
        "z".repeat(MAX_KEY_LEN - prefix.len())
    ));
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let puts = keys
        .iter()
        .map(|k| (k.clone(), k.as_bytes().to_vec()))
        .collect();
    store
        .commit(&commit(&t, &r, e, puts, None))
        .await
        .ctx("commit of odd keys")?;
    for key in &keys {
        expect_value(store, &t, key, Some(key.as_bytes())).await?;
    }
    let mut want = keys.clone();
    want.push(format!("run:{r}"));
    want.sort();
    let got = list_all(store, &t, "", 7).await?;
    ensure!(
        got == want,
        "listing odd keys: expected {want:?}, got {got:?}"
    );
    let got = list_all(store, &t, &format!("effect:{r}:1:{{"), 7).await?;
    ensure!(
        got == vec![format!("effect:{r}:1:{{tag}}")],
        "listing prefix with a brace: {got:?}"
    );
    store.delete(&t, &keys).await.ctx("delete odd keys")?;
    let got = list_all(store, &t, "", 7).await?;
    ensure!(
        got == vec![format!("run:{r}")],
        "after deleting the odd keys: {got:?}"
    );
    Ok(())
}

/// Malformed keys are `InvalidInput` in `get`, `get_many`, `list` prefixes and `delete`:
/// empty, too long, spaces, control bytes, non-ASCII.
pub async fn invalid_keys_are_rejected(store: &dyn Store) -> CaseResult {
    let t = unique_thread("keys-invalid");
    let r = unique_run();
    let bad = [
        String::new(),
        format!("effect:{r}:{}", "k".repeat(MAX_KEY_LEN)),
        format!("effect:{r}:1:a b"),
        format!("effect:{r}:1:a\nb"),
        format!("effect:{r}:1:a\0b"),
        format!("effect:{r}:1:\u{7f}"),
        format!("effect:{r}:1:caf\u{e9}"),
    ];
    for key in &bad {
        expect_kind(
            store.get(&t, key).await,
            ErrorKind::InvalidInput,
            &format!("get {key:?}"),
        )?;
        let many = vec![format!("effect:{r}:1:ok"), key.clone()];
        expect_kind(
            store.get_many(&t, &many).await,
            ErrorKind::InvalidInput,
            &format!("get_many with {key:?}"),
        )?;
        expect_kind(
            store.delete(&t, std::slice::from_ref(key)).await,
            ErrorKind::InvalidInput,
            &format!("delete {key:?}"),
        )?;
        if !key.is_empty() {
            expect_kind(
                store.list(&t, key, None, 10).await,
                ErrorKind::InvalidInput,
                &format!("list prefix {key:?}"),
            )?;
        }
    }
    Ok(())
}

/// Commits whose keys break the rules are `InvalidInput` and write nothing, even under a valid
/// epoch: a key of another run (also one whose id extends this one), of no run, the latest
/// pointer or the fence as a put, a repeated key, a malformed key.
pub async fn invalid_commit_keys_are_rejected(store: &dyn Store) -> CaseResult {
    let t = unique_thread("keys-commit");
    let r = unique_run();
    let e = store.claim(&t, &r).await.ctx("claim")?;
    let cases: Vec<Vec<String>> = vec![
        vec![format!("checkpoint:{r}0:0:x")],
        vec![format!("effect:{r}x:0:x")],
        vec!["checkpoint:other:0:x".to_string()],
        vec!["thread_meta".to_string()],
        vec![format!("checkpoint:{r}:latest")],
        vec![format!("run:{r}")],
        vec![format!("effect:{r}:0:x"), format!("effect:{r}:0:x")],
        vec![format!("effect:{r}:0:\u{e9}")],
    ];
    for keys in cases {
        let puts = keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect();
        let c = commit(&t, &r, e, puts, Some(b"p".to_vec()));
        expect_kind(
            store.commit(&c).await,
            ErrorKind::InvalidInput,
            &format!("commit of {keys:?}"),
        )?;
    }
    let got = list_all(store, &t, "", 100).await?;
    ensure!(
        got == vec![format!("run:{r}")],
        "rejected commits wrote: {got:?}"
    );
    Ok(())
}
