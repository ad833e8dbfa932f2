//! `afk_core::migrate::migrate_run` on real stores: an AFK Python v1 run migrated to v2 resumes
//! to the same result as the v1 run; migrating again is a no-op; a migration stopped after any
//! of its commits (the store goes down, as in a crash) is finished by running it again, to
//! the same result; a migration that a resume overtakes keeps the resumed run's pointer. RocksDB always; Redis and S3 with the features `redis`, `s3` and their
//! servers (`AFK_TEST_REDIS_URL`, `AFK_TEST_S3_ENDPOINT`; skipped with a printed line when not
//! set, unless `AFK_REQUIRE_INTEGRATION=1`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::PathBuf;
use std::sync::Arc;

use afk::fixture::load_state;
use afk::migrate::migrate_run;
use afk::runner::fixture_check::{resume_fixture, scripted_tools};
use afk::schema::SCHEMA_VERSION_V1;
use afk::store::{CrashMode, FaultStore, Op, Store, StoreExt};
use afk::verify::verify_run;
use afk::{ErrorKind, RunId, ThreadId};
use serde_json::{Value, json};

/// Fixtures of v1 runs with several records (one crashed once, one twice).
const FIXTURES: [&str; 2] = ["b-crash-k42-s3-pre_llm", "a-double-crash-k15-k13"];

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/afk-python")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn run_of(fx: &Value) -> RunId {
    RunId::new(fx["run_id"].as_str().unwrap()).unwrap()
}

/// Resume the fixture's run in `thread` with the fixture's script: what the run returned and
/// what the resume executed (`FixtureResume::summary`); it must complete.
async fn resume(store: Arc<dyn Store>, thread: &ThreadId, fx: &Value) -> Value {
    let summary = resume_fixture(fx, store, thread, &scripted_tools())
        .await
        .unwrap()
        .summary();
    assert_eq!(summary["outcome"], "completed", "{summary}");
    summary
}

/// How many checkpoint records of the run are still v1.
async fn v1_records(store: &dyn Store, thread: &ThreadId, run: &RunId) -> usize {
    let mut n = 0;
    for key in store
        .list_all(thread, &format!("checkpoint:{run}:"))
        .await
        .unwrap()
    {
        let bytes = store.get(thread, &key).await.unwrap().unwrap();
        let rec = afk::normalize::normalize_record(&bytes, thread, &key).unwrap();
        n += usize::from(rec.schema_version == SCHEMA_VERSION_V1);
    }
    n
}

/// A fresh store with a name of its own: `open(tag)` must give an empty namespace each call.
type Open<'a> = &'a dyn Fn(&str) -> Arc<dyn Store>;

