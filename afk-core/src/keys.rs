//! Logical keys inside a thread namespace, as AFK writes them, plus our own.
//!
//! | key | what |
//! | --- | --- |
//! | `checkpoint:<run>:<step>:<phase>` | a checkpoint record (AFK) |
//! | `checkpoint:<run>:latest` | the run's latest pointer (AFK) |
//! | `effect:<run>:<step>:<call>` | an effect-journal row (AFK; intent and result in v2) |
//! | `messages:<run>:<index>` | one transcript-log entry (v2); index zero-padded to 20 digits |
//! | `run:<run>` | run metadata and fence (v2) |
//!
//! Run ids are validated ([`RunId`]: letters, digits, `_`, `-`, `.`), so they never contain the
//! `:` separator. Steps are base-10 integers and phases come from a closed list. Tool-call ids
//! come from the model and may contain anything, so they are *escaped*, not rejected: every
//! byte outside `A-Z a-z 0-9 _ - .` (the `%` itself included) becomes `%XX` (uppercase hex).
//! AFK's own call ids (`call_…`, `toolu_…`) are unchanged by escaping, so AFK's effect keys are
//! read as they are. Together this makes key building injective: distinct
//! `(run, step, phase | call id | index)` tuples never give the same key, and parsing a built
//! key gives the tuple back.

use std::fmt;

use crate::error::{Error, Result};
use crate::ids::{MAX_KEY_LEN, RunId};
use crate::schema::Phase;

use crate::store::{latest_key, run_key};

/// Width of the zero-padded transcript index, so that byte order is numeric order.
pub const MESSAGE_INDEX_WIDTH: usize = 20;

/// Longest tool-call id accepted before escaping, in bytes.
pub const MAX_CALL_ID_LEN: usize = 256;

/// `checkpoint:<run>:<step>:<phase>`.
pub fn checkpoint_key(run: &RunId, step: u64, phase: Phase) -> String {
    use std::fmt::Write as _;
    // Built by hand: `format!` cost more than the rest of a record's key handling.
    let (run, phase) = (run.as_str(), phase.as_str());
    let mut key = String::with_capacity(13 + run.len() + 20 + phase.len());
    key.push_str("checkpoint:");
    key.push_str(run);
    key.push(':');
    let _ = write!(key, "{step}");
    key.push(':');
    key.push_str(phase);
    key
}

/// The prefix of every checkpoint key of a run (records and latest pointer).
pub fn checkpoint_prefix(run: &RunId) -> String {
    format!("checkpoint:{run}:")
}

/// `effect:<run>:<step>:<escaped call id>`. Fails with `InvalidInput` for an empty call id or
/// one longer than [`MAX_CALL_ID_LEN`] bytes.
pub fn effect_key(run: &RunId, step: u64, call_id: &str) -> Result<String> {
    if call_id.is_empty() {
        return Err(Error::invalid_input("tool call id is empty"));
    }
    if call_id.len() > MAX_CALL_ID_LEN {
        return Err(Error::invalid_input(format!(
            "tool call id is {} bytes; at most {MAX_CALL_ID_LEN} are allowed",
            call_id.len()
        )));
    }
    use std::fmt::Write as _;
    // Built in place, as `checkpoint_key`: one per tool call and step.
    let run = run.as_str();
    let mut key = String::with_capacity(7 + run.len() + 22 + call_id.len());
    key.push_str("effect:");
    key.push_str(run);
    key.push(':');
    let _ = write!(key, "{step}");
    key.push(':');
    push_escaped(&mut key, call_id);
    Ok(key)
}

/// The prefix of every effect row of a run.
pub fn effect_prefix(run: &RunId) -> String {
    format!("effect:{run}:")
}

/// `messages:<run>:<index>` with the index zero-padded to [`MESSAGE_INDEX_WIDTH`] digits.
pub fn messages_key(run: &RunId, index: u64) -> String {
    use std::fmt::Write as _;
    let run = run.as_str();
    let mut key = String::with_capacity(10 + run.len() + MESSAGE_INDEX_WIDTH);
    key.push_str("messages:");
    key.push_str(run);
    key.push(':');
    let _ = write!(key, "{index:0width$}", width = MESSAGE_INDEX_WIDTH);
    key
}

/// The prefix of every transcript-log entry of a run.
pub fn messages_prefix(run: &RunId) -> String {
    format!("messages:{run}:")
}

/// The prefixes under which every key of a run lives (for listing and deleting a run).
pub fn run_prefixes(run: &RunId) -> [String; 4] {
    [
        checkpoint_prefix(run),
        effect_prefix(run),
        messages_prefix(run),
        format!("bgtool:{run}:"),
    ]
}

/// Escape a free-form key component: bytes outside `A-Z a-z 0-9 _ - .` become `%XX`.
pub fn escape_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s);
    out
}

/// Append [`escape_component`]`(s)` to `out`.
fn push_escaped(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    if s.bytes().all(plain) {
        out.push_str(s);
        return;
    }
    out.reserve(8);
    for b in s.bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
}

