//! The same malformed URLs given to every store get the same kind of error, with the message
//! of the shared parser (`afk_core::config`), through each store's config and through
//! `afk::open`; and the README's parameter table lists every parameter of every store.

#![cfg(all(feature = "rocksdb", feature = "redis", feature = "s3"))]

use afk::backend::{redis, rocksdb, s3};
use afk::config::{Backend, Query};
use afk::{ErrorKind, Result};

/// One store: how to parse a URL, a valid URL without a query, and one parameter of each
/// grammar it has.
struct Store {
    backend: Backend,
    base: &'static str,
    parse: fn(&str) -> Result<()>,
    known: &'static [&'static str],
    text: &'static str,
    boolean: Option<&'static str>,
    size: Option<&'static str>,
    duration: Option<&'static str>,
}

fn stores() -> [Store; 3] {
    [
        Store {
            backend: Backend::RocksDb,
            base: "rocksdb:///tmp/afk-store-urls-never-opened",
            parse: |u| rocksdb::RocksDbConfig::from_url(u).map(drop),
            known: rocksdb::PARAMETERS,
            text: "compression",
            boolean: Some("sync"),
            size: Some("block_cache_size"),
            duration: None,
        },
        Store {
            backend: Backend::Redis,
            base: "redis://127.0.0.1:1/0",
            parse: |u| u.parse::<redis::RedisConfig>().map(drop),
            known: redis::PARAMETERS,
            text: "prefix",
            boolean: None,
            size: None,
            duration: Some("connect_timeout_ms"),
        },
        Store {
            backend: Backend::S3,
            base: "s3://afk-bucket/prefix",
            parse: |u| u.parse::<s3::S3Config>().map(drop),
            known: s3::PARAMETERS,
            text: "region",
            boolean: Some("force_path_style"),
            size: None,
            duration: Some("connect_timeout_ms"),
        },
    ]
}

/// The message of `url`'s error, after checking it is `InvalidConfig` and that `afk::open`
/// says the same.
async fn refused(store: &Store, url: &str) -> String {
    let e = (store.parse)(url).expect_err(url);
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
    assert!(!e.to_string().contains("hunter2"), "{url}: {e}");
    if Backend::of_url(url).ok() == Some(store.backend) {
        let via_open = afk::open(url).await.expect_err(url);
        assert_eq!(via_open.kind(), e.kind(), "{url}");
        assert_eq!(via_open.message(), e.message(), "{url}");
    }
    e.message().to_owned()
}

/// What the shared parser says about `name=value` for `store`, read with `get`.
fn shared(
    store: &Store,
    name: &str,
    value: &str,
    get: impl Fn(&Query, &str) -> Result<()>,
) -> String {
    let q = Query::parse(store.backend, &format!("{name}={value}"), store.known)
        .expect("a known parameter");
    get(&q, name).expect_err(value).message().to_owned()
}

#[tokio::test]
async fn the_same_malformed_urls_get_the_same_errors_from_every_store() {
    for s in stores() {
        let b = s.backend;
        let url = |query: &str| format!("{}?{query}", s.base);
        (s.parse)(s.base).unwrap_or_else(|e| panic!("{}: {e}", s.base));

        let p = s.text;
        assert_eq!(
            refused(&s, &url(&format!("{p}=a&{p}=a"))).await,
            format!("{b} URL parameter `{p}` is given twice")
        );
        assert_eq!(
            refused(&s, &url("bogus=1")).await,
            format!(
                "unknown {b} URL parameter `bogus`; known: {}",
                s.known.join(", ")
            )
        );
        assert_eq!(
            refused(&s, &url(&format!("{p}=%zz"))).await,
            format!("{b} URL parameter `{p}` is not valid percent-encoded UTF-8")
        );
        assert_eq!(
            refused(&s, &url(&format!("{p}=%C3%28"))).await,
            format!("{b} URL parameter `{p}` is not valid percent-encoded UTF-8")
        );
        for value in ["maybe", "", "2"] {
            if let Some(p) = s.boolean {
                assert_eq!(
                    refused(&s, &url(&format!("{p}={value}"))).await,
                    shared(&s, p, value, |q, n| q.bool(n).map(drop))
                );
            }
        }
        for value in ["lots", "64MB", "1.5GiB", "-1", "99999999999TiB"] {
            if let Some(p) = s.size {
                assert_eq!(
                    refused(&s, &url(&format!("{p}={value}"))).await,
                    shared(&s, p, value, |q, n| q.size(n).map(drop))
                );
            }
        }
        for value in ["soon", "5d", "-1s", "1.5s", ""] {
            if let Some(p) = s.duration {
                assert_eq!(
                    refused(&s, &url(&format!("{p}={value}"))).await,
                    shared(&s, p, value, |q, n| q.duration(n).map(drop))
                );
            }
        }
        // A fragment, a wrong or missing scheme, an empty host or path.
        let m = refused(&s, &format!("{}#frag", s.base)).await;
        assert!(m.ends_with("must not have a fragment (#)"), "{m}");
        for wrong in ["ftp://u:hunter2@h/x", "/var/lib/afk", "memory://x"] {
            let m = refused(&s, wrong).await;
            assert!(
                m.contains(&format!("is not a {b} URL (expected {}://", b.schemes()[0])),
                "{m}"
            );
        }
        for other in stores().iter().filter(|o| o.backend != b) {
            let m = refused(&s, other.base).await;
            assert!(m.contains(&format!("is not a {b} URL")), "{m}");
        }
        let empty = format!("{}://", b.schemes()[0]);
        let m = refused(&s, &empty).await;
        assert!(m.starts_with(&format!("{b} URL `{empty}`")), "{m}");
        let m = refused(&s, &format!("{}/bad%zzpath", s.base)).await;
        assert!(
            m.ends_with("the path is not valid percent-encoded UTF-8"),
            "{m}"
        );
    }
}

#[test]
fn the_readme_lists_every_url_parameter() {
    let readme = include_str!("../../README.md");
    for s in stores() {
        let section = format!("`{}://", s.backend.schemes()[0]);
        let table = readme
            .split("\n### ")
            .find(|part| part.lines().next().is_some_and(|h| h.contains(&section)))
            .unwrap_or_else(|| panic!("README has no `### …{section}…` section"));
        for p in s.known {
            assert!(
                table.contains(&format!("| `{p}` |")),
                "README {section}: no row for `{p}`"
            );
        }
    }
}
