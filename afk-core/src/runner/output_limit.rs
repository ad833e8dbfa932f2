//! Tool outputs a store cannot hold.
//!
//! A call's output is written twice: in its effect row, and in its step's transcript entry
//! (the tool message's text, a JSON string, and the tool record's output), and each of those
//! is one store value. A store with a value limit ([`Capabilities::max_value_size`]: Redis
//! 32 MiB, S3 64 MiB) refuses a commit holding a larger value, and no retry can change that.
//! Left alone, such an output failed its run with `InvalidInput`, and every resume ran the
//! tool again (an idempotent tool: intent without result) and failed the same way: a run that
//! can never finish, whose side effect repeats on each attempt.
//!
//! So before a call's result row is written, its output is measured against its share of the
//! store's limit: what the step's model answer leaves of the limit, split evenly between the
//! step's calls (every call of the batch then fits, whatever the others return, and the share
//! depends on the batch alone). An output over its share is not kept: the call is recorded as
//! failed, with an error that says so (the model reads it, and the tool-failure policy
//! applies), and its result row carries
//! [`OUTPUT_DROPPED`](super::journal::OUTPUT_DROPPED), so a resume does not run the tool
//! again (it did run: an at-most-once tool must not repeat) but replays the failure.
//!
//! Two records hold what a run accumulates rather than one step's: a model answer is held up
//! to three times in one record ([`answer_error`]: too large, it is a failed model call), and
//! the terminal record's result lists every tool execution of the run ([`fit_result`]: the
//! largest outputs are left to the transcript log until it fits).
//!
//! [`Capabilities::max_value_size`]: crate::store::Capabilities::max_value_size

use serde_json::Value;

use super::prompt::{UNTRUSTED_NOTE, tool_text};
use crate::schema::{AgentResult, LlmResponse};

/// Room kept in a step's entry for what is not the model answer or a call's output (field
/// names, ids, the digest, the step's other records).
const ENTRY_SLACK: usize = 16 * 1024;

/// Room kept per call for its record's fields besides the output.
const CALL_SLACK: usize = 2 * 1024;

/// Copies of a model answer one record may hold: the snapshot holds it twice
/// (`pending_llm_response`, `final_response`), a final answer's terminal record three times
/// (its text, its response, its message).
const ANSWER_COPIES: usize = 3;

/// The size of a model answer as recorded (its compact JSON).
pub(crate) fn answer_size(resp: &LlmResponse) -> usize {
    serde_json::to_vec(resp).map_or(usize::MAX, |v| v.len())
}

/// Why a model answer of `size` bytes cannot be recorded in a store keeping values of at
/// most `max` bytes, if it cannot. Such an answer is a failed model call: recording it would
/// be refused, the run would fail, and every resume would ask the model again and fail the
/// same way.
pub(crate) fn answer_error(size: usize, max: usize) -> Option<String> {
    (size
        .saturating_mul(ANSWER_COPIES)
        .saturating_add(ENTRY_SLACK)
        > max)
        .then(|| {
            format!(
                "the model's answer is {size} bytes as recorded; one record of the run holds it up \
             to {ANSWER_COPIES} times, and the run's store keeps values of at most {max} bytes"
            )
        })
}

/// Field of a tool or subagent execution in a terminal record's result whose output or error
/// was left out so that the record fits the store: the size in bytes of what was left out (it
/// is in the step's transcript entry).
pub(crate) const IN_TRANSCRIPT: &str = "output_in_transcript";

