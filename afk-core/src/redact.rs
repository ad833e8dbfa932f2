//! [`redact_urls`]: the one place that hides the secrets of store URLs before they are shown.
//!
//! Store URLs carry secrets (`redis://user:password@host`, `s3://b?secret_access_key=…`), and
//! they end up in error messages, logs and the CLI's output. Every crate of the workspace that
//! shows a URL, or a text that may hold one, passes it through this function.

/// Query parameters whose value is hidden: any name that contains one of these, ignoring case
/// (`secret_access_key`, `access_key_id`, `password`, `X-Amz-Signature`, `auth_token`, …).
const SECRET_PARAMS: [&str; 6] = [
    "password",
    "secret",
    "token",
    "key",
    "signature",
    "credential",
];

/// `text` with the secrets of every URL in it replaced by `***`. Safe to print.
///
/// `text` may be one URL, a comma-separated list of URLs (Redis Cluster seeds), or any text
/// that contains URLs (an error message). In each URL (`scheme://…`):
/// - the password of the user info: `redis://user:pw@h` → `redis://user:***@h`; a lone user
///   info of a Redis URL is a password (`redis://pw@h` → `redis://***@h`);
/// - the value of every query parameter whose name mentions a secret (`password`, `secret`,
///   `token`, `key`, `signature`, `credential`): `s3://b?secret_access_key=zz` →
///   `s3://b?secret_access_key=***`.
///
/// A word without a scheme that has user info (`user:pw@host`, `pw@host`, also as a seed of a
/// list) loses all of it, as nothing says where a password would end: `***@host` (an e-mail
/// address too). Everything else is unchanged (keys, paths, URLs without secrets).
///
/// ```
/// use afk_core::redact::redact_urls;
///
/// assert_eq!(redact_urls("redis://app:hunter2@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(
///     redact_urls("cannot reach s3://b/p?region=x&secret_access_key=zz: timed out"),
///     "cannot reach s3://b/p?region=x&secret_access_key=***: timed out"
/// );
/// ```
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars() {
        if is_boundary(c) {
            out.push_str(&redact_word(&word));
            word.clear();
            out.push(c);
        } else {
            word.push(c);
        }
    }
    out.push_str(&redact_word(&word));
    out
}

/// Characters that end a URL in running text.
fn is_boundary(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// One word of text: URLs (maybe several, comma-separated, maybe after other text such as
/// `url=`) or a word without a scheme. Punctuation that ends the word in running text
/// (`s3://…?secret_access_key=zz: timed out`) is not part of the URL and stays.
fn redact_word(word: &str) -> String {
    let core = word.trim_end_matches([':', ';', '.', ')', ']']);
    format!("{}{}", redact_parts(core), &word[core.len()..])
}

/// [`redact_word`] without trailing punctuation.
fn redact_parts(word: &str) -> String {
    word.split(',')
        .map(|part| match scheme_start(part) {
            Some(start) => {
                let (before, url) = part.split_at(start);
                format!("{before}{}", redact_url(url))
            }
            // No scheme says where user info ends: hide all of it (`pw@h2` as a cluster seed).
            None => match part.rsplit_once('@') {
                Some((_, host)) => format!("***@{host}"),
                None => part.to_owned(),
            },
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the scheme of the first `scheme://` in `part` starts.
fn scheme_start(part: &str) -> Option<usize> {
    let sep = part.find("://")?;
    let start = part[..sep]
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        .last()
        .map(|(i, _)| i)?;
    Some(start)
}

/// One URL that starts with its scheme.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let auth_end = before_query.find('/').unwrap_or(before_query.len());
    let (authority, path) = before_query.split_at(auth_end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None if scheme.to_ascii_lowercase().starts_with("redis") => format!("***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_owned(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if is_secret_name(k) => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|s| n.contains(s))
}

#[cfg(test)]
mod tests {
    use super::redact_urls;

    #[test]
    fn passwords_in_user_info_are_hidden() {
        assert_eq!(
            redact_urls("redis://user:hunter2@h:1/0"),
            "redis://user:***@h:1/0"
        );
        assert_eq!(redact_urls("rediss://:hunter2@h"), "rediss://:***@h");
        // A lone Redis user info is a password; elsewhere a user name.
        assert_eq!(redact_urls("redis://hunter2@h"), "redis://***@h");
        assert_eq!(redact_urls("http://alice@h/x"), "http://alice@h/x");
        // A password holding `@` or `:` is hidden whole.
        assert_eq!(redact_urls("redis://u:p@ss:w@h:1"), "redis://u:***@h:1");
    }

    #[test]
    fn secrets_in_query_strings_are_hidden() {
        assert_eq!(
            redact_urls(
                "s3://b/p?endpoint=http://127.0.0.1:9000&access_key_id=AKIA1&secret_access_key=zz&region=x"
            ),
            "s3://b/p?endpoint=http://127.0.0.1:9000&access_key_id=***&secret_access_key=***&region=x"
        );
        assert_eq!(
            redact_urls("https://h/o?X-Amz-Credential=c&X-Amz-Signature=s&x=1"),
            "https://h/o?X-Amz-Credential=***&X-Amz-Signature=***&x=1"
        );
        assert_eq!(
            redact_urls("redis://h?password=pw&prefix=afk"),
            "redis://h?password=***&prefix=afk"
        );
    }

    #[test]
    fn every_url_of_a_text_or_a_list_is_redacted() {
        assert_eq!(
            redact_urls("redis://:a@h1,redis://:b@h2"),
            "redis://:***@h1,redis://:***@h2"
        );
        assert_eq!(
            redact_urls("redis+cluster://u:a@h1:1,b@h2:2"),
            "redis+cluster://u:***@h1:1,***@h2:2"
        );
        let text = "afk runs: cannot reach redis://u:one@h:1 (then \"s3://b?secret_access_key=two\")\n  store: url=rediss://:three@h";
        let shown = redact_urls(text);
        for secret in ["one", "two", "three"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(
            shown,
            "afk runs: cannot reach redis://u:***@h:1 (then \"s3://b?secret_access_key=***\")\n  store: url=rediss://:***@h"
        );
    }

    #[test]
    fn text_without_secrets_is_unchanged() {
        for text in [
            "rocksdb://./x?sync=false",
            "memory://",
            "checkpoint:run_1:3:pre_llm not found",
            "s3://bucket/prefix?region=eu-west-1",
            "",
            "a://",
            "://x",
        ] {
            assert_eq!(redact_urls(text), text);
        }
        // A word without a scheme loses its user info.
        assert_eq!(redact_urls("user:pw@host:6379"), "***@host:6379");
        assert_eq!(redact_urls("at hunter2@host"), "at ***@host");
    }
}
