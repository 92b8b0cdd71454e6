//! JSON decoding that refuses duplicate object keys.
//!
//! `serde_json::Value` keeps the last of two equal keys, while other parsers (and
//! rmcp's typed structs) keep the first or fail: a body with `"method"` twice could
//! be authorised as one method and run as another. A request with a duplicate key
//! at any depth is therefore refused as a whole.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

/// A `Value` decoded with duplicate keys refused.
pub(crate) struct Strict(pub(crate) Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

/// The visitor behind [`Strict`], for decoders that take some members themselves
/// and hand it the rest.
pub(crate) struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            insert_new(&mut object, key, value)?;
        }
        Ok(Value::Object(object))
    }
}

/// Insert `key` into `object`, refusing a key it already has.
pub(crate) fn insert_new<E: de::Error>(
    object: &mut Map<String, Value>,
    key: String,
    value: Value,
) -> Result<(), E> {
    // One hash of the key, not two (a lookup, then an insert).
    match object.entry(key) {
        Entry::Vacant(slot) => {
            slot.insert(value);
            Ok(())
        }
        Entry::Occupied(slot) => Err(duplicate(slot.key())),
    }
}

/// The error for a key seen twice in one object.
pub(crate) fn duplicate<E: de::Error>(key: &str) -> E {
    // The key is client-supplied: bound what the error repeats.
    let shown: String = key.chars().take(64).collect();
    E::custom(format_args!("duplicate key {shown:?}"))
}

/// Decode `bytes` as JSON, refusing duplicate keys. A duplicate key is a
/// [`serde_json::error::Category::Data`] error; malformed JSON (including invalid
/// UTF-8 and nesting past serde_json's recursion limit) is `Syntax` or `Eof`.
/// (Request bodies are decoded member by member, see `context::decode`; this is
/// the reference it is tested against.)
#[cfg(test)]
pub(crate) fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|Strict(value)| value)
}

#[cfg(test)]
mod tests {
    use serde_json::error::Category;

    use super::*;

    #[test]
    fn duplicate_keys_at_any_depth_are_data_errors() {
        for body in [
            r#"{"method":"a","method":"b"}"#,
            r#"{"params":{"name":"x","name":"y"}}"#,
            r#"[{"a":1,"a":1}]"#,
        ] {
            let error = from_slice(body.as_bytes()).unwrap_err();
            assert_eq!(error.classify(), Category::Data, "{body}");
        }
        assert_eq!(
            from_slice(br#"{"a":[1,{"b":null}],"c":"d"}"#).unwrap(),
            serde_json::json!({"a":[1,{"b":null}],"c":"d"})
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(
            from_slice(deep.as_bytes()).unwrap_err().classify(),
            Category::Syntax
        );
    }
}
