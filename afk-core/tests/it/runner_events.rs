//! The event stream of a run: a listener gets every event, in order, also after the handle is
//! awaited; a run nobody listens to (its handle only awaited) gives the same result.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm, ScriptedTool};
use afk_core::runner::{Agent, Outcome, RunEvent, Runner, RunnerConfig};
use afk_core::schema::{LlmResponse, RunStatus};
use afk_core::{MemoryStore, RunId, ThreadId};
use serde_json::{Value, json};

fn r(v: Value) -> LlmResponse {
    serde_json::from_value(v).expect("response")
}

fn agent() -> Agent {
    let llm = ScriptedLlm::new(vec![
        r(json!({"text": "adding", "tool_calls": [
            {"id": "c1", "tool_name": "add", "arguments": {"a": 1, "b": 2}}]})),
        r(json!({"text": "done", "tool_calls": []})),
    ]);
    Agent::new("a", "", "m", llm).with_tool(ScriptedTool::add(InvocationCounter::new()))
}

#[tokio::test]
async fn a_listener_gets_every_event_in_order_and_an_unheard_run_ends_alike() {
    let runner = Runner::new(Arc::new(MemoryStore::new()), RunnerConfig::default());
    let thread = ThreadId::new("t_events").unwrap();
    let mut handle = runner.run_with_id(&agent(), &thread, RunId::new("run_heard").unwrap(), "go");
    let mut events = handle.events().expect("the first call gets the stream");
    assert!(handle.events().is_none(), "only the first call gets it");
    let heard = handle.result().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(ev) = events.try_recv() {
        seen.push(ev);
    }
    assert_eq!(
        seen,
        [
            RunEvent::RunStarted {
                run_id: "run_heard".into(),
                resumed: false
            },
            RunEvent::StepStarted { step: 1 },
            RunEvent::LlmCompleted {
                step: 1,
                tool_calls: 1
            },
            RunEvent::ToolCompleted {
                step: 1,
                tool_call_id: "c1".into(),
                success: true,
                replayed: false
            },
            RunEvent::StepStarted { step: 2 },
            RunEvent::LlmCompleted {
                step: 2,
                tool_calls: 0
            },
            RunEvent::Finished {
                state: RunStatus::Completed
            },
        ]
    );

    let unheard = runner
        .run_with_id(&agent(), &thread, RunId::new("run_unheard").unwrap(), "go")
        .result()
        .await
        .unwrap();
    let (Outcome::Completed(heard), Outcome::Completed(unheard)) = (heard, unheard) else {
        panic!("both runs complete");
    };
    assert_eq!(heard.final_text, "done");
    assert_eq!(unheard.final_text, heard.final_text);
    let calls = |r: &afk_core::schema::AgentResult| -> Vec<(Option<String>, bool, Value)> {
        r.tool_executions
            .iter()
            .map(|t| (t.tool_call_id.clone(), t.success, t.output.clone()))
            .collect()
    };
    assert_eq!(calls(&unheard), calls(&heard));
    assert_eq!(
        calls(&heard),
        [(Some("c1".into()), true, json!({"result": 3}))]
    );
}
