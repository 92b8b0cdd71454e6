//! A section's `type:` key, typed, but keeping a misspelling until validation can
//! report it with the exact field (serde would stop at the first one).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `type:` as written: one of `T`'s spellings, nothing, or something else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TypeKey<T> {
    /// Absent or empty.
    #[default]
    Missing,
    /// A known type.
    Known(T),
    /// Not one of `T`'s spellings (validation reports it).
    Unknown(String),
}

impl<T> TypeKey<T> {
    /// The type, when it is a known one.
    pub fn known(&self) -> Option<&T> {
        match self {
            TypeKey::Known(t) => Some(t),
            _ => None,
        }
    }
}

impl<T> From<T> for TypeKey<T> {
    fn from(t: T) -> Self {
        TypeKey::Known(t)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TypeKey<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.is_empty() {
            return Ok(TypeKey::Missing);
        }
        let known = T::deserialize(
            serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&text),
        );
        Ok(known.map_or(TypeKey::Unknown(text), TypeKey::Known))
    }
}

impl<T: Serialize> Serialize for TypeKey<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            TypeKey::Missing => serializer.serialize_str(""),
            TypeKey::Known(t) => t.serialize(serializer),
            TypeKey::Unknown(text) => serializer.serialize_str(text),
        }
    }
}
