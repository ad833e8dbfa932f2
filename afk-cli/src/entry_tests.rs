//! `runs` and `show` on a store with the index of runs that need attention (the memory store:
//! no store the binary opens in another process keeps the index yet, so these run in process).
//! A completed run, a run held by a runner that died (lease expired), a run paused for
//! approval and a run suspended by a model outage, each shown with its entry; only unfinished
//! runs' entries are read, and a store without the index shows nothing of them.

use std::sync::Arc;
use std::time::Duration;

use afk_core::runner::scripted::{InvocationCounter, ScriptedTool};
use afk_core::runner::{Agent, GateDecision, LlmClient, LlmRequest, Outcome, Runner, ToolGate};
use afk_core::schema::{LlmResponse, ToolCall};
use afk_core::store::{Call, Capabilities, HookStore, Hooks, Store};
use afk_core::testkit::{START_MS, deterministic_config};
use afk_core::{Error, MemoryStore, RunId, ThreadId};
use serde_json::json;

/// A model that answers, asks for a tool, hangs, or is down.
#[derive(Debug, Clone, Copy)]
enum Model {
    Answer,
    AskTool,
    Hang,
    Down,
}

#[async_trait::async_trait]
impl LlmClient for Model {
    fn provider(&self) -> String {
        "rules".to_owned()
    }
    async fn complete(&self, _: LlmRequest) -> afk_core::Result<LlmResponse> {
        let r = match self {
            Model::Answer => json!({"text": "done", "finish_reason": "stop"}),
            Model::AskTool => json!({"tool_calls": [{"id": "c1", "tool_name": "echo",
                "arguments": {"text": "x"}}], "finish_reason": "tool_calls"}),
            Model::Hang => std::future::pending().await,
            Model::Down => return Err(Error::unavailable("HTTP 503")),
        };
        Ok(serde_json::from_value(r).expect("a well-formed response"))
    }
}

/// Asks a human about every call.
#[derive(Debug)]
struct AskAll;

impl ToolGate for AskAll {
    fn decide(&self, _: u64, _: &ToolCall) -> GateDecision {
        GateDecision::RequestApproval("a human looks first".into())
    }
}

fn agent(model: Model) -> Agent {
    Agent::new("helpdesk", "", "m", Arc::new(model))
        .with_tool(ScriptedTool::echo(InvocationCounter::new()))
        .with_gate(Arc::new(AskAll))
}

