//! A service killed while both of its runs are inside a tool call, then started again under
//! the same worker id, finishes both runs without anyone calling `resume`.
//!
//! In process, on the memory store: the kill is the first runtime shut down in the background
//! (every task stops where it is, as in a process killed with SIGKILL), and the restart a new
//! runtime serving the same store. No store that a second process can open keeps the index of
//! runs that need attention on this branch yet; `process.rs` does the same with the binary
//! once RocksDB keeps it.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;
use std::time::Duration;

use afk::schema::{MarkState, PhasePayload, RunMark};
use afk::store::{Store, StoreExt};
use afk::{MemoryStore, RunId, ThreadId};
use fleet_service::{agent, serve};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

/// Catches a hang; measures nothing.
const NO_HANG: Duration = Duration::from_secs(30);

/// Wait until `ok` holds, polling the store.
async fn until<F: AsyncFn() -> bool>(what: &str, ok: F) {
    let deadline = tokio::time::Instant::now() + NO_HANG;
    while !ok().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The one run of `thread`, once it has one.
async fn run_of(store: &dyn Store, thread: &ThreadId) -> Option<RunId> {
    store.list_runs(thread).await.unwrap().into_iter().next()
}

/// Whether the run of `thread` has an effect intent (its tool call started).
async fn in_tool(store: &dyn Store, thread: &ThreadId) -> bool {
    let Some(run) = run_of(store, thread).await else {
        return false;
    };
    let effects = afk::keys::effect_prefix(&run);
    !store.list_all(thread, &effects).await.unwrap().is_empty()
}

/// The run's final text, once its latest record is terminal.
async fn final_text(store: &dyn Store, thread: &ThreadId) -> Option<String> {
    let run = run_of(store, thread).await?;
    let rec = afk::verify::latest_record(store, thread, &run)
        .await
        .unwrap()?;
    match rec.payload {
        PhasePayload::RunTerminal(p) => p.terminal_result.map(|r| r.final_text),
        _ => None,
    }
}

#[test]
fn a_service_killed_mid_tool_and_restarted_under_its_id_finishes_both_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let threads = [
        ThreadId::new("user-1").unwrap(),
        ThreadId::new("user-2").unwrap(),
    ];

    // First incarnation: its tool takes a minute, so both runs are inside it when it dies.
    let first = Runtime::new().unwrap();
    let (requests, rx) = mpsc::channel(8);
    let slow = agent(Duration::from_secs(60));
    first.spawn(serve(store.clone(), "w1", slow, rx, std::future::pending()));
    requests
        .blocking_send((threads[0].clone(), "count these four words".into()))
        .unwrap();
    requests
        .blocking_send((threads[1].clone(), "and these three".into()))
        .unwrap();
    first.block_on(until("both runs inside the tool", async || {
        in_tool(&*store, &threads[0]).await && in_tool(&*store, &threads[1]).await
    }));
    first.shutdown_background();
    drop(requests);

    // Both entries still say running under w1's lease, which has not expired.
    let check = Runtime::new().unwrap();
    for t in &threads {
        let run = check.block_on(run_of(&*store, t)).unwrap();
        let bytes = check.block_on(store.attention(t, &run)).unwrap().unwrap();
        let mark = RunMark::decode(&bytes).unwrap();
        assert_eq!(mark.state, MarkState::Running, "{mark:?}");
        assert_eq!(mark.owner.as_deref(), Some("w1"), "{mark:?}");
    }

    // Second incarnation, the same worker id, no new request: its worker takes both back.
    let second = Runtime::new().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (_requests, rx) = mpsc::channel(1);
    let fast = agent(Duration::ZERO);
    let served = second.spawn(serve(store.clone(), "w1", fast, rx, async {
        let _ = stopped.await;
    }));
    second.block_on(until("both runs completed", async || {
        final_text(&*store, &threads[0]).await.is_some()
            && final_text(&*store, &threads[1]).await.is_some()
    }));
    let texts = second.block_on(async {
        [
            final_text(&*store, &threads[0]).await.unwrap(),
            final_text(&*store, &threads[1]).await.unwrap(),
        ]
    });
    assert_eq!(
        texts,
        ["Your request has 4 words.", "Your request has 3 words."]
    );
    stop.send(()).unwrap();
    let stats = second.block_on(served).unwrap();
    // Taken back at its first look as its own, not after the 30 s lease expired.
    assert_eq!(
        (stats.resumed, stats.completed, stats.taken_over),
        (2, 2, 0),
        "{stats:?}"
    );
    for t in &threads {
        let run = check.block_on(run_of(&*store, t)).unwrap();
        assert_eq!(check.block_on(store.attention(t, &run)).unwrap(), None);
    }
}
