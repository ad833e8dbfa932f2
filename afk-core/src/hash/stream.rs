//! Canonical JSON straight from a `Serialize` value: the text
//! [`canonical_json`](super::canonical_json) gives for
//! `serde_json::to_value(value)`, without building the `Value` (every string and map of it
//! copied, then dropped) first. The transcript log's digest covers every message and record a
//! run writes, so this is on the write path of every step.
//!
//! Equivalence with the `Value` route, case by case: integers verbatim (`u128`/`i128` only
//! within the 64-bit range, as `to_value` allows), floats in Python `repr` form and non-finite
//! ones as `null` (`to_value` turns them into `Null`), `None`/unit as `null`, enums in serde's
//! externally tagged form, bytes as an array of numbers, map keys that are strings, chars,
//! integers or booleans as strings (others are an error, as in `to_value`), and a key written
//! twice keeps its last value (a `Map` insert). Tested against the `Value` route on arbitrary
//! JSON and on every message of the AFK corpus.

use std::cell::Cell;
use std::fmt::Display;

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::{write_python_float, write_str};

/// Buffers a canonical text is written with, kept per thread between uses: the digest of
/// every transcript entry and the hashes of every effect row are written with them, and a
/// fresh set per value was a tenth of a step's allocations. Taken out of the thread's slot
/// for a use and put back after it, so a use inside another (a `Serialize` impl that hashes)
/// finds the slot empty and works with fresh buffers; buffers that grew past
/// [`KEEP_CAPACITY`] (a huge tool output) are dropped rather than kept.
#[derive(Default)]
struct Buffers {
    out: String,
    entries: Vec<Entry>,
    keys: String,
    scratch: String,
    order: Vec<usize>,
}

impl Buffers {
    const fn new() -> Self {
        Buffers {
            out: String::new(),
            entries: Vec::new(),
            keys: String::new(),
            scratch: String::new(),
            order: Vec::new(),
        }
    }

    /// Emptied for the next use, or dropped if one of them is too large to keep.
    fn reusable(mut self) -> Self {
        let kept = [
            self.out.capacity(),
            self.keys.capacity(),
            self.scratch.capacity(),
        ]
        .into_iter()
        .all(|c| c <= KEEP_CAPACITY)
            && self.entries.capacity() <= KEEP_CAPACITY / 64
            && self.order.capacity() <= KEEP_CAPACITY / 64;
        if !kept {
            return Buffers::new();
        }
        self.out.clear();
        self.entries.clear();
        self.keys.clear();
        self.scratch.clear();
        self.order.clear();
        self
    }
}

/// The largest buffer kept for the next use (bytes of text, or entries times 64).
const KEEP_CAPACITY: usize = 64 * 1024;

thread_local! {
    static BUFFERS: Cell<Buffers> = const { Cell::new(Buffers::new()) };
}

/// This thread's buffers, or fresh ones while its thread-locals are being torn down.
fn take_buffers() -> Buffers {
    BUFFERS.try_with(Cell::take).unwrap_or_default()
}

/// Give the buffers back to this thread for its next use (dropped if it is shutting down).
fn put_back(bufs: Buffers) {
    let bufs = bufs.reusable();
    let _ = BUFFERS.try_with(|slot| slot.set(bufs));
}

/// Run `f` with this thread's reusable text buffer, emptied (see [`Buffers`]).
pub(crate) fn with_text_buffer<R>(f: impl FnOnce(&mut String) -> R) -> R {
    let mut bufs = take_buffers();
    let r = f(&mut bufs.out);
    put_back(bufs);
    r
}

/// `f` of the canonical JSON text of `value` (see the module docs); of `"null"` if it cannot be
/// represented as JSON (what hashing `serde_json::to_value(value).unwrap_or_default()` gave).
/// Written in this thread's reusable buffers (see [`Buffers`]).
pub(crate) fn with_canonical<T: Serialize + ?Sized, R>(value: &T, f: impl FnOnce(&str) -> R) -> R {
    let mut bufs = take_buffers();
    let written = {
        let mut canon = Canon {
            out: &mut bufs.out,
            entries: std::mem::take(&mut bufs.entries),
            keys: std::mem::take(&mut bufs.keys),
            scratch: std::mem::take(&mut bufs.scratch),
            order: std::mem::take(&mut bufs.order),
        };
        let written = value.serialize(&mut canon).is_ok();
        bufs.entries = canon.entries;
        bufs.keys = canon.keys;
        bufs.scratch = canon.scratch;
        bufs.order = canon.order;
        written
    };
    let r = if written { f(&bufs.out) } else { f("null") };
    put_back(bufs);
    r
}

