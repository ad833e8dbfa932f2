//! The runner's spans in OpenTelemetry's GenAI terms, across crashes: every model call and
//! every tool execution that really happened is one fresh span, with its usage; what a resume
//! replays from the store is a span marked `afk.replayed` without usage, never a fresh one.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::runner::{LlmClient, Outcome};
use afk_core::store::{CrashMode, FaultStore, Store};
use afk_core::{MemoryStore, RunId, ThreadId};
use common::{add_script, agent_with, limits_for, resume_or_start};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const STEPS: u64 = 3;

/// A span as a collector saw it: its name and every field, at creation and recorded later.
#[derive(Debug, Clone)]
struct Captured {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    fn replayed(&self) -> bool {
        self.field("afk.replayed") == Some("true")
    }
}

/// Every span created while it is the subscriber, in creation order.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Captured>>>);

impl Spans {
    fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Where a span's entry is in the list.
struct Index(usize);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut all = self.0.lock().unwrap();
        all.push(Captured {
            name: attrs.metadata().name(),
            fields,
        });
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Index(all.len() - 1));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(Index(i)) = span.extensions().get::<Index>().map(|i| Index(i.0)) else {
            return;
        };
        if let Some(c) = self.0.lock().unwrap().get_mut(i) {
            values.record(&mut Fields(&mut c.fields));
        }
    }
}

/// What the spans of one process's runs said, counted.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    fresh_chats: u64,
    replayed_chats: u64,
    fresh_tools: u64,
    replayed_tools: u64,
    /// Runs whose `invoke_agent` span has an `error.type`.
    failed_runs: u64,
}

fn tally(spans: &[Captured], provider: &str) -> Tally {
    let mut t = Tally::default();
    for s in spans {
        match s.field("gen_ai.operation.name") {
            Some("chat") => {
                assert_eq!(s.name, "chat");
                assert_eq!(s.field("otel.name"), Some("chat m1"), "{s:?}");
                assert_eq!(s.field("otel.kind"), Some("client"), "{s:?}");
                assert_eq!(s.field("gen_ai.provider.name"), Some(provider), "{s:?}");
                assert_eq!(s.field("gen_ai.request.model"), Some("m1"), "{s:?}");
                let usage = s.field("gen_ai.usage.input_tokens").is_some()
                    && s.field("gen_ai.usage.output_tokens").is_some();
                if s.replayed() {
                    assert!(!usage, "a replayed answer reports usage again: {s:?}");
                    t.replayed_chats += 1;
                } else {
                    assert!(usage, "a fresh answer without its usage: {s:?}");
                    t.fresh_chats += 1;
                }
            }
            Some("execute_tool") => {
                assert_eq!(s.name, "execute_tool");
                assert_eq!(s.field("otel.name"), Some("execute_tool add"), "{s:?}");
                assert_eq!(s.field("gen_ai.tool.name"), Some("add"), "{s:?}");
                assert!(s.field("gen_ai.tool.call.id").is_some(), "{s:?}");
                if s.replayed() {
                    t.replayed_tools += 1;
                } else {
                    t.fresh_tools += 1;
                }
            }
            Some("invoke_agent") => {
                assert_eq!(s.field("gen_ai.agent.name"), Some("crashy"), "{s:?}");
                assert_eq!(s.field("gen_ai.conversation.id"), Some("t_otel"), "{s:?}");
                t.failed_runs += u64::from(s.field("error.type").is_some());
            }
            _ => {}
        }
    }
    t
}

fn make_agent(llm: Arc<ScriptedLlm>, counter: &InvocationCounter) -> afk_core::runner::Agent {
    let mut agent = agent_with(llm, counter);
    agent.limits = limits_for(STEPS);
    agent
}

#[tokio::test]
async fn replays_are_marked_and_every_real_call_is_one_fresh_span() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let thread = ThreadId::new("t_otel").unwrap();
    let run = RunId::new("run_otel").unwrap();

    // The uncrashed run: how many commits it makes, and its spans.
    let inner = Arc::new(MemoryStore::new());
    let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
    let counter = InvocationCounter::new();
    let llm = ScriptedLlm::new(add_script(STEPS));
    let provider = llm.provider();
    let agent = make_agent(llm.clone(), &counter);
    let out = common::runner(fault.clone(), false)
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Completed(_)));
    let commits = fault.persisted_commits();
    let whole = tally(&spans.take(), &provider);
    let want = Tally {
        fresh_chats: STEPS + 1,
        replayed_chats: 0,
        fresh_tools: STEPS,
        replayed_tools: 0,
        failed_runs: 0,
    };
    assert_eq!(whole, want);

    let (mut saw_chat_replay, mut saw_tool_replay) = (false, false);
    for k in 1..commits {
        let inner = Arc::new(MemoryStore::new());
        let fault = Arc::new(FaultStore::from_arc(inner.clone() as Arc<dyn Store>));
        fault.crash_after_commits(k, CrashMode::Down);
        let counter = InvocationCounter::new();
        let first = ScriptedLlm::new(add_script(STEPS));
        let agent = make_agent(first.clone(), &counter);
        let crashed = common::runner(fault, false)
            .run_with_id(&agent, &thread, run.clone(), "go")
            .result()
            .await;
        assert!(crashed.is_err(), "k={k}: the run survived its crash");
        let before = tally(&spans.take(), &provider);
        let tools_before = counter.total();

        let second = ScriptedLlm::new(add_script(STEPS));
        let agent = make_agent(second.clone(), &counter);
        let runner = common::runner(inner.clone(), false);
        let done = resume_or_start(&runner, &agent, &inner, &thread, &run)
            .result()
            .await;
        assert!(matches!(done, Ok(Outcome::Completed(_))), "k={k}: {done:?}");
        let after = tally(&spans.take(), &provider);

        // Each real model call and tool execution is one fresh span, in the process that
        // made it; nothing a crash lost is missing and nothing replayed counts again.
        assert_eq!(before.fresh_chats, first.calls(), "k={k}: {before:?}");
        assert_eq!(after.fresh_chats, second.calls(), "k={k}: {after:?}");
        assert_eq!(before.fresh_tools, tools_before, "k={k}: {before:?}");
        assert_eq!(after.fresh_tools, counter.total() - tools_before, "k={k}");
        assert_eq!(before.replayed_chats + before.replayed_tools, 0, "k={k}");
        assert_eq!((before.failed_runs, after.failed_runs), (1, 0), "k={k}");
        // The resume reports every step's answer and every call: fresh or replayed.
        let answers = after.fresh_chats + after.replayed_chats;
        let calls = after.fresh_tools + after.replayed_tools;
        assert!(answers >= 1 && calls <= STEPS, "k={k}: {after:?}");
        saw_chat_replay |= after.replayed_chats > 0;
        saw_tool_replay |= after.replayed_tools > 0;
    }
    // Some crash points leave an answer or a result for the resume to replay.
    assert!(
        saw_chat_replay,
        "no crash point left a model answer to replay"
    );
    assert!(
        saw_tool_replay,
        "no crash point left a tool result to replay"
    );
}
