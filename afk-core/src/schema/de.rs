//! A small `Deserialize` generator for record structs.
//!
//! Derived `#[serde(flatten)]` buffers the whole object before deserializing fields, which
//! hides the failing field from `serde_path_to_error`. This macro reads the object key by key
//! instead: known keys go to their typed field (so an error names `payload.usage.input_tokens`),
//! the others into `extra`. Per field: `req` (missing is an error), `def` (missing gives
//! `Default::default()`), or `lenient(f)` (the value is read as JSON and `f(Value) ->
//! Result<T, String>` decides; missing gives the default).

/// Generate `Deserialize` for a struct with named fields and an `extra: Extra` field.
macro_rules! record_de {
    ($ty:ident { $($field:ident : $kind:ident $(($f:path))?),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("an object (", stringify!($ty), ")"))
                    }
                    #[allow(unused_mut)]
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> std::result::Result<$ty, A::Error> {
                        $(let mut $field = None;)*
                        let mut extra = $crate::schema::Extra::new();
                        while let Some(key) = map.next_key::<String>()? {
                            match key.as_str() {
                                $(stringify!($field) => {
                                    if $field.is_some() {
                                        return Err(serde::de::Error::duplicate_field(stringify!($field)));
                                    }
                                    $field = Some(record_de!(@read map, $kind $(($f))?));
                                })*
                                _ => {
                                    let value: serde_json::Value = map.next_value()?;
                                    extra.insert(key, value);
                                }
                            }
                        }
                        Ok($ty {
                            $($field: record_de!(@finish $field, $kind),)*
                            extra,
                        })
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
    (@read $map:ident, req) => { $map.next_value()? };
    (@read $map:ident, def) => { $map.next_value()? };
    (@read $map:ident, lenient($f:path)) => {{
        let value: serde_json::Value = $map.next_value()?;
        $f(value).map_err(serde::de::Error::custom)?
    }};
    (@finish $field:ident, req) => {
        match $field {
            Some(v) => v,
            None => return Err(serde::de::Error::missing_field(stringify!($field))),
        }
    };
    (@finish $field:ident, def) => { $field.unwrap_or_default() };
    (@finish $field:ident, lenient) => { $field.unwrap_or_default() };
}

pub(crate) use record_de;
