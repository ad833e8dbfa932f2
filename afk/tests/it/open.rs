//! `afk::open`: scheme dispatch and its errors.

use afk::ErrorKind;

#[tokio::test]
async fn unknown_schemes_and_missing_schemes_are_invalid_config_without_the_password() {
    for url in [
        "ftp://user:hunter2@host/x",
        "user:hunter2@host",
        "redis//user:hunter2@h",
    ] {
        let e = afk::open(url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
        assert!(!e.to_string().contains("hunter2"), "{url}: {e}");
        assert!(!format!("{e:?}").contains("hunter2"), "{url}: {e:?}");
    }
    let e = afk::open("ftp://h/x").await.unwrap_err();
    assert!(
        e.message().contains("ftp") && e.message().contains("rocksdb://"),
        "{e}"
    );
}

#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn a_scheme_whose_feature_is_off_names_the_feature() {
    for url in [
        "redis://:hunter2@127.0.0.1:1",
        "rediss+cluster://h:1",
        "redis+cluster://h",
    ] {
        let e = afk::open(url).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{url}: {e}");
        assert!(e.message().contains("`redis` Cargo feature"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}

#[cfg(not(feature = "s3"))]
#[tokio::test]
async fn s3_without_its_feature_is_unsupported() {
    let e = afk::open("s3://bucket/prefix").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("`s3` Cargo feature"), "{e}");
}

#[tokio::test]
async fn memory_and_rocksdb_open() {
    let m = afk::open("memory://open-test").await.unwrap();
    assert_eq!(m.capabilities().name, "memory");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("rocksdb://{}", dir.path().join("db").display());
    let r = afk::open(&url).await.unwrap();
    assert_eq!(r.capabilities().name, "rocksdb");
    let e = afk::open("rocksdb://no-path").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
}

/// `open_existing` refuses a RocksDB path with no database and creates nothing there; once a
/// store exists it opens it, and `create=false` in a URL given to `open` refuses the same way.
#[tokio::test]
async fn open_existing_refuses_a_rocksdb_path_without_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo");
    let url = format!("rocksdb://{}", path.display());
    let e = afk::open_existing(&url).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.message().contains("no RocksDB database"), "{e}");
    assert!(!path.exists(), "open_existing created {}", path.display());
    let e = afk::open(&format!("{url}?create=false")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(!path.exists());

    drop(afk::open(&url).await.unwrap());
    let s = afk::open_existing(&url).await.unwrap();
    assert_eq!(s.capabilities().name, "rocksdb");
    let m = afk::open_existing("memory://open-existing-test")
        .await
        .unwrap();
    assert_eq!(m.capabilities().name, "memory");
}
