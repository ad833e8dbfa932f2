//! The v2 transcript log: one entry per step under `messages:<run>:<index>`,
//! holding the messages and the execution records (tool, subagent, skill) that step added,
//! chained by a SHA-256 digest so a resume can tell a complete log from a torn one.
//!
//! `digest_i = hex(sha256(digest_{i-1} as UTF-8 bytes || canonical_json(messages_i)
//! [|| canonical_json(records_i)]))` with `digest_{-1} = ""`. `records_i` is the object of the
//! entry's non-empty record lists (`tool_executions`, `subagent_executions`, `skill_reads`,
//! `skill_command_executions`) and is only hashed when it is not empty, so an entry without
//! records hashes exactly as before records moved into the log (older logs still verify). The
//! bytes are the canonical JSON of [`crate::hash::canonical_json`] (sorted keys, fixed
//! separators), so the digest does not depend on field order, serde_json features or the
//! language that wrote the log. The two parts cannot run into each other: the messages are one
//! JSON array and the records one JSON object.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::Extra;
use super::de::record_de;
use super::message::Message;
use super::rows::{CommandExecution, SkillRead, SubagentExecution, ToolExecution};
use crate::error::{Error, Result};

/// One transcript-log entry: the messages and execution records a step added.
///
/// The record lists are left out of the JSON when empty, so an entry without records is
/// byte-for-byte what it was before records moved into the log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TranscriptEntry {
    /// Position in the log, from 0; the entry's key is `messages:<run>:<index>`.
    pub index: u64,
    /// The step that added these messages.
    pub step: u64,
    /// The messages, in transcript order.
    pub messages: Vec<Message>,
    /// Tool execution records the step added, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_executions: Vec<ToolExecution>,
    /// Subagent execution records the step added, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagent_executions: Vec<SubagentExecution>,
    /// Skill reads the step added, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skill_reads: Vec<SkillRead>,
    /// Skill command executions the step added, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skill_command_executions: Vec<CommandExecution>,
    /// Chained digest up to and including this entry ([`records_digest`]).
    pub digest: String,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(TranscriptEntry {
    index: req,
    step: req,
    messages: req,
    tool_executions: def,
    subagent_executions: def,
    skill_reads: def,
    skill_command_executions: def,
    digest: req
});

/// Execution records, as a step adds them to the log or as a whole log holds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepRecords {
    /// Tool execution records.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_executions: Vec<ToolExecution>,
    /// Subagent execution records.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagent_executions: Vec<SubagentExecution>,
    /// Skill reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skill_reads: Vec<SkillRead>,
    /// Skill command executions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skill_command_executions: Vec<CommandExecution>,
}

impl StepRecords {
    /// True when every list is empty.
    pub fn is_empty(&self) -> bool {
        self.tool_executions.is_empty()
            && self.subagent_executions.is_empty()
            && self.skill_reads.is_empty()
            && self.skill_command_executions.is_empty()
    }
}

/// The record lists of an entry, borrowed, in the shape that is hashed.
#[derive(Serialize)]
struct RecordsView<'a> {
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_executions: &'a [ToolExecution],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    subagent_executions: &'a [SubagentExecution],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    skill_reads: &'a [SkillRead],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    skill_command_executions: &'a [CommandExecution],
}

impl RecordsView<'_> {
    fn is_empty(&self) -> bool {
        self.tool_executions.is_empty()
            && self.subagent_executions.is_empty()
            && self.skill_reads.is_empty()
            && self.skill_command_executions.is_empty()
    }
}

impl<'a> From<&'a StepRecords> for RecordsView<'a> {
    fn from(r: &'a StepRecords) -> Self {
        RecordsView {
            tool_executions: &r.tool_executions,
            subagent_executions: &r.subagent_executions,
            skill_reads: &r.skill_reads,
            skill_command_executions: &r.skill_command_executions,
        }
    }
}