/// The canonical JSON text of `value` as an owned string (see [`with_canonical`]).
#[cfg(test)]
pub(crate) fn canonical_of<T: Serialize + ?Sized>(value: &T) -> String {
    with_canonical(value, str::to_owned)
}

/// A value with no JSON form (a non-string map key, an integer beyond 64 bits).
#[derive(Debug)]
pub(crate) struct CanonError(String);

impl Display for CanonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CanonError {}

impl ser::Error for CanonError {
    fn custom<M: Display>(msg: M) -> Self {
        CanonError(msg.to_string())
    }
}

struct Canon<'a> {
    out: &'a mut String,
    /// The entries of the objects being written, innermost last (each `Obj` owns the tail
    /// from its `base`): one buffer for the whole value instead of one per object.
    entries: Vec<Entry>,
    /// The map keys of the objects being written, as they are (not escaped), likewise.
    keys: String,
    /// Where an object whose keys came out of order is copied to be written back in order.
    scratch: String,
    order: Vec<usize>,
}

/// A key of an object being written: a struct field's name, or a range of `Canon::keys`.
#[derive(Clone, Copy)]
enum Key {
    Field(&'static str),
    Map(usize, usize),
}

/// One `"key": value` of an object being written: the key, and where its text is in the
/// output.
struct Entry {
    key: Key,
    from: usize,
    to: usize,
}

fn key_text<'k>(keys: &'k str, key: &Key) -> &'k str {
    match *key {
        Key::Field(name) => name,
        Key::Map(from, to) => &keys[from..to],
    }
}

impl Canon<'_> {
    fn float(&mut self, f: f64) {
        if f.is_finite() {
            write_python_float(self.out, f);
        } else {
            self.out.push_str("null");
        }
    }

    fn int(&mut self, v: impl Display) {
        use std::fmt::Write as _;
        let _ = write!(self.out, "{v}");
    }

    /// `{"variant": ` of an externally tagged enum value; the caller closes the brace.
    fn open_variant(&mut self, variant: &str) {
        self.out.push('{');
        write_str(self.out, variant);
        self.out.push_str(": ");
    }
}

type Res = Result<(), CanonError>;