/// Make a run's result fit in its terminal record on a store keeping values of at most `max`
/// bytes, `other` bytes of the record being outside the result. The result holds every tool
/// execution of the run: each output is within its step's share, but their sum grows with the
/// run, and a refused terminal commit would leave the run failing at its end on every resume.
/// The largest outputs and errors (of tool calls, and of delegations: their final texts) are
/// left out first ([`IN_TRANSCRIPT`] says how large each was), until the rest fits.
/// Deterministic: a resumed run that finishes leaves out the same.
pub(crate) fn fit_result(result: &mut AgentResult, other: usize, max: Option<usize>) {
    let Some(max) = max else { return };
    let budget = max.saturating_sub(other.saturating_add(ENTRY_SLACK));
    let mut total = serde_json::to_vec(result).map_or(usize::MAX, |v| v.len());
    if total <= budget {
        return;
    }
    // (bytes, is a subagent execution, index): an execution's output (a delegation's final
    // text) and error; the largest first, tool executions then subagent ones among equals.
    let tools = result.tool_executions.iter().enumerate().map(|(i, e)| {
        (
            len_of(&e.output).saturating_add(e.error.as_ref().map_or(0, len_of)),
            false,
            i,
        )
    });
    let subagents = result.subagent_executions.iter().enumerate().map(|(i, e)| {
        (
            e.output_text
                .as_ref()
                .map_or(0, len_of)
                .saturating_add(e.error.as_ref().map_or(0, len_of)),
            true,
            i,
        )
    });
    let mut parts: Vec<(usize, bool, usize)> = tools.chain(subagents).collect();
    parts.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    for (bytes, subagent, i) in parts {
        if total <= budget {
            break;
        }
        let (error, extra) = if subagent {
            let e = &mut result.subagent_executions[i];
            e.output_text = None;
            (&mut e.error, &mut e.extra)
        } else {
            let e = &mut result.tool_executions[i];
            e.output = Value::Null;
            (&mut e.error, &mut e.extra)
        };
        if error.is_some() {
            *error = Some("(in the transcript)".to_owned());
        }
        extra.insert(IN_TRANSCRIPT.to_owned(), Value::from(bytes));
        // What is left in its place: `null`, the note, the marker (at most ~80 bytes).
        total = total.saturating_sub(bytes).saturating_add(80);
    }
}

/// The size of `v` as compact JSON.
fn len_of<T: serde::Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |v| v.len())
}

/// The share of a store's value limit each call of one step may fill with its output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutputLimit {
    /// Bytes per call (its message text as a JSON string plus its record's output).
    share: usize,
    /// The store's limit, for the error message.
    max: usize,
    /// Calls in the step.
    calls: usize,
}

impl OutputLimit {
    /// The limit for the calls of `resp` on a store holding values of at most `max` bytes;
    /// `None` when the store has no limit. `answer`: the answer's size if already measured
    /// ([`answer_size`]).
    pub(crate) fn for_step(
        max: Option<usize>,
        resp: &LlmResponse,
        answer: Option<usize>,
    ) -> Option<Self> {
        let max = max?;
        let answer = answer.unwrap_or_else(|| answer_size(resp));
        let calls = resp.tool_calls.len().max(1);
        Some(OutputLimit {
            share: max.saturating_sub(answer + ENTRY_SLACK) / calls,
            max,
            calls,
        })
    }

    /// A failed call's error, cut short when it would not fit this call's share (a tool may
    /// fail with a message as large as any output). Not marked in the row: a failed call runs
    /// again on resume anyway and is cut the same way. `records`: how many records of the step
    /// besides the tool message carry it (1; 2 for a delegation, whose subagent record does too).
    pub(crate) fn fit_error(&self, tool_name: &str, error: String, records: usize) -> String {
        if error.len().saturating_mul(12 + records)
            + tool_name.len()
            + UNTRUSTED_NOTE.len()
            + CALL_SLACK
            <= self.share
        {
            return error;
        }
        let cost = |e: &str| {
            let e = Value::String(e.to_owned());
            let text = tool_text(tool_name, false, &Value::Null, &e);
            let quoted = serde_json::to_string(&text).map_or(usize::MAX, |s| s.len());
            let record = serde_json::to_string(&e).map_or(usize::MAX, |s| s.len());
            quoted
                .saturating_add(record.saturating_mul(records))
                .saturating_add(CALL_SLACK)
        };
        let total = error.len();
        let mut keep = total;
        let mut cut = error.clone();
        while cost(&cut) > self.share && keep > 0 {
            keep = keep.saturating_mul(self.share) / cost(&cut).max(1) * 9 / 10;
            let mut at = keep.min(error.len());
            while !error.is_char_boundary(at) {
                at -= 1;
            }
            keep = at;
            cut = format!(
                "{}… [error cut from {total} to {at} bytes: the run's store keeps values of up \
                 to {} bytes]",
                &error[..at],
                self.max
            );
        }
        cut
    }