/// What a v2 snapshot says about the log: how many entries, messages and records, and the last
/// digest. The record counts are left out of the JSON when 0 (and read as 0 when missing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TranscriptRef {
    /// Number of entries (`messages:<run>:0` .. `len - 1`).
    pub len: u64,
    /// Total number of messages over those entries.
    pub message_count: u64,
    /// Total number of tool execution records over those entries.
    #[serde(skip_serializing_if = "is_zero")]
    pub tool_count: u64,
    /// Total number of subagent execution records over those entries.
    #[serde(skip_serializing_if = "is_zero")]
    pub subagent_count: u64,
    /// Total number of skill reads over those entries.
    #[serde(skip_serializing_if = "is_zero")]
    pub skill_read_count: u64,
    /// Total number of skill command executions over those entries.
    #[serde(skip_serializing_if = "is_zero")]
    pub skill_command_count: u64,
    /// Digest of the last entry (`""` when `len == 0`).
    pub digest: String,
    /// Unknown fields, kept as read.
    #[serde(flatten)]
    pub extra: Extra,
}
record_de!(TranscriptRef {
    len: req,
    message_count: req,
    tool_count: def,
    subagent_count: def,
    skill_read_count: def,
    skill_command_count: def,
    digest: req
});

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The digest of an entry holding `messages` and no records, chained after `prev` (`""` for
/// the first entry).
pub fn entry_digest(prev: &str, messages: &[Message]) -> String {
    digest_of(prev, messages, None)
}

/// The digest of an entry holding `messages` and `records`, chained after `prev`. Equal to
/// [`entry_digest`] when `records` is empty.
pub fn records_digest(prev: &str, messages: &[Message], records: &StepRecords) -> String {
    digest_of(prev, messages, Some(&RecordsView::from(records)))
}

fn digest_of(prev: &str, messages: &[Message], records: Option<&RecordsView<'_>>) -> String {
    digest_and_len(prev, messages, records).0
}

/// [`digest_of`], and the length of the canonical text it hashed (about the length of the
/// entry's compact JSON, which holds the same values).
fn digest_and_len(
    prev: &str,
    messages: &[Message],
    records: Option<&RecordsView<'_>>,
) -> (String, usize) {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    // The canonical JSON of `serde_json::to_value(x)`, written without the `Value` (messages
    // and records have string keys only, so this cannot fail).
    let hashed = |h: &mut Sha256, text: &str| {
        h.update(text.as_bytes());
        text.len()
    };
    let mut len = crate::hash::with_canonical(messages, |text| hashed(&mut h, text));
    if let Some(r) = records.filter(|r| !r.is_empty()) {
        len += crate::hash::with_canonical(r, |text| hashed(&mut h, text));
    }
    (crate::hash::digest_hex(h.finalize().into()), len)
}

/// Fold [`entry_digest`] over consecutive entries' messages; `""` for none.
pub fn chain_digest<'a>(entries: impl IntoIterator<Item = &'a [Message]>) -> String {
    entries
        .into_iter()
        .fold(String::new(), |prev, msgs| entry_digest(&prev, msgs))
}

/// A [`TranscriptEntry`] with its content borrowed: the same JSON.
#[derive(Serialize)]
struct EntryOut<'a> {
    index: u64,
    step: u64,
    messages: &'a [Message],
    #[serde(flatten)]
    records: RecordsView<'a>,
    digest: &'a str,
}

/// The bytes and digest of entry `index` for `step` holding `messages` and the records, chained
/// after `prev_digest`: what building the [`TranscriptEntry`] with
/// [`TranscriptEntry::with_records`] and serializing it gives, without copying the content
/// (the runner's write path).
pub(crate) fn encode_entry(
    index: u64,
    step: u64,
    messages: &[Message],
    tool_executions: &[ToolExecution],
    subagent_executions: &[SubagentExecution],
    prev_digest: &str,
) -> Result<(Vec<u8>, String)> {
    let records = RecordsView {
        tool_executions,
        subagent_executions,
        skill_reads: &[],
        skill_command_executions: &[],
    };
    let (digest, text_len) = digest_and_len(prev_digest, messages, Some(&records));
    let out = EntryOut {
        index,
        step,
        messages,
        records,
        digest: &digest,
    };
    // The entry's JSON is about as long as the text its digest hashed, plus its own fields:
    // one buffer, not one grown several times.
    let mut bytes = Vec::with_capacity(text_len + 192);
    serde_json::to_writer(&mut bytes, &out)
        .map_err(|e| Error::unexpected(format!("cannot encode transcript entry: {e}")))?;
    Ok((bytes, digest))
}

impl TranscriptEntry {
    /// Build entry `index` for `step` holding only messages, chained after `prev_digest`.
    pub fn new(index: u64, step: u64, messages: Vec<Message>, prev_digest: &str) -> Self {
        Self::with_records(index, step, messages, StepRecords::default(), prev_digest)
    }

    /// Build entry `index` for `step` holding messages and records, chained after
    /// `prev_digest`.
    pub fn with_records(
        index: u64,
        step: u64,
        messages: Vec<Message>,
        records: StepRecords,
        prev_digest: &str,
    ) -> Self {
        let digest = records_digest(prev_digest, &messages, &records);
        TranscriptEntry {
            index,
            step,
            messages,
            tool_executions: records.tool_executions,
            subagent_executions: records.subagent_executions,
            skill_reads: records.skill_reads,
            skill_command_executions: records.skill_command_executions,
            digest,
            extra: Extra::new(),
        }
    }