/// Every check of this file on one backend.
async fn migration_on(open: Open<'_>) {
    for name in FIXTURES {
        let fx = fixture(name);
        let state = fx["state"].as_object().unwrap();
        let thread = ThreadId::new("fx").unwrap();
        let run = run_of(&fx);

        // The v1 run as AFK Python left it, resumed: the result to match.
        let v1 = open(&format!("{name}-v1"));
        load_state(v1.as_ref(), &thread, state).await.unwrap();
        let want = resume(v1, &thread, &fx).await;

        // A clean migration, counted through a fault store with no faults.
        let clean_store = open(&format!("{name}-clean"));
        load_state(clean_store.as_ref(), &thread, state)
            .await
            .unwrap();
        let counted = Arc::new(FaultStore::from_arc(clean_store.clone()));
        let dry = migrate_run(counted.as_ref(), &thread, &run, true)
            .await
            .unwrap();
        assert!(!dry.written && dry.records > 0, "{name}: dry run {dry:?}");
        assert_eq!(counted.persisted_commits(), 0, "{name}: a dry run wrote");
        let done = migrate_run(counted.as_ref(), &thread, &run, false)
            .await
            .unwrap();
        assert_eq!((done.records, done.written), (dry.records, true), "{name}");
        assert!(done.log_entries >= 1, "{name}: no log written: {done:?}");
        let commits = counted.persisted_commits();
        assert_eq!(v1_records(clean_store.as_ref(), &thread, &run).await, 0);
        let again = migrate_run(clean_store.as_ref(), &thread, &run, false)
            .await
            .unwrap();
        assert!(
            again.is_noop() && !again.written,
            "{name}: second run {again:?}"
        );
        let clean_verify = verify_run(clean_store.as_ref(), &thread, &run)
            .await
            .unwrap();
        assert_eq!(
            resume(clean_store, &thread, &fx).await,
            want,
            "{name}: clean"
        );

        // A resume moves the run on (to its end) while the migration, having read it, waits
        // to claim it: the migration reads again under its claim, so it keeps the finished
        // run's pointer and a later resume runs nothing.
        let raced = open(&format!("{name}-race"));
        load_state(raced.as_ref(), &thread, state).await.unwrap();
        let held = Arc::new(FaultStore::from_arc(raced.clone()));
        let claim = held.hold_nth(Op::Claim, 1);
        let migration = tokio::spawn({
            let (held, thread, run) = (held.clone(), thread.clone(), run.clone());
            async move { migrate_run(held.as_ref(), &thread, &run, false).await }
        });
        tokio::time::timeout(std::time::Duration::from_secs(60), claim.reached())
            .await
            .expect("the migration never claimed");
        assert_eq!(
            resume(raced.clone(), &thread, &fx).await,
            want,
            "{name}: raced"
        );
        claim.release();
        let raced_done = migration.await.unwrap().unwrap();
        assert!(raced_done.written, "{name}: raced migration {raced_done:?}");
        assert_eq!(v1_records(raced.as_ref(), &thread, &run).await, 0);
        let after = resume(raced, &thread, &fx).await;
        assert_eq!(
            after["result"], want["result"],
            "{name}: after the raced migration"
        );
        assert_eq!(
            (&after["resume_llm_calls"], &after["resume_tool_executions"]),
            (&json!(0), &json!({})),
            "{name}: the raced migration moved the finished run's pointer back: {after}"
        );

        // Stopped after each of its commits, then run again.
        assert!(commits >= 2, "{name}: {commits} commits");
        for k in 0..commits {
            let store = open(&format!("{name}-crash-{k}"));
            load_state(store.as_ref(), &thread, state).await.unwrap();
            let crashing = FaultStore::from_arc(store.clone());
            crashing.crash_after_commits(k, CrashMode::Down);
            let err = migrate_run(&crashing, &thread, &run, false)
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{name} k={k}: {err}");
            let rest = migrate_run(store.as_ref(), &thread, &run, false)
                .await
                .unwrap();
            assert!(rest.written && !rest.is_noop(), "{name} k={k}: {rest:?}");
            assert_eq!(v1_records(store.as_ref(), &thread, &run).await, 0);
            let third = migrate_run(store.as_ref(), &thread, &run, false)
                .await
                .unwrap();
            assert!(third.is_noop(), "{name} k={k}: {third:?}");
            let report = verify_run(store.as_ref(), &thread, &run).await.unwrap();
            assert_eq!(
                report.is_clean(),
                clean_verify.is_clean(),
                "{name} k={k}: {report:?}"
            );
            assert_eq!(resume(store, &thread, &fx).await, want, "{name} k={k}");
        }
    }
}

#[tokio::test]
async fn migration_on_rocksdb_resumes_alike_and_finishes_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    migration_on(&move |tag| {
        let url = format!("rocksdb://{}", root.join(tag).display());
        Arc::new(afk::backend::rocksdb::RocksDbStore::from_url(&url).unwrap()) as Arc<dyn Store>
    })
    .await;
}

#[cfg(any(feature = "redis", feature = "s3"))]
use afk_core::testkit::require_env;

#[cfg(any(feature = "redis", feature = "s3"))]
fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Opens `url` from inside a sync closure running on the test's runtime.
#[cfg(any(feature = "redis", feature = "s3"))]
fn open_blocking(url: String) -> Arc<dyn Store> {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async { afk::open(&url).await.unwrap() })
    })
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_on_redis_resumes_alike_and_finishes_after_a_crash() {
    let Some(url) = require_env("AFK_TEST_REDIS_URL") else {
        return;
    };
    let base = unique();
    let sep = if url.contains('?') { '&' } else { '?' };
    migration_on(&move |tag| {
        let prefix = format!("afk-migrate-{base}-{tag}");
        open_blocking(format!("{url}{sep}prefix={prefix}"))
    })
    .await;
}

#[cfg(feature = "s3")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_on_s3_resumes_alike_and_finishes_after_a_crash() {
    let Some(endpoint) = require_env("AFK_TEST_S3_ENDPOINT") else {
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap_or_default();
    let (region, key, secret) = (
        var("AFK_TEST_S3_REGION"),
        var("AFK_TEST_S3_ACCESS_KEY_ID"),
        var("AFK_TEST_S3_SECRET_ACCESS_KEY"),
    );
    let bucket = format!("afk-migrate-{}", unique());
    migration_on(&move |tag| {
        open_blocking(format!(
            "s3://{bucket}/{tag}?endpoint={endpoint}&region={region}&force_path_style=true\
             &access_key_id={key}&secret_access_key={secret}&create_bucket=true"
        ))
    })
    .await;
}