/// Invert [`escape_component`]. Fails for malformed escapes or non-UTF-8 results.
pub fn unescape_component(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| {
                    h.bytes()
                        .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c))
                })
                .ok_or_else(|| Error::invalid_input(format!("malformed escape in {s:?}")))?;
            let v = u8::from_str_radix(hex, 16)
                .map_err(|_| Error::invalid_input(format!("malformed escape in {s:?}")))?;
            out.push(v);
            i += 3;
        } else if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.') {
            out.push(b);
            i += 1;
        } else {
            return Err(Error::invalid_input(format!(
                "unescaped byte 0x{b:02x} in {s:?}"
            )));
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid_input(format!("escape in {s:?} is not UTF-8")))
}

/// A logical key, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedKey {
    /// `checkpoint:<run>:<step>:<phase>`
    Checkpoint {
        /// The run.
        run: RunId,
        /// The step.
        step: u64,
        /// The phase.
        phase: Phase,
    },
    /// `checkpoint:<run>:latest`
    Latest {
        /// The run.
        run: RunId,
    },
    /// `effect:<run>:<step>:<call id>` (call id unescaped)
    Effect {
        /// The run.
        run: RunId,
        /// The step.
        step: u64,
        /// The tool-call id, unescaped.
        call_id: String,
    },
    /// `messages:<run>:<index>`
    Messages {
        /// The run.
        run: RunId,
        /// The entry index.
        index: u64,
    },
    /// `run:<run>`
    Run {
        /// The run.
        run: RunId,
    },
    /// `bgtool:<run>:<rest>` (AFK background-tool rows; kept, not interpreted)
    BackgroundTool {
        /// The run.
        run: RunId,
        /// Everything after the run id.
        rest: String,
    },
}

impl ParsedKey {
    /// The run the key belongs to.
    pub fn run(&self) -> &RunId {
        match self {
            ParsedKey::Checkpoint { run, .. }
            | ParsedKey::Latest { run }
            | ParsedKey::Effect { run, .. }
            | ParsedKey::Messages { run, .. }
            | ParsedKey::Run { run }
            | ParsedKey::BackgroundTool { run, .. } => run,
        }
    }

    /// Build the key back.
    pub fn to_key(&self) -> Result<String> {
        match self {
            ParsedKey::Checkpoint { run, step, phase } => Ok(checkpoint_key(run, *step, *phase)),
            ParsedKey::Latest { run } => Ok(latest_key(run)),
            ParsedKey::Effect { run, step, call_id } => effect_key(run, *step, call_id),
            ParsedKey::Messages { run, index } => Ok(messages_key(run, *index)),
            ParsedKey::Run { run } => Ok(run_key(run)),
            ParsedKey::BackgroundTool { run, rest } => Ok(format!("bgtool:{run}:{rest}")),
        }
    }
}

impl fmt::Display for ParsedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_key() {
            Ok(k) => f.write_str(&k),
            Err(_) => write!(f, "{self:?}"),
        }
    }
}

fn parse_step(s: &str, key: &str) -> Result<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return Err(Error::invalid_input(format!(
            "step {s:?} in key {key:?} is not a base-10 integer"
        )));
    }
    s.parse()
        .map_err(|_| Error::invalid_input(format!("step {s:?} in key {key:?} is out of range")))
}

