//! The shared URL grammar and [`Secret`].

use std::time::Duration;

use super::*;
use crate::ErrorKind;

const KNOWN: &[&str] = &[
    "flag",
    "cache_size",
    "timeout",
    "timeout_ms",
    "ttl_s",
    "n",
    "name",
];

fn q(query: &str) -> Query {
    Query::parse(Backend::S3, query, KNOWN).unwrap()
}

fn err(query: &str) -> String {
    let e = Query::parse(Backend::S3, query, KNOWN).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{query}");
    e.message().to_owned()
}

#[test]
fn booleans() {
    for (v, want) in [
        ("true", true),
        ("TRUE", true),
        ("yes", true),
        ("On", true),
        ("1", true),
        ("false", false),
        ("no", false),
        ("off", false),
        ("0", false),
    ] {
        assert_eq!(
            q(&format!("flag={v}")).bool("flag").unwrap(),
            Some(want),
            "{v}"
        );
    }
    assert_eq!(q("").bool("flag").unwrap(), None);
    for v in ["", "maybe", "2", "t", "y"] {
        let e = q(&format!("flag={v}")).bool("flag").unwrap_err();
        assert_eq!(
            e.message(),
            "s3 URL parameter `flag` must be a boolean: true/false, yes/no, on/off or 1/0"
        );
    }
}

#[test]
fn sizes() {
    for (v, want) in [
        ("0", 0),
        ("1048576", 1 << 20),
        ("512B", 512),
        ("4k", 4 << 10),
        ("4KiB", 4 << 10),
        ("64MiB", 64 << 20),
        ("64m", 64 << 20),
        ("2GiB", 2 << 30),
        ("1TiB", 1 << 40),
    ] {
        assert_eq!(
            q(&format!("cache_size={v}")).size("cache_size").unwrap(),
            Some(want),
            "{v}"
        );
    }
    for v in [
        "",
        "lots",
        "-1",
        "1.5MiB",
        "64MB",
        "64 MiB",
        "99999999999GiB",
        "MiB",
    ] {
        let e = q(&format!("cache_size={}", v.replace(' ', "+")))
            .size("cache_size")
            .unwrap_err();
        assert!(
            e.message().contains("`cache_size` must be a size in bytes"),
            "{v}: {e}"
        );
    }
}

#[test]
fn durations() {
    let d = |query: &str, name: &str| q(query).duration(name);
    assert_eq!(
        d("timeout=500ms", "timeout").unwrap(),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        d("timeout=30s", "timeout").unwrap(),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        d("timeout=5m", "timeout").unwrap(),
        Some(Duration::from_secs(300))
    );
    assert_eq!(
        d("timeout=2H", "timeout").unwrap(),
        Some(Duration::from_secs(7200))
    );
    // A bare number takes the unit of the name.
    assert_eq!(
        d("timeout_ms=150", "timeout_ms").unwrap(),
        Some(Duration::from_millis(150))
    );
    assert_eq!(
        d("timeout_ms=2s", "timeout_ms").unwrap(),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        d("ttl_s=60", "ttl_s").unwrap(),
        Some(Duration::from_secs(60))
    );
    let e = d("timeout=30", "timeout").unwrap_err();
    assert_eq!(
        e.message(),
        "s3 URL parameter `timeout` must be a duration: a whole number with a unit ms, s, m or h (like 500ms, 30s or 5m)"
    );
    for v in ["", "abc", "-1s", "1.5s", "3d", "s"] {
        let e = d(&format!("timeout_ms={v}"), "timeout_ms").unwrap_err();
        assert!(
            e.message().ends_with("or a bare number of milliseconds"),
            "{v}: {e}"
        );
    }
}

#[test]
fn numbers_and_strings() {
    assert_eq!(q("n=7").number::<u32>("n").unwrap(), Some(7));
    for v in ["", "-1", "+1", "x", "4294967296"] {
        assert!(
            q(&format!("n={}", v.replace('+', "%2B")))
                .number::<u32>("n")
                .is_err(),
            "{v}"
        );
    }
    let query = q("name=a+b%2Fc%40d&flag=1");
    assert_eq!(query.str("name"), Some("a b/c@d"));
    assert_eq!(query.names().collect::<Vec<_>>(), ["name", "flag"]);
    assert_eq!(query.secret("name").unwrap().expose(), "a b/c@d");
}