    fn records_view(&self) -> RecordsView<'_> {
        RecordsView {
            tool_executions: &self.tool_executions,
            subagent_executions: &self.subagent_executions,
            skill_reads: &self.skill_reads,
            skill_command_executions: &self.skill_command_executions,
        }
    }

    /// The digest of this entry's content chained after `prev` (what [`Self::digest`] must be).
    pub fn expected_digest(&self, prev: &str) -> String {
        digest_of(prev, &self.messages, Some(&self.records_view()))
    }
}

impl TranscriptRef {
    /// The reference describing `entries` (assumed consecutive from index 0).
    pub fn of(entries: &[TranscriptEntry]) -> Self {
        let sum = |f: fn(&TranscriptEntry) -> usize| entries.iter().map(|e| f(e) as u64).sum();
        TranscriptRef {
            len: entries.len() as u64,
            message_count: sum(|e| e.messages.len()),
            tool_count: sum(|e| e.tool_executions.len()),
            subagent_count: sum(|e| e.subagent_executions.len()),
            skill_read_count: sum(|e| e.skill_reads.len()),
            skill_command_count: sum(|e| e.skill_command_executions.len()),
            digest: entries.last().map(|e| e.digest.clone()).unwrap_or_default(),
            extra: Extra::new(),
        }
    }
}

/// A verified transcript log: the whole transcript and every record, in log order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reassembled {
    /// The transcript.
    pub messages: Vec<Message>,
    /// The records of all entries, concatenated in entry order.
    pub records: StepRecords,
}

