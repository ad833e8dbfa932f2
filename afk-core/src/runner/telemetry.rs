//! Tracing spans in OpenTelemetry's GenAI terms: one span per run (`invoke_agent`), per step,
//! per model call (`chat`) and per tool call (`execute_tool`), with the attribute names of the
//! GenAI semantic conventions
//! (<https://opentelemetry.io/docs/specs/semconv/gen-ai/>, v1.37: `gen_ai.operation.name`,
//! `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//! `gen_ai.tool.call.id`, …) and `otel.name` / `otel.kind`, which `tracing-opentelemetry`
//! turns into the exported span's name and kind.
//!
//! A resumed run does not ask the model again for an answer it recorded, nor run a tool again
//! whose result it recorded: it replays them. Their spans say so (`afk.replayed = true`) and
//! carry no token usage, so that a dashboard counting model calls, tokens or tool executions
//! counts each real one once however often a run resumed.

use tracing::Span;
use tracing::field::Empty;

use crate::schema::LlmResponse;

/// The span of one run (a fresh start, a resume, a takeover), in which its steps nest;
/// `resumed` when it is known before the run is claimed (a child run decides it later).
pub(crate) fn invoke_agent(agent: &str, thread: &str, run: &str, resumed: Option<bool>) -> Span {
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {agent}"),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %agent,
        gen_ai.conversation.id = %thread,
        afk.run.id = %run,
        afk.resumed = Empty,
        error.type = Empty,
    );
    if let Some(r) = resumed {
        span.record("afk.resumed", r);
    }
    span
}

/// The span of one step of a run.
pub(crate) fn step(run: &str, step: u64) -> Span {
    tracing::info_span!("step", afk.run.id = %run, afk.step = signed(step))
}

/// The span of one model call (`replayed`: an answer recorded before a crash, given again
/// without asking the model). The answer's attributes are added by [`record_answer`].
pub(crate) fn chat(provider: &str, model: &str, step: u64, replayed: bool) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        afk.step = signed(step),
        afk.replayed = replayed,
        error.type = Empty,
    )
}

/// What the model answered, on its `chat` span; token usage only for a fresh answer (a
/// replayed one was counted when it was made).
pub(crate) fn record_answer(span: &Span, resp: &LlmResponse, replayed: bool) {
    if let Some(m) = &resp.model {
        span.record("gen_ai.response.model", m.as_str());
    }
    if let Some(id) = &resp.provider_request_id {
        span.record("gen_ai.response.id", id.as_str());
    }
    if let Some(reason) = &resp.finish_reason {
        // A list in the conventions; one answer has one reason.
        span.record(
            "gen_ai.response.finish_reasons",
            tracing::field::display(format_args!("[\"{reason}\"]")),
        );
    }
    if !replayed {
        // As i64: OpenTelemetry's integer attributes are signed (an u64 is exported as text).
        span.record("gen_ai.usage.input_tokens", signed(resp.usage.input_tokens));
        span.record(
            "gen_ai.usage.output_tokens",
            signed(resp.usage.output_tokens),
        );
    }
}

/// The span of one tool call (`replayed`: a result recorded before a crash, given again
/// without running the tool).
pub(crate) fn execute_tool(name: &str, call_id: &str, step: u64, replayed: bool) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.type = "function",
        afk.step = signed(step),
        afk.replayed = replayed,
        error.type = Empty,
    )
}

/// `n` as OpenTelemetry's signed integer (saturating).
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A failed call or run: `error.type` on its span (the error's kind, or `tool_error`).
pub(crate) fn record_error(span: &Span, kind: &str) {
    span.record("error.type", kind);
}