#[test]
fn duplicates_unknowns_and_bad_encoding_are_refused() {
    assert_eq!(
        err("flag=1&flag=1"),
        "s3 URL parameter `flag` is given twice"
    );
    assert_eq!(
        err("flg=1"),
        "unknown s3 URL parameter `flg`; known: flag, cache_size, timeout, timeout_ms, ttl_s, n, name"
    );
    assert_eq!(
        err("name=%zz"),
        "s3 URL parameter `name` is not valid percent-encoded UTF-8"
    );
    assert_eq!(
        err("name=%ff"),
        "s3 URL parameter `name` is not valid percent-encoded UTF-8"
    );
    assert_eq!(
        err("name=%4"),
        "s3 URL parameter `name` is not valid percent-encoded UTF-8"
    );
    assert_eq!(
        err("name=%+1"),
        "s3 URL parameter `name` is not valid percent-encoded UTF-8"
    );
    assert!(err("fl%zzag=1").contains("parameter name is not valid"));
    // Empty segments are nothing.
    assert_eq!(q("&&flag=1&").bool("flag").unwrap(), Some(true));
}

#[test]
fn urls_are_taken_apart_with_their_scheme_checked() {
    let u = StoreUrl::parse(
        "REDISS://bob:s%40cret@h1:1,h2:2/3?flag=on",
        Backend::Redis,
        KNOWN,
    )
    .unwrap();
    assert_eq!(u.scheme(), "rediss");
    assert_eq!(u.user(), Some("bob"));
    assert_eq!(u.password().unwrap().expose(), "s@cret");
    assert_eq!((u.authority(), u.path()), ("h1:1,h2:2", "/3"));
    assert_eq!(u.query().bool("flag").unwrap(), Some(true));
    assert!(!format!("{u:?}").contains("cret"));
    let u = StoreUrl::parse("rocksdb:///var/afk%20db", Backend::RocksDb, KNOWN).unwrap();
    assert_eq!((u.authority(), u.path()), ("", "/var/afk db"));
    assert!(!u.has_credentials());

    let e = |url: &str, b: Backend| {
        let e = StoreUrl::parse(url, b, KNOWN).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}");
        e.message().to_owned()
    };
    assert_eq!(
        e("s3://b?secret=zz", Backend::Redis),
        "store URL `s3://b?secret=***` is not a redis URL (expected redis://, rediss://, redis+cluster://, rediss+cluster://)"
    );
    assert_eq!(
        e("/var/afk", Backend::RocksDb),
        "store URL `/var/afk` is not a rocksdb URL (expected rocksdb://)"
    );
    assert!(e("s3://b/p#x", Backend::S3).contains("must not have a fragment"));
    assert!(e("rocksdb:///a%zz", Backend::RocksDb).contains("the path is not valid"));
    let m = e("redis://u:hunter%zz2@h", Backend::Redis);
    assert!(
        m.contains("credentials are not valid") && !m.contains("hunter"),
        "{m}"
    );
}

#[test]
fn the_scheme_table() {
    assert_eq!(
        Backend::of_url("Rediss+Cluster://h").unwrap(),
        Backend::Redis
    );
    assert_eq!(Backend::of_url(" memory://x").unwrap(), Backend::Memory);
    assert_eq!(Backend::from_scheme("s3"), Some(Backend::S3));
    assert_eq!(Backend::RocksDb.feature(), Some("rocksdb"));
    let e = Backend::of_url("ftp://u:pw@h").unwrap_err();
    assert_eq!(
        e.message(),
        "store URL `ftp://u:***@h` has an unknown scheme `ftp://`; expected one of memory://, \
         rocksdb://, redis://, rediss://, redis+cluster://, rediss+cluster://, s3://"
    );
    assert!(
        Backend::of_url("localhost:6379")
            .unwrap_err()
            .message()
            .contains("has no scheme")
    );
}

#[test]
fn no_secret_is_printable() {
    #[derive(serde::Serialize, serde::Deserialize, Debug)]
    struct Config {
        password: Secret,
        token: Option<Secret>,
    }
    let c = Config {
        password: Secret::new("hunter2-pw"),
        token: Some("tok-3n".into()),
    };
    let json = serde_json::to_string(&c).unwrap();
    for shown in [
        format!("{c:?}"),
        format!("{} {}", c.password, c.password),
        json.clone(),
    ] {
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok-3n"),
            "{shown}"
        );
    }
    assert_eq!(json, r#"{"password":"***","token":"***"}"#);
    let back = serde_json::from_str::<Config>(&json).unwrap_err();
    assert!(back.to_string().contains("redacted"), "{back}");
    let hand: Config = serde_json::from_str(r#"{"password": "pw", "token": null}"#).unwrap();
    assert_eq!(hand.password.expose(), "pw");
}