/// The store: runs `a_done`, `b_held` (its runner `worker-a` died in a model call), `c_asks`
/// (paused) and `d_down` (suspended), all written at [`START_MS`] with 30 s leases.
async fn store() -> (Arc<MemoryStore>, ThreadId) {
    let store = Arc::new(MemoryStore::new());
    let runner = Runner::new(store.clone(), deterministic_config().with_owner("worker-a"));
    let t = ThreadId::new("t").unwrap();
    let id = |s: &str| RunId::new(s).unwrap();
    for (run, model) in [
        ("a_done", Model::Answer),
        ("c_asks", Model::AskTool),
        ("d_down", Model::Down),
    ] {
        let out = runner.run_with_id(&agent(model), &t, id(run), "hi");
        assert!(
            matches!(
                out.result().await,
                Ok(Outcome::Completed(_) | Outcome::Paused { .. } | Outcome::Suspended { .. })
            ),
            "{run}"
        );
    }
    let held = runner.run_with_id(&agent(Model::Hang), &t, id("b_held"), "hi");
    for _ in 0..2000 {
        if store.attention(&t, &id("b_held")).await.unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    held.abort_handle().unwrap().abort(); // as a killed process stops
    let _ = held.result().await;
    (store, t)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn runs_shows_each_unfinished_runs_entry_owner_and_lease() {
    rt().block_on(async {
        let (store, t) = store().await;
        let now = START_MS + 40_000;
        let r = crate::runs::report_page(store.as_ref(), &t, now, None)
            .await
            .unwrap();
        let lines: Vec<&str> = r.human.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().skip(5).collect::<Vec<_>>(),
            ["LAST_ACTIVITY", "ENTRY", "OWNER", "LEASE", "NOTE"],
            "{}",
            r.human
        );
        let row = |run: &str| *lines.iter().find(|l| l.starts_with(run)).unwrap();
        let cells = |run: &str| row(run).split_whitespace().skip(6).collect::<Vec<_>>();
        assert_eq!(cells("a_done")[..3], ["-", "-", "-"], "{}", r.human);
        assert_eq!(
            cells("b_held")[..5],
            ["running", "worker-a", "expired", "10s", "ago"],
            "{}",
            r.human
        );
        assert!(
            row("b_held").ends_with("a worker takes it over"),
            "{}",
            r.human
        );
        assert_eq!(
            cells("c_asks")[..3],
            ["paused", "(worker-a)", "-"],
            "{}",
            r.human
        );
        assert!(
            row("c_asks").ends_with("waiting for a human: a decision (`afk decide`)"),
            "{}",
            r.human
        );
        assert_eq!(
            cells("d_down")[..2],
            ["suspended", "(worker-a)"],
            "{}",
            r.human
        );
        assert!(row("d_down").ends_with("suspended, due now: a worker resumes it"));

        let runs = &r.json["runs"];
        assert!(runs[0].get("attention").is_none(), "{}", r.json);
        let held = &runs[1]["attention"];
        assert_eq!(held["state"], "running");
        assert_eq!(held["owner"], "worker-a");
        assert_eq!(held["lease_until_ms"], START_MS + 30_000);
        assert_eq!(held["lease_until"], crate::output::utc(START_MS + 30_000));
        assert_eq!(held["lease_remaining_ms"], -10_000);
        assert_eq!(held["agent"], "helpdesk");
        assert_eq!(runs[2]["attention"]["waiting_for_human"], "decision");
        assert_eq!(runs[3]["attention"]["state"], "suspended");
        assert!(runs[3]["attention"]["not_before_ms"].as_u64() > Some(START_MS));
        // The fields that were there before stay as they were.
        assert_eq!(runs[1]["state"], "in_progress");
        assert_eq!(runs[2]["state"], "paused");
        println!("{}", r.human);
    });
}

#[test]
fn show_adds_the_entry_lines_and_field() {
    rt().block_on(async {
        let (store, t) = store().await;
        let run = |s: &str| RunId::new(s).unwrap();
        let now = START_MS + 12_000;
        let held = crate::show::report(store.as_ref(), &t, &run("b_held"), now)
            .await
            .unwrap();
        let want = format!(
            "entry:    running, owner worker-a, lease 18s left ({}), epoch ",
            crate::output::utc(START_MS + 30_000)
        );
        assert!(held.human.contains(&want), "{}", held.human);
        assert_eq!(held.json["attention"]["lease_remaining_ms"], 18_000);
        let asks = crate::show::report(store.as_ref(), &t, &run("c_asks"), now)
            .await
            .unwrap();
        assert!(
            asks.human
                .contains("\n          waiting for a human: a decision (`afk decide`)\n"),
            "{}",
            asks.human
        );
        let down = crate::show::report(store.as_ref(), &t, &run("d_down"), now)
            .await
            .unwrap();
        let until = crate::output::utc(START_MS + 30_000);
        assert!(
            down.human.contains(&format!(
                "\n          suspended until {until} (in 18s): then a worker resumes it\n"
            )),
            "{}",
            down.human
        );
        assert_eq!(down.json["attention"]["not_before"], until);
        let done = crate::show::report(store.as_ref(), &t, &run("a_done"), now)
            .await
            .unwrap();
        assert!(!done.human.contains("entry:"), "{}", done.human);
        assert!(done.json.get("attention").is_none(), "{}", done.json);
        println!("{}\n{}", held.human, asks.human);
    });
}

/// Counts the index reads; reports the index off when `index` is false.
#[derive(Debug, Default)]
struct Reads {
    index: bool,
    attention: std::sync::Mutex<Vec<String>>,
    listings: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Hooks for Reads {
    type Note = ();
    fn capabilities(&self, mut inner: Capabilities) -> Capabilities {
        inner.attention &= self.index;
        inner
    }
    async fn before(&self, call: Call<'_>) -> afk_core::Result<()> {
        match call {
            Call::Attention { run, .. } => self.attention.lock().unwrap().push(run.to_string()),
            Call::ListAttention { .. } => {
                self.listings
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn runs_reads_the_entries_of_unfinished_runs_only_and_none_without_the_index() {
    rt().block_on(async {
        let (store, t) = store().await;
        let now = START_MS + 40_000;
        let with = HookStore::new(
            store.clone() as Arc<dyn Store>,
            Reads {
                index: true,
                ..Reads::default()
            },
        );
        let r = crate::runs::report_page(&with, &t, now, None)
            .await
            .unwrap();
        assert!(r.human.contains("ENTRY"), "{}", r.human);
        let read = with.hooks().attention.lock().unwrap().clone();
        assert_eq!(read, ["b_held", "c_asks", "d_down"]);
        assert_eq!(
            with.hooks()
                .listings
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );

        // The same runs and entries, on a store that says it keeps no index.
        let without = HookStore::new(store as Arc<dyn Store>, Reads::default());
        let r = crate::runs::report_page(&without, &t, now, None)
            .await
            .unwrap();
        assert!(without.hooks().attention.lock().unwrap().is_empty());
        assert_eq!(
            r.human
                .lines()
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            [
                "RUN",
                "STATE",
                "STEP",
                "PHASE",
                "VERSION",
                "LAST_ACTIVITY",
                "NOTE"
            ]
        );
        assert!(r.json["runs"][1].get("attention").is_none(), "{}", r.json);
        let run = RunId::new("c_asks").unwrap();
        let show = crate::show::report(&without, &t, &run, now).await.unwrap();
        assert!(!show.human.contains("entry:"), "{}", show.human);
        assert!(show.json.get("attention").is_none(), "{}", show.json);
    });
}
