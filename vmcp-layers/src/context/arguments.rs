//! A call's `params.arguments` as the client wrote them: kept as raw JSON from the
//! parse to the backend request, and parsed into a map only where a layer reads a
//! field (Cedar conditions on `context.arguments`, audit data, composite templating).

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// `params.arguments`: a JSON object with no key repeated at any depth (the parse
/// refuses a request otherwise), held as the client's bytes.
///
/// [`Arguments::raw`] is what the service forwards; [`Arguments::map`] parses them,
/// once, for a layer that reads a field. Two are equal when their maps are.
pub struct Arguments {
    raw: Box<RawValue>,
    map: OnceLock<Map<String, Value>>,
}

impl Arguments {
    /// Arguments from a map (a rewritten or rendered call).
    pub fn from_map(map: Map<String, Value>) -> Self {
        // A map of JSON values always serializes.
        let raw = serde_json::value::to_raw_value(&map).unwrap_or_else(|_| empty_object());
        Self {
            raw,
            map: OnceLock::from(map),
        }
    }

    /// Arguments checked by the parse ([`checked`]).
    pub(super) fn from_checked(raw: Box<RawValue>) -> Self {
        Self {
            raw,
            map: OnceLock::new(),
        }
    }

    /// The arguments as the client wrote them (an object, without leading or
    /// trailing whitespace).
    pub fn raw(&self) -> &RawValue {
        &self.raw
    }

    /// The arguments as a map, parsed on first use.
    pub fn map(&self) -> &Map<String, Value> {
        self.map.get_or_init(|| {
            // Checked at the parse: an object without repeated keys, so this parse
            // cannot fail; were it to, the call would carry no arguments, not panic.
            serde_json::from_str(self.raw.get()).unwrap_or_default()
        })
    }

    /// The map, without a copy when it was already parsed.
    pub fn into_map(self) -> Map<String, Value> {
        self.map();
        self.map.into_inner().unwrap_or_default()
    }
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("`{}` is JSON")
}

impl Clone for Arguments {
    fn clone(&self) -> Self {
        Self {
            raw: self.raw.clone(),
            map: self.map.clone(),
        }
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get() || self.map() == other.map()
    }
}

impl fmt::Debug for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Arguments").field(&self.raw.get()).finish()
    }
}

impl Serialize for Arguments {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// Containers `serde_json` opens before it refuses a document as too deep: its
/// recursion limit (128) less one.
const MAX_DEPTH: usize = 127;

/// Whether `raw` — `params.arguments` of a body, at depth `depth` there (the body's
/// object is at depth 1) — is an object the parse accepts as strictly as it
/// accepts the rest of the body: no key repeated in any object, and no container
/// deeper than `serde_json` decodes. Nothing is allocated for keys without escapes
/// in objects of up to [`INLINE_KEYS`] members.
///
/// `false` says only that the parse must decode the body the slow way to find its
/// error (which is then the same error a decode into values gives).
pub(super) fn checked(raw: &RawValue, depth: usize) -> bool {
    if !raw.get().starts_with('{') {
        return false;
    }
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    Checked { depth }.deserialize(&mut deserializer).is_ok()
}

/// Keys kept on the stack per object before the check spills them into a set.
const INLINE_KEYS: usize = 8;

/// A value walked for [`checked`]: `depth` is that of the container it opens.
#[derive(Clone, Copy)]
struct Checked {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// An object key, borrowed from the input unless it has escapes (also the body's
/// keys, in `decode`).
pub(super) struct Key<'de>(pub(super) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl Checked {
    fn open<E: de::Error>(self) -> Result<Self, E> {
        if self.depth > MAX_DEPTH {
            return Err(E::custom("too deep"));
        }
        Ok(Self {
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.open()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.open()?;
        let mut inline: [Cow<'de, str>; INLINE_KEYS] = Default::default();
        let mut count = 0;
        let mut spilled = std::collections::HashSet::new();
        while let Some(Key(key)) = map.next_key()? {
            if count < INLINE_KEYS {
                if inline[..count].contains(&key) {
                    return Err(de::Error::custom("duplicate key"));
                }
                inline[count] = key;
            } else {
                if count == INLINE_KEYS {
                    spilled.extend(inline.iter().cloned());
                }
                if !spilled.insert(key) {
                    return Err(de::Error::custom("duplicate key"));
                }
            }
            count += 1;
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn objects_without_repeated_keys_pass() {
        for text in [
            r#"{}"#,
            r#"{"a":1,"b":[{"a":1},{"a":2}],"c":{"d":{"e":null}}}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}"#,
        ] {
            assert!(checked(&raw(text), 3), "{text}");
        }
    }

    #[test]
    fn repeated_keys_at_any_depth_and_non_objects_fail() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"x":[{"b":1,"b":1}]}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k0":9}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k8":9}"#,
            r#"[1]"#,
            r#""s""#,
        ] {
            assert!(!checked(&raw(text), 3), "{text}");
        }
    }

    #[test]
    fn depth_is_counted_from_the_body() {
        // serde_json refuses the 128th open container of a document.
        let nested = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        // The arguments object at depth 3 holding n arrays: the deepest is at 3 + n.
        assert!(checked(&raw(&nested(124)), 3));
        assert!(!checked(&raw(&nested(125)), 3));
        assert!(checked(&raw(&nested(125)), 2));
    }

    #[test]
    fn the_map_is_parsed_once_and_equality_is_by_value() {
        let a = Arguments::from_checked(raw(r#"{"b":1,"a":"x"}"#));
        assert_eq!(a.map()["a"], "x");
        let b = Arguments::from_map(a.map().clone());
        assert_eq!(a, b);
        assert_eq!(b.raw().get(), r#"{"b":1,"a":"x"}"#);
        assert_ne!(a, Arguments::from_checked(raw(r#"{"b":2}"#)));
        assert_eq!(a.clone().into_map(), *a.map());
    }
}