/// Parse a logical key. Fails with `InvalidInput` saying what is wrong.
pub fn parse_key(key: &str) -> Result<ParsedKey> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid_input(format!(
            "key is {} bytes; at most {MAX_KEY_LEN}",
            key.len()
        )));
    }
    let bad = |why: &str| Error::invalid_input(format!("key {key:?}: {why}"));
    let (family, rest) = key.split_once(':').ok_or_else(|| bad("no ':' separator"))?;
    if family == "run" {
        return Ok(ParsedKey::Run {
            run: RunId::new(rest)?,
        });
    }
    let (run, rest) = rest.split_once(':').ok_or_else(|| bad("no run id"))?;
    let run = RunId::new(run)?;
    match family {
        "checkpoint" => {
            if rest == "latest" {
                return Ok(ParsedKey::Latest { run });
            }
            let (step, phase) = rest.split_once(':').ok_or_else(|| bad("no phase"))?;
            let step = parse_step(step, key)?;
            let phase = phase.parse::<Phase>().map_err(|_| bad("unknown phase"))?;
            Ok(ParsedKey::Checkpoint { run, step, phase })
        }
        "effect" => {
            let (step, call) = rest.split_once(':').ok_or_else(|| bad("no tool call id"))?;
            let step = parse_step(step, key)?;
            if call.is_empty() {
                return Err(bad("empty tool call id"));
            }
            Ok(ParsedKey::Effect {
                run,
                step,
                call_id: unescape_component(call)?,
            })
        }
        "messages" => {
            if rest.len() != MESSAGE_INDEX_WIDTH || !rest.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("index is not a 20-digit number"));
            }
            let index = rest.parse().map_err(|_| bad("index out of range"))?;
            Ok(ParsedKey::Messages { run, index })
        }
        "bgtool" => Ok(ParsedKey::BackgroundTool {
            run,
            rest: rest.to_owned(),
        }),
        _ => Err(bad("unknown key family")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(s: &str) -> RunId {
        RunId::new(s).unwrap()
    }

    #[test]
    fn afk_key_formats() {
        let r = run("run-42");
        assert_eq!(
            checkpoint_key(&r, 7, Phase::PreToolBatch),
            "checkpoint:run-42:7:pre_tool_batch"
        );
        assert_eq!(latest_key(&run("run-99")), "checkpoint:run-99:latest");
        assert_eq!(
            effect_key(&run("run-1"), 3, "tc-abc").unwrap(),
            "effect:run-1:3:tc-abc"
        );
        assert_eq!(
            effect_key(&r, 1, "call_a_1").unwrap(),
            "effect:run-42:1:call_a_1"
        );
        assert_eq!(messages_key(&r, 3), "messages:run-42:00000000000000000003");
        assert_eq!(run_key(&r), "run:run-42");
    }

    #[test]
    fn odd_call_ids_are_escaped_and_stay_in_their_run() {
        let r = run("r");
        for (id, want) in [
            ("a:b", "effect:r:1:a%3Ab"),
            ("../x", "effect:r:1:..%2Fx"),
            ("{t}*", "effect:r:1:%7Bt%7D%2A"),
            ("nul\0", "effect:r:1:nul%00"),
            ("50%", "effect:r:1:50%25"),
            ("é", "effect:r:1:%C3%A9"),
        ] {
            let k = effect_key(&r, 1, id).unwrap();
            assert_eq!(k, want);
            crate::ids::validate_key(&k).unwrap();
            assert_eq!(crate::store::run_of_key(&k), Some("r"));
            assert_eq!(
                parse_key(&k).unwrap(),
                ParsedKey::Effect {
                    run: r.clone(),
                    step: 1,
                    call_id: id.into()
                }
            );
        }
        assert!(effect_key(&r, 1, "").is_err());
        assert!(effect_key(&r, 1, &"x".repeat(MAX_CALL_ID_LEN + 1)).is_err());
    }

    #[test]
    fn rejects_malformed_keys() {
        for k in [
            "",
            "checkpoint",
            "checkpoint:r",
            "checkpoint:r:1",
            "checkpoint:r:01:pre_llm",
            "checkpoint:r:x:pre_llm",
            "checkpoint:r:1:bogus",
            "checkpoint:a/b:latest",
            "effect:r:1:",
            "effect:r:1:a%3",
            "effect:r:1:a%3a",
            "messages:r:12",
            "whatever:r:1",
            "run:",
            "run:a:b",
        ] {
            assert!(parse_key(k).is_err(), "{k:?} should not parse");
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    enum Tuple {
        Checkpoint(String, u64, usize),
        Latest(String),
        Effect(String, u64, String),
        Messages(String, u64),
        Run(String),
    }

    fn build(t: &Tuple) -> Option<String> {
        let r = |s: &str| RunId::new(s).ok();
        match t {
            Tuple::Checkpoint(run, step, p) => {
                Some(checkpoint_key(&r(run)?, *step, Phase::ALL[*p]))
            }
            Tuple::Latest(run) => Some(latest_key(&r(run)?)),
            Tuple::Effect(run, step, call) => effect_key(&r(run)?, *step, call).ok(),
            Tuple::Messages(run, i) => Some(messages_key(&r(run)?, *i)),
            Tuple::Run(run) => Some(run_key(&r(run)?)),
        }
    }

    fn tuple() -> impl Strategy<Value = Tuple> {
        // Small alphabets so collisions would actually be likely if escaping were broken.
        let run = "[a-c_.:-]{1,4}";
        let call = "[a-c:%/.{}*\\x00é]{1,5}";
        prop_oneof![
            (run, 0u64..12, 0usize..12).prop_map(|(r, s, p)| Tuple::Checkpoint(r, s, p)),
            run.prop_map(Tuple::Latest),
            (run, 0u64..12, call).prop_map(|(r, s, c)| Tuple::Effect(r, s, c)),
            (run, 0u64..12).prop_map(|(r, i)| Tuple::Messages(r, i)),
            run.prop_map(Tuple::Run),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2048),
            ..ProptestConfig::default()
        })]

        /// Distinct tuples give distinct keys; every built key parses back to its tuple and
        /// belongs to its own run.
        #[test]
        fn keys_are_injective(a in tuple(), b in tuple()) {
            if let (Some(ka), Some(kb)) = (build(&a), build(&b)) {
                prop_assert_eq!(a == b, ka == kb, "{:?} {:?} -> {} {}", a, b, ka, kb);
                let parsed = parse_key(&ka).unwrap();
                prop_assert_eq!(parsed.to_key().unwrap(), ka.clone());
                prop_assert_eq!(Some(parsed.run().as_str()), crate::store::run_of_key(&ka));
                crate::ids::validate_key(&ka).unwrap();
            }
        }

        /// Escaping round-trips for any string.
        #[test]
        fn escaping_round_trips(s in any::<String>()) {
            prop_assert_eq!(unescape_component(&escape_component(&s)).unwrap(), s);
        }
    }
}
