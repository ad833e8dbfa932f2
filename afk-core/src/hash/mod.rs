//! Canonical JSON and the effect-journal hashes, byte-identical to AFK Python's `json_hash`.
//!
//! AFK computes `sha256(json.dumps(value, sort_keys=True, ensure_ascii=True))` with Python's
//! default separators. Reproducing it exactly means:
//! - `", "` between items and `": "` after keys; keys sorted by code point at every level
//!   (UTF-8 byte order, which is what `String`'s `Ord` gives);
//! - every character outside printable ASCII (space to `~`) escaped as lowercase `\uXXXX`,
//!   DEL included, astral characters as surrogate pairs; `\"`, `\\`, `\n`, `\r`, `\t`, `\b`,
//!   `\f` short escapes; `/` not escaped;
//! - integers verbatim (serde_json keeps `u64`/`i64` apart from `f64`, so `1` and `1.0` differ);
//!   floats in Python `repr` form (`1.0`, `0.1`, `1e+16`, `1e-07`, `-0.0`).
//!
//! Integers outside the `i64`/`u64` range are read by serde_json as floats and therefore hash
//! differently from Python, which keeps them as integers; no tool argument we have seen needs
//! them.

mod keyed;
mod stream;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use keyed::Digest;
pub use keyed::{EffectHashes, HashKey};
pub(crate) use stream::with_canonical;

/// The canonical JSON text of `value`, as AFK's `json.dumps(…, sort_keys=True,
/// ensure_ascii=True)` writes it.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Lowercase hex SHA-256 of the canonical JSON of `value` (AFK's `json_hash`).
pub fn json_hash(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

/// The effect row's `input_hash`: `json_hash({"tool_name": name, "args": args})`.
pub fn input_hash(tool_name: &str, args: &Value) -> String {
    input_hash_with(tool_name, |out| write_value(out, args), Digest::Sha256)
}

fn input_hash_with(
    tool_name: &str,
    write_args: impl FnOnce(&mut String),
    digest: Digest<'_>,
) -> String {
    stream::with_text_buffer(|out| {
        out.push_str("{\"args\": ");
        write_args(out);
        out.push_str(", \"tool_name\": ");
        write_str(out, tool_name);
        out.push('}');
        digest.hex(out.as_bytes())
    })
}

/// The effect row's `output_hash`: `json_hash({"output": output})`.
pub fn output_hash(output: &Value) -> String {
    output_hash_with(output, Digest::Sha256)
}

fn output_hash_with(output: &Value, digest: Digest<'_>) -> String {
    stream::with_text_buffer(|out| {
        out.push_str("{\"output\": ");
        write_value(out, output);
        out.push('}');
        digest.hex(out.as_bytes())
    })
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    digest_hex(Sha256::digest(bytes).into())
}

/// Lowercase hex of a SHA-256 digest, written through a stack buffer: `hex::encode` builds
/// its `String` a `char` at a time, which cost as much as hashing a step's records.
pub(crate) fn digest_hex(digest: [u8; 32]) -> String {
    let mut buf = [0u8; 64];
    // 64 bytes hold 32 bytes' hex exactly, and hex digits are ASCII: neither can fail.
    match hex::encode_to_slice(digest, &mut buf) {
        Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
        Err(_) => hex::encode(digest),
    }
}

/// Append the canonical JSON of `value` (as [`canonical_json`] gives it) to `out`.
pub(crate) fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            use std::fmt::Write as _;
            // Writing to a String cannot fail.
            if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(f) = n.as_f64() {
                if f.is_finite() {
                    write_python_float(out, f);
                } else {
                    out.push_str(&python_float_repr(f));
                }
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    let entry = |out: &mut String, i: usize, k: &str, v: &Value| {
        if i > 0 {
            out.push_str(", ");
        }
        write_str(out, k);
        out.push_str(": ");
        write_value(out, v);
    };
    out.push('{');
    // serde_json's map iterates in key order, unless some crate in the build turns on its
    // `preserve_order` feature (insertion order): sort only then.
    if map.keys().is_sorted() {
        for (i, (k, v)) in map.iter().enumerate() {
            entry(out, i, k, v);
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (i, (k, v)) in entries.into_iter().enumerate() {
            entry(out, i, k, v);
        }
    }
    out.push('}');
}

fn write_str(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    // Printable ASCII but `"` and `\\` is copied as is, a run at a time.
    let plain = |b: u8| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\';
    let mut rest = s;
    while let Some(at) = rest.bytes().position(|b| !plain(b)) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(c) = rest.chars().next() else { break };
        rest = &rest[c.len_utf8()..];
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    // Writing to a String cannot fail.
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push_str(rest);
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in `-4 ..= 15`, else scientific with a signed, at least two-digit
/// exponent; integral values keep a `.0`.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let mut out = String::new();
    write_python_float(&mut out, f);
    out
}

/// [`python_float_repr`] of a finite `f`, appended to `out` without allocating (a step's
/// records hold several floats, each of which took four strings).
pub(crate) fn write_python_float(out: &mut String, f: f64) {
    use std::fmt::Write as _;
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e-7", "1e16", "-0e0". The
    // longest is 24 bytes ("-2.2250738585072014e-308").
    let mut sci = StackText::<32>::new();
    if write!(sci, "{f:e}").is_err() {
        // Cannot happen for an f64 (see above); the standard text is still a number.
        let _ = write!(out, "{f:?}");
        return;
    }
    let sci = sci.as_str();
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let mut digits = StackText::<32>::new();
    for c in mantissa.chars().filter(|c| *c != '.') {
        let _ = digits.write_char(c);
    }
    let digits = digits.as_str();
    // value = 0.d1d2…dn × 10^decpt
    let decpt = exp + 1;
    let n = digits.len() as i32;
    if neg {
        out.push('-');
    }
    if (-3..=16).contains(&decpt) {
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-decpt) as usize));
            out.push_str(digits);
        } else if decpt < n {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        } else {
            out.push_str(digits);
            out.extend(std::iter::repeat_n('0', (decpt - n) as usize));
            out.push_str(".0");
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", e.abs());
    }
}