impl<'a, 'b> ser::Serializer for &'a mut Canon<'b> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = Seq<'a, 'b>;
    type SerializeTuple = Seq<'a, 'b>;
    type SerializeTupleStruct = Seq<'a, 'b>;
    type SerializeTupleVariant = Seq<'a, 'b>;
    type SerializeMap = Obj<'a, 'b>;
    type SerializeStruct = Obj<'a, 'b>;
    type SerializeStructVariant = Obj<'a, 'b>;

    fn serialize_bool(self, v: bool) -> Res {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Res {
        match (u64::try_from(v), i64::try_from(v)) {
            (Ok(u), _) => self.int(u),
            (_, Ok(i)) => self.int(i),
            _ => return Err(CanonError("number out of range".into())),
        }
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Res {
        self.int(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Res {
        let u = u64::try_from(v).map_err(|_| CanonError("number out of range".into()))?;
        self.int(u);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Res {
        self.float(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Res {
        self.float(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Res {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Res {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Res {
        use ser::SerializeSeq as _;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Res {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Res {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Res {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _name: &'static str, _i: u32, variant: &'static str) -> Res {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _n: &'static str, v: &T) -> Res {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> Res {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a, 'b>, CanonError> {
        self.out.push('[');
        Ok(Seq {
            ser: self,
            first: true,
            variant: false,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a, 'b>, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Seq<'a, 'b>, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Seq<'a, 'b>, CanonError> {
        self.open_variant(variant);
        self.out.push('[');
        Ok(Seq {
            ser: self,
            first: true,
            variant: true,
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Obj<'a, 'b>, CanonError> {
        self.out.push('{');
        let (start, base, keys_base) = (self.out.len(), self.entries.len(), self.keys.len());
        Ok(Obj {
            ser: self,
            start,
            base,
            keys_base,
            key: None,
            variant: false,
        })
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Obj<'a, 'b>, CanonError> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Obj<'a, 'b>, CanonError> {
        self.open_variant(variant);
        let mut obj = self.serialize_struct(variant, len)?;
        obj.variant = true;
        Ok(obj)
    }
}

struct Seq<'a, 'b> {
    ser: &'a mut Canon<'b>,
    first: bool,
    /// Inside `{"variant": [...]}`: one more brace to close.
    variant: bool,
}

impl Seq<'_, '_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        if !self.first {
            self.ser.out.push_str(", ");
        }
        self.first = false;
        value.serialize(&mut *self.ser)
    }

    fn close(self) -> Res {
        self.ser.out.push(']');
        if self.variant {
            self.ser.out.push('}');
        }
        Ok(())
    }
}

/// serde's four sequence traits differ only in the name of their element method.
macro_rules! seq_impl {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Seq<'_, '_> {
            type Ok = ();
            type Error = CanonError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
                self.element(value)
            }
            fn end(self) -> Res {
                self.close()
            }
        }
    )*};
}
seq_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// An object being written: each `"key": value` goes to the output as it comes, with its key
/// and byte range noted; `end` writes them back in key order if they came out of order.
struct Obj<'a, 'b> {
    ser: &'a mut Canon<'b>,
    /// Where the object's first entry starts (just past its `{`).
    start: usize,
    /// Its first entry in `Canon::entries`, and where its keys start in `Canon::keys`.
    base: usize,
    keys_base: usize,
    /// The key given by `serialize_key`, waiting for its value.
    key: Option<Key>,
    /// Inside `{"variant": {...}}`: one more brace to close.
    variant: bool,
}

impl Obj<'_, '_> {
    fn value<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Res {
        let ser = &mut *self.ser;
        if ser.entries.len() > self.base {
            ser.out.push_str(", ");
        }
        let from = ser.out.len();
        write_str(ser.out, key_text(&ser.keys, &key));
        ser.out.push_str(": ");
        value.serialize(&mut *ser)?;
        ser.entries.push(Entry {
            key,
            from,
            to: ser.out.len(),
        });
        Ok(())
    }

    fn close(self) -> Res {
        let Canon {
            out,
            entries,
            keys,
            scratch,
            order,
        } = self.ser;
        let mine = &entries[self.base..];
        let in_order = mine
            .windows(2)
            .all(|w| key_text(keys, &w[0].key) < key_text(keys, &w[1].key));
        if !in_order {
            // Stable, so of two equal keys the later stays later: keep the last (a `Map`
            // insert).
            order.clear();
            order.extend(0..mine.len());
            order.sort_by(|&a, &b| key_text(keys, &mine[a].key).cmp(key_text(keys, &mine[b].key)));
            scratch.clear();
            scratch.push_str(&out[self.start..]);
            out.truncate(self.start);
            let mut first = true;
            for (n, &i) in order.iter().enumerate() {
                let key = key_text(keys, &mine[i].key);
                if order
                    .get(n + 1)
                    .is_some_and(|&next| key_text(keys, &mine[next].key) == key)
                {
                    continue;
                }
                if !first {
                    out.push_str(", ");
                }
                first = false;
                out.push_str(&scratch[mine[i].from - self.start..mine[i].to - self.start]);
            }
        }
        out.push('}');
        if self.variant {
            out.push('}');
        }
        entries.truncate(self.base);
        keys.truncate(self.keys_base);
        Ok(())
    }
}

impl ser::SerializeMap for Obj<'_, '_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        let from = self.ser.keys.len();
        key.serialize(KeySer {
            keys: &mut self.ser.keys,
        })?;
        self.key = Some(Key::Map(from, self.ser.keys.len()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        let key = self
            .key
            .take()
            .ok_or_else(|| CanonError("map value without a key".into()))?;
        self.value(key, value)
    }
    fn end(self) -> Res {
        self.close()
    }
}

/// A struct and a struct variant are written alike (the variant's outer brace is `Obj`'s).
macro_rules! struct_impl {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Obj<'_, '_> {
            type Ok = ();
            type Error = CanonError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Res {
                self.value(Key::Field(key), value)
            }
            fn end(self) -> Res {
                self.close()
            }
        }
    )*};
}
struct_impl!(SerializeStruct, SerializeStructVariant);

/// A map key as `to_value` takes it: strings as they are, chars, integers and booleans as
/// their text; anything else is an error.
struct KeySer<'k> {
    keys: &'k mut String,
}

impl KeySer<'_> {
    fn text(self, v: impl Display) -> Result<(), CanonError> {
        use std::fmt::Write as _;
        let _ = write!(self.keys, "{v}");
        Ok(())
    }
}

fn key_error() -> CanonError {
    CanonError("key must be a string".into())
}

impl ser::Serializer for KeySer<'_> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = Impossible<(), CanonError>;
    type SerializeTuple = Impossible<(), CanonError>;
    type SerializeTupleStruct = Impossible<(), CanonError>;
    type SerializeTupleVariant = Impossible<(), CanonError>;
    type SerializeMap = Impossible<(), CanonError>;
    type SerializeStruct = Impossible<(), CanonError>;
    type SerializeStructVariant = Impossible<(), CanonError>;

    fn serialize_bool(self, v: bool) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_f32(self, _v: f32) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_f64(self, _v: f64) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_char(self, v: char) -> Result<(), CanonError> {
        self.text(v)
    }
    fn serialize_str(self, v: &str) -> Result<(), CanonError> {
        self.keys.push_str(v);
        Ok(())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _v: &T) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_unit(self) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _n: &'static str) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_unit_variant(
        self,
        _n: &'static str,
        _i: u32,
        variant: &'static str,
    ) -> Result<(), CanonError> {
        self.keys.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _n: &'static str,
        v: &T,
    ) -> Result<(), CanonError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _n: &'static str,
        _i: u32,
        _variant: &'static str,
        _v: &T,
    ) -> Result<(), CanonError> {
        Err(key_error())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _n: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _n: &'static str,
        _i: u32,
        _v: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, CanonError> {
        Err(key_error())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, CanonError> {
        Err(key_error())
    }
    fn serialize_struct(
        self,
        _n: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, CanonError> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _n: &'static str,
        _i: u32,
        _v: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, CanonError> {
        Err(key_error())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::{Value, json};

    use super::*;
    use crate::hash::canonical_json;
    use crate::schema::{Message, ToolExecution};

    /// What the digest used before: the canonical text of the `Value`.
    fn via_value<T: Serialize + ?Sized>(v: &T) -> String {
        canonical_json(&serde_json::to_value(v).unwrap_or_default())
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            prop_oneof![Just(1.0), Just(-0.0), Just(1e16), Just(1e-7), Just(0.1)]
                .prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::String),
            "[\"\\\\\\n\\r\\t\\u{7f}\\u{8}\\u{c}é😀a/]{0,6}".prop_map(Value::String),
        ]
    }

    fn json() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-c\\u{e9}]{0,3}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn equals_the_value_route_on_any_json(v in json()) {
            prop_assert_eq!(canonical_of(&v), canonical_json(&v));
        }
    }

    /// Every serde shape the `Value` route knows: enums of each kind, flattened maps,
    /// options, tuples, bytes, chars, non-string keys, non-finite floats, a key written twice.
    #[test]
    fn equals_the_value_route_on_every_serde_shape() {
        #[derive(Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(i32, String),
            Struct { z: f64, a: Option<bool> },
        }
        #[derive(Serialize)]
        struct Inner {
            b: u32,
            a: char,
        }
        #[derive(Serialize)]
        struct Outer {
            z: Vec<E>,
            m: BTreeMap<u32, &'static str>,
            b: BTreeMap<bool, ()>,
            t: (u8, f32),
            #[serde(with = "serde_bytes_like")]
            bytes: Vec<u8>,
            nan: f64,
            inf: f32,
            big: u128,
            neg: i128,
            none: Option<String>,
            unit: (),
            #[serde(flatten)]
            inner: Inner,
            #[serde(flatten)]
            extra: BTreeMap<String, Value>,
        }
        mod serde_bytes_like {
            pub(super) fn serialize<S: serde::Serializer>(
                v: &[u8],
                s: S,
            ) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        let v = Outer {
            z: vec![
                E::Unit,
                E::New(7),
                E::Tuple(-3, "x\u{1}".into()),
                E::Struct { z: 2.5, a: None },
            ],
            m: [(10, "ten"), (2, "two")].into_iter().collect(),
            b: [(true, ()), (false, ())].into_iter().collect(),
            t: (1, 0.5),
            bytes: vec![0, 255],
            nan: f64::NAN,
            inf: f32::INFINITY,
            big: u128::from(u64::MAX),
            neg: i128::from(i64::MIN),
            none: None,
            unit: (),
            inner: Inner { b: 1, a: 'é' },
            // `b` again: the value route keeps the last one.
            extra: [
                ("b".to_owned(), json!("later")),
                ("aa".to_owned(), json!([])),
            ]
            .into_iter()
            .collect(),
        };
        let got = canonical_of(&v);
        assert_eq!(got, via_value(&v));
        assert!(got.contains("\"b\": \"later\""), "{got}");
        assert!(got.contains("\"nan\": null"), "{got}");
    }

    /// A value whose `Serialize` writes a canonical text of its own (the thread's buffers
    /// are in use by the outer one): both texts are right, and the buffers serve the next use.
    #[test]
    fn a_canonical_text_written_inside_another_is_right() {
        struct Nested(Value);
        impl Serialize for Nested {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let inner = with_canonical(&self.0, str::to_owned);
                assert_eq!(inner, canonical_json(&self.0));
                let mut m = BTreeMap::new();
                m.insert("z", Value::String(inner));
                m.insert("a", self.0.clone());
                m.serialize(s)
            }
        }
        let v = json!({"b": [1, 0.5, "é"], "a": {"y": null, "x": true}});
        let outer = canonical_of(&Nested(v.clone()));
        let want = canonical_json(&json!({"z": canonical_json(&v), "a": v}));
        assert_eq!(outer, want);
        assert_eq!(canonical_of(&v), canonical_json(&v));
    }

    /// A text larger than the buffers keep is written whole, and the next one is right.
    #[test]
    fn a_huge_text_is_written_whole_and_not_kept() {
        let big = json!({"s": "x".repeat(3 * KEEP_CAPACITY), "n": 1.5});
        assert_eq!(canonical_of(&big), canonical_json(&big));
        let kept = BUFFERS.with(Cell::take);
        assert!(
            kept.out.capacity() <= KEEP_CAPACITY,
            "{}",
            kept.out.capacity()
        );
        let small = json!({"b": 2, "a": 1});
        assert_eq!(canonical_of(&small), r#"{"a": 1, "b": 2}"#);
    }

    #[test]
    fn what_the_value_route_refuses_hashes_as_null() {
        let float_keys: BTreeMap<String, BTreeMap<Vec<u8>, u8>> =
            [("k".to_owned(), [(vec![1], 1)].into_iter().collect())]
                .into_iter()
                .collect();
        assert!(serde_json::to_value(&float_keys).is_err());
        assert_eq!(canonical_of(&float_keys), "null");
        assert!(serde_json::to_value(u128::MAX).is_err());
        assert_eq!(canonical_of(&u128::MAX), "null");
    }

    /// Every message and tool execution record of the AFK corpus, typed as the runner holds
    /// them: the streamed text equals the `Value` route's.
    #[test]
    fn equals_the_value_route_on_the_corpus() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/afk-python");
        let (mut messages, mut records) = (0, 0);
        fn walk(v: &Value, f: &mut dyn FnMut(&str, &Value)) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m {
                        f(k, x);
                        walk(x, f);
                    }
                }
                Value::Array(items) => items.iter().for_each(|x| walk(x, f)),
                _ => {}
            }
        }
        for file in std::fs::read_dir(&dir).expect("corpus") {
            let path = file.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            let Ok(doc) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            // Stored values are JSON text inside the fixture; parse those too.
            let mut values = vec![doc.clone()];
            walk(&doc, &mut |_, x| {
                if let Some(inner) = x.as_str().and_then(|s| serde_json::from_str(s).ok()) {
                    values.push(inner);
                }
            });
            for value in &values {
                assert_eq!(canonical_of(value), canonical_json(value), "{path:?}");
                walk(value, &mut |k, x| match (k, x) {
                    ("messages", Value::Array(items)) => {
                        for m in items {
                            if let Ok(m) = serde_json::from_value::<Message>(m.clone()) {
                                assert_eq!(canonical_of(&m), via_value(&m), "{path:?}");
                                messages += 1;
                            }
                        }
                    }
                    ("tool_executions", Value::Array(items)) => {
                        for r in items {
                            if let Ok(r) = serde_json::from_value::<ToolExecution>(r.clone()) {
                                assert_eq!(canonical_of(&r), via_value(&r), "{path:?}");
                                records += 1;
                            }
                        }
                    }
                    _ => {}
                });
            }
        }
        assert!(
            messages > 100 && records > 10,
            "{messages} messages, {records} records"
        );
    }
}