    /// `None` when `output` fits this call's share; otherwise the failed call's error.
    /// `records`: how many records of the step besides the tool message carry the output (1;
    /// 2 for a delegation, whose subagent record holds the child's final text).
    pub(crate) fn check(
        &self,
        tool_name: &str,
        output: &Value,
        records: usize,
    ) -> Option<(usize, String)> {
        let compact = serde_json::to_vec(output).map_or(usize::MAX, |v| v.len());
        // The canonical text is at most twice the compact one (a space after each `,` and
        // `:`), and escaping it as a JSON string at most six times that (`\u00XX`): below the
        // share even then, nothing more needs measuring (every small output).
        let bound = compact
            .saturating_mul(12 + records)
            .saturating_add(tool_name.len() + UNTRUSTED_NOTE.len() + CALL_SLACK);
        if bound <= self.share {
            return None;
        }
        let text = tool_text(tool_name, true, output, &Value::Null);
        let quoted = serde_json::to_string(&text).map_or(usize::MAX, |s| s.len());
        let cost = compact
            .saturating_mul(records)
            .saturating_add(quoted)
            .saturating_add(CALL_SLACK);
        (cost > self.share).then(|| {
            (
                compact,
                format!(
                    "Error executing tool '{tool_name}': its output ({compact} bytes of JSON, \
                     {cost} bytes to record) is more than the run's store can keep for one \
                     call of this step ({} bytes: the store holds values of up to {} bytes, \
                     shared by the step's {} call(s) and the model's answer); the tool ran, \
                     and its output was dropped",
                    self.share, self.max, self.calls
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resp(calls: usize) -> LlmResponse {
        let calls: Vec<Value> = (0..calls)
            .map(|i| json!({"id": format!("c{i}"), "tool_name": "t", "arguments": {}}))
            .collect();
        serde_json::from_value(json!({"text": "go", "tool_calls": calls})).unwrap()
    }

    #[test]
    fn no_limit_without_a_store_limit() {
        assert!(OutputLimit::for_step(None, &resp(1), None).is_none());
    }

    /// The share is what the answer and the slack leave, split between the calls; an output
    /// whose recorded size (record + quoted message text) exceeds it is refused, one just
    /// under it is kept.
    #[test]
    fn outputs_over_their_share_are_refused() {
        let max = 256 * 1024;
        for calls in [1, 2, 5] {
            let limit = OutputLimit::for_step(Some(max), &resp(calls), None).unwrap();
            assert!(limit.share < max / calls && limit.share > max / calls - 20 * 1024);
            let fits = |n: usize| {
                let out = json!({"blob": "x".repeat(n)});
                limit.check("t", &out, 1).is_none()
            };
            // The largest plain-text output kept (recorded about twice: record and message).
            let (mut lo, mut hi) = (0, limit.share);
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                if fits(mid) { lo = mid } else { hi = mid }
            }
            assert!(lo > limit.share / 2 - 4096, "{calls}: edge {lo}");
            assert!(!fits(lo + 1));
            let (bytes, err) = limit
                .check("t", &json!("x".repeat(limit.share)), 1)
                .unwrap();
            assert!(bytes > limit.share);
            assert!(err.contains("its output was dropped"), "{err}");
        }
    }

    /// An error message over the share is cut to fit, at a character boundary, saying so; a
    /// short one is kept as it is.
    #[test]
    fn long_errors_are_cut_to_fit() {
        let limit = OutputLimit::for_step(Some(200 * 1024), &resp(2), None).unwrap();
        assert_eq!(limit.fit_error("t", "bad".into(), 1), "bad");
        let long = "é\"".repeat(limit.share);
        let cut = limit.fit_error("t", long.clone(), 1);
        assert!(cut.len() < limit.share, "{}", cut.len());
        assert!(
            cut.contains(&format!("error cut from {} to", long.len())),
            "{cut}"
        );
        let e = Value::String(cut.clone());
        let text = tool_text("t", false, &Value::Null, &e);
        let cost =
            serde_json::to_string(&text).unwrap().len() + serde_json::to_string(&e).unwrap().len();
        assert!(cost + CALL_SLACK <= limit.share, "{cost}");
    }

    /// A delegation's output is in one more record (the subagent's): an output that fits a
    /// tool's share can be too large for a delegation's.
    #[test]
    fn a_delegation_counts_its_subagent_record() {
        let limit = OutputLimit::for_step(Some(300 * 1024), &resp(1), None).unwrap();
        let out = json!({"final_text": "x".repeat(limit.share * 2 / 5)});
        assert!(limit.check("t", &out, 1).is_none());
        assert!(limit.check("t", &out, 2).is_some());
        let err = "y".repeat(limit.share * 2 / 5);
        assert_eq!(limit.fit_error("t", err.clone(), 1), err);
        assert_ne!(limit.fit_error("t", err.clone(), 2), err);
    }

    /// Quotes are escaped in the message text: a quote-heavy output is measured as recorded,
    /// not by its own length.
    #[test]
    fn escaping_counts() {
        let limit = OutputLimit::for_step(Some(400 * 1024), &resp(1), None).unwrap();
        let quotes = json!("\"".repeat(limit.share / 4));
        assert!(limit.check("t", &quotes, 1).is_some());
        let plain = json!("x".repeat(limit.share / 4));
        assert!(limit.check("t", &plain, 1).is_none());
    }

    #[test]
    fn an_answer_fits_when_three_copies_and_the_slack_do() {
        let max = 3 * 10_000 + ENTRY_SLACK;
        assert!(answer_error(10_000, max).is_none());
        let err = answer_error(10_001, max).unwrap();
        assert!(
            err.contains("10001 bytes") && err.contains(&max.to_string()),
            "{err}"
        );
        assert!(answer_error(usize::MAX, max).is_some(), "no overflow");
    }

    #[test]
    fn a_result_too_large_leaves_out_its_largest_outputs_first() {
        let exec = |id: &str, n: usize| {
            serde_json::from_value::<crate::schema::ToolExecution>(json!({
                "tool_name": "t", "tool_call_id": id, "success": true,
                "output": {"page": "x".repeat(n)}}))
            .unwrap()
        };
        let mut r = AgentResult {
            tool_executions: vec![exec("a", 10_000), exec("b", 30_000), exec("c", 20_000)],
            ..Default::default()
        };
        let untouched = r.clone();
        fit_result(&mut r, 0, None);
        assert_eq!(r, untouched, "no limit, nothing left out");
        fit_result(&mut r, 0, Some(200_000));
        assert_eq!(r, untouched, "it fits");
        // 60 KB of outputs, 40 KB of room: the 30 KB one goes, then the 20 KB one fits.
        fit_result(&mut r, 0, Some(40_000 + ENTRY_SLACK));
        let out: Vec<bool> = r
            .tool_executions
            .iter()
            .map(|e| e.extra.contains_key(IN_TRANSCRIPT))
            .collect();
        assert_eq!(out, [false, true, false]);
        assert_eq!(r.tool_executions[1].output, Value::Null);
        assert_eq!(r.tool_executions[1].extra[IN_TRANSCRIPT], 30_011);
        assert!(serde_json::to_vec(&r).unwrap().len() <= 40_000);
    }

    #[test]
    fn a_delegations_final_text_is_left_out_like_an_output() {
        let sub = serde_json::from_value::<crate::schema::SubagentExecution>(json!({
            "subagent_name": "child", "success": true, "output_text": "y".repeat(30_000)}))
        .unwrap();
        let tool = serde_json::from_value::<crate::schema::ToolExecution>(json!({
            "tool_name": "t", "tool_call_id": "a", "success": true,
            "output": {"page": "x".repeat(20_000)}}))
        .unwrap();
        let mut r = AgentResult {
            tool_executions: vec![tool],
            subagent_executions: vec![sub],
            ..Default::default()
        };
        fit_result(&mut r, 0, Some(40_000 + ENTRY_SLACK));
        let s = &r.subagent_executions[0];
        assert_eq!(s.output_text, None);
        assert_eq!(s.extra[IN_TRANSCRIPT], 30_002);
        assert!(!r.tool_executions[0].extra.contains_key(IN_TRANSCRIPT));
        assert!(serde_json::to_vec(&r).unwrap().len() <= 40_000);
    }
}