/// A short text written on the stack (`N` bytes at most; a longer write fails).
struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    fn new() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `str`s are written into it (see `write_str`).
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl<const N: usize> std::fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_float_reprs() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-7, "1e-07"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0.0"),
            (123456789.123, "123456789.123"),
            (2.5, "2.5"),
            (-1.5, "-1.5"),
            (100.0, "100.0"),
            (1.5e300, "1.5e+300"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.30000000000000004, "0.30000000000000004"),
            (1234567890123456.7, "1234567890123456.8"),
            (12345678901234567.0, "1.2345678901234568e+16"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f:?}");
        }
    }

    proptest::proptest! {
        /// Any finite float (subnormals and the extremes included, whose `{:e}` text is the
        /// longest) reads back as itself and has Python's shape: a `.` or an exponent.
        #[test]
        fn any_float_round_trips_in_python_form(bits in proptest::prelude::any::<u64>()) {
            let f = f64::from_bits(bits);
            proptest::prop_assume!(f.is_finite());
            let text = python_float_repr(f);
            proptest::prop_assert_eq!(text.parse::<f64>().ok(), Some(f), "{}", text);
            proptest::prop_assert!(text.contains('.') || text.contains('e'), "{}", text);
        }
    }

    #[test]
    fn afk_reference_vectors() {
        // Hashes computed by AFK Python's own `json_hash` (at commit `bcc10b6`) for these inputs.
        assert_eq!(
            input_hash("counting_add", &json!({"a": 2, "b": 5})),
            "bc9b0a269cc532de5bf895a3c74f77f355f43b349e5bc57ed5edb5689da7563c"
        );
        assert_eq!(
            output_hash(&json!({"result": 7})),
            "7488ac96fe74a98a2281d69a5350852cd111aa9c249b7349c49b018f2a240861"
        );
        assert_eq!(
            output_hash(&Value::Null),
            "5073df5585c0ce1258a2b08172be14cd2280b6ba17749f035fdc7896b9056f77"
        );
        assert_eq!(
            input_hash("t", &json!({"s": "😀"})),
            "1440319811ba792b3b55b8dcd977d2bff206039b693161fb7c5456e7abae0e04"
        );
    }

    #[test]
    fn shortcut_hashes_equal_the_general_form() {
        let args = json!({"x": 1.0, "y": "é", "z": [true, null], "w": 1e16, "v": 0.1});
        assert_eq!(
            input_hash("t", &args),
            json_hash(&json!({"tool_name": "t", "args": args}))
        );
        assert_eq!(
            input_hash("t", &args),
            "c946d85d1868571272b4670bd727b752e5296f24b87a4ece03ebad9bf36f6b0b"
        );
        let out = json!([1, {"b": 2, "a": "\u{7f}"}]);
        assert_eq!(output_hash(&out), json_hash(&json!({"output": out})));
    }

    #[test]
    fn strings_escape_as_python_does_around_plain_runs() {
        // Expected: Python's json.dumps(v, sort_keys=True, ensure_ascii=True).
        let s = "plain a\"b\\c/d\ne\rf\tg\u{8}h\u{c}i\u{0}j\u{1f}k\u{7f}l é 😀 end";
        let want = r#"{"b": ["plain a\"b\\c/d\ne\rf\tg\bh\fi\u0000j\u001fk\u007fl \u00e9 \ud83d\ude00 end"], "k": "plain a\"b\\c/d\ne\rf\tg\bh\fi\u0000j\u001fk\u007fl \u00e9 \ud83d\ude00 end"}"#;
        assert_eq!(canonical_json(&json!({"k": s, "b": [s]})), want);
        assert_eq!(canonical_json(&json!("")), r#""""#);
        assert_eq!(canonical_json(&json!("\"")), r#""\"""#);
    }

    #[test]
    fn the_argument_map_hashes_as_its_value() {
        let args = json!({"z": {"b": [1, -2, 0.5]}, "a": "x\u{1}"});
        let Value::Object(map) = &args else {
            unreachable!()
        };
        assert_eq!(
            EffectHashes::plain().input_hash_of_args("t", map),
            input_hash("t", &args)
        );
        assert_eq!(
            EffectHashes::plain()
                .input_hash_of_args("counting_add", json!({"a": 2, "b": 5}).as_object().unwrap()),
            "bc9b0a269cc532de5bf895a3c74f77f355f43b349e5bc57ed5edb5689da7563c"
        );
    }
}