/// Check `entries` (in index order) against `tref` and return the full transcript and records.
///
/// Fails with `Corrupt` naming the first bad entry: a missing or out-of-order index, a stored
/// digest that does not match the recomputed chain, or a count/digest that differs from `tref`.
pub fn reassemble(entries: &[TranscriptEntry], tref: &TranscriptRef) -> Result<Reassembled> {
    if entries.len() as u64 != tref.len {
        return Err(Error::corrupt(format!(
            "transcript log has {} entries, snapshot expects {}",
            entries.len(),
            tref.len
        )));
    }
    let mut prev = String::new();
    let mut out = Vec::new();
    let mut records = StepRecords::default();
    for (i, e) in entries.iter().enumerate() {
        if e.index != i as u64 {
            return Err(Error::corrupt(format!(
                "transcript entry {i} has index {}",
                e.index
            )));
        }
        let d = e.expected_digest(&prev);
        if d != e.digest {
            return Err(Error::corrupt(format!(
                "transcript entry {i}: digest mismatch"
            )));
        }
        out.extend(e.messages.iter().cloned());
        records
            .tool_executions
            .extend(e.tool_executions.iter().cloned());
        records
            .subagent_executions
            .extend(e.subagent_executions.iter().cloned());
        records.skill_reads.extend(e.skill_reads.iter().cloned());
        records
            .skill_command_executions
            .extend(e.skill_command_executions.iter().cloned());
        prev = d;
    }
    if prev != tref.digest {
        return Err(Error::corrupt(
            "transcript digest differs from the snapshot's",
        ));
    }
    if out.len() as u64 != tref.message_count {
        return Err(Error::corrupt(format!(
            "transcript has {} messages, snapshot expects {}",
            out.len(),
            tref.message_count
        )));
    }
    let counts = [
        ("tool", records.tool_executions.len(), tref.tool_count),
        (
            "subagent",
            records.subagent_executions.len(),
            tref.subagent_count,
        ),
        (
            "skill read",
            records.skill_reads.len(),
            tref.skill_read_count,
        ),
        (
            "skill command",
            records.skill_command_executions.len(),
            tref.skill_command_count,
        ),
    ];
    for (what, got, want) in counts {
        if got as u64 != want {
            return Err(Error::corrupt(format!(
                "transcript log has {got} {what} records, snapshot expects {want}"
            )));
        }
    }
    Ok(Reassembled {
        messages: out,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Message, Role};

    fn log() -> Vec<TranscriptEntry> {
        let a = TranscriptEntry::new(0, 1, vec![Message::text(Role::User, "hi")], "");
        let b = TranscriptEntry::new(1, 1, vec![Message::text(Role::Assistant, "yo")], &a.digest);
        vec![a, b]
    }

    /// The runner's borrowed encoding writes what building the entry and serializing it
    /// writes, digest included, with and without records.
    #[test]
    fn encode_entry_gives_the_built_entry() {
        let tool: ToolExecution = serde_json::from_value(serde_json::json!({
            "tool_name": "add", "tool_call_id": "c1", "success": true,
            "output": {"sum": 3.5, "note": "é\n"}, "input_hash": "h", "extra_field": [1]
        }))
        .unwrap();
        let messages = vec![
            Message::text(Role::Assistant, "adding"),
            Message::text(Role::Tool, "{\"sum\": 3.5}"),
        ];
        for tools in [vec![], vec![tool]] {
            let built = TranscriptEntry::with_records(
                4,
                2,
                messages.clone(),
                StepRecords {
                    tool_executions: tools.clone(),
                    ..StepRecords::default()
                },
                "prev",
            );
            let (bytes, digest) = encode_entry(4, 2, &messages, &tools, &[], "prev").unwrap();
            assert_eq!(digest, built.digest);
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                serde_json::to_string(&built).unwrap()
            );
        }
    }

    #[test]
    fn digest_is_chained_sha256() {
        let entries = log();
        let first = hex::encode(Sha256::digest(br#"[{"content": "hi", "role": "user"}]"#));
        assert_eq!(entries[0].digest, first);
        let msgs: Vec<&[Message]> = entries.iter().map(|e| e.messages.as_slice()).collect();
        assert_eq!(chain_digest(msgs), entries[1].digest);
        assert_eq!(chain_digest(Vec::<&[Message]>::new()), "");
    }

    #[test]
    fn reassemble_verifies_the_chain() {
        let entries = log();
        let tref = TranscriptRef::of(&entries);
        assert_eq!(reassemble(&entries, &tref).unwrap().messages.len(), 2);
        assert!(
            reassemble(&entries[..1], &tref).unwrap_err().is_corrupt(),
            "torn log"
        );
        let mut edited = entries.clone();
        edited[0].messages[0] = Message::text(Role::User, "bye");
        assert!(
            reassemble(&edited, &tref)
                .unwrap_err()
                .message()
                .contains("digest")
        );
        let swapped = vec![entries[1].clone(), entries[0].clone()];
        assert!(reassemble(&swapped, &tref).is_err());
        let mut wrong = tref.clone();
        wrong.message_count = 3;
        assert!(reassemble(&entries, &wrong).is_err());
    }

    fn tool(name: &str) -> ToolExecution {
        ToolExecution {
            tool_name: name.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_without_records_hash_and_encode_as_before() {
        let msgs = vec![Message::text(Role::User, "hi")];
        let plain = TranscriptEntry::new(0, 1, msgs.clone(), "");
        let same = TranscriptEntry::with_records(0, 1, msgs.clone(), StepRecords::default(), "");
        assert_eq!(plain, same);
        assert_eq!(plain.digest, entry_digest("", &msgs));
        let json = serde_json::to_value(&plain).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // The set of keys (their order is the map's: sorted, or field order when a dependency
        // turns on `serde_json`'s `preserve_order`).
        keys.sort_unstable();
        assert_eq!(keys, ["digest", "index", "messages", "step"]);
        let tref = serde_json::to_value(TranscriptRef::of(&[plain])).unwrap();
        assert_eq!(tref.as_object().unwrap().len(), 3, "{tref}");
    }

    #[test]
    fn records_are_chained_counted_and_returned() {
        let a = TranscriptEntry::new(0, 1, vec![Message::text(Role::User, "hi")], "");
        let records = StepRecords {
            tool_executions: vec![tool("add"), tool("echo")],
            ..Default::default()
        };
        let b = TranscriptEntry::with_records(
            1,
            1,
            vec![Message::text(Role::Assistant, "yo")],
            records.clone(),
            &a.digest,
        );
        assert_ne!(b.digest, entry_digest(&a.digest, &b.messages));
        let bytes = serde_json::to_vec(&b).unwrap();
        let back: TranscriptEntry = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, b);
        let entries = vec![a, back];
        let tref = TranscriptRef::of(&entries);
        assert_eq!(tref.tool_count, 2);
        let got = reassemble(&entries, &tref).unwrap();
        assert_eq!(got.records, records);
        assert_eq!(got.messages.len(), 2);

        let mut edited = entries.clone();
        edited[1].tool_executions[0].tool_name = "charge".into();
        assert!(
            reassemble(&edited, &tref)
                .unwrap_err()
                .message()
                .contains("digest")
        );
        let mut dropped = entries.clone();
        dropped[1].tool_executions.clear();
        assert!(reassemble(&dropped, &tref).is_err(), "records removed");
        let mut wrong = tref.clone();
        wrong.tool_count = 3;
        assert!(
            reassemble(&entries, &wrong)
                .unwrap_err()
                .message()
                .contains("tool records")
        );
    }
}
