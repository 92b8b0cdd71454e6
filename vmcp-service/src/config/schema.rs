//! The configuration's JSON Schema, generated from the Rust types, and the key
//! suggestions read from it ("did you mean `url`?").
//!
//! The loader only warns on keys it does not use (a file written for the reference
//! vMCP keeps working), but the schema is strict: every object says
//! `additionalProperties: false`, so an editor flags a misspelled key as it is typed.

use serde_json::{Map, Value};

use super::VmcpConfig;

/// The JSON Schema (draft 2020-12) of the whole configuration file.
pub fn json_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(VmcpConfig))
        .unwrap_or_else(|_| Value::Object(Map::new()));
    close_objects(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        root.insert(
            "title".into(),
            Value::String("vmcp configuration (vmcp.yaml)".into()),
        );
    }
    schema
}

/// `additionalProperties: false` on every object schema with named properties (maps
/// have none and keep their value schema).
fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object.contains_key("properties") && !object.contains_key("additionalProperties") {
                object.insert("additionalProperties".into(), Value::Bool(false));
            }
            object.values_mut().for_each(close_objects);
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// The closest known key for the unknown key at `path` (dotted as `serde_ignored`
/// writes it: `backends.0.URL`), if one is close enough to be a likely typo.
pub fn suggest_key(path: &str) -> Option<String> {
    let schema = json_schema();
    let mut segments: Vec<&str> = path.split('.').collect();
    let unknown = segments.pop()?;
    let mut at = &schema;
    for segment in segments {
        at = child(&schema, at, segment)?;
    }
    let known: Vec<&String> = object_of(&schema, at)?
        .get("properties")?
        .as_object()?
        .keys()
        .collect();
    closest(unknown, known.iter().map(|k| k.as_str()))
}

/// The best candidate: same letters in another case first, else the smallest edit
/// distance within about a third of the word.
fn closest<'a>(unknown: &str, known: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
    if let Some(same) = known.clone().find(|k| k.eq_ignore_ascii_case(unknown)) {
        return Some(same.to_owned());
    }
    let limit = (unknown.len() / 3).max(1);
    known
        .map(|k| {
            (
                strsim::damerau_levenshtein(&k.to_lowercase(), &unknown.to_lowercase()),
                k,
            )
        })
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k.to_owned())
}

/// The schema of `segment` under `at`: a property, a list item or a map value.
fn child<'s>(root: &'s Value, at: &'s Value, segment: &str) -> Option<&'s Value> {
    let object = object_of(root, at)?;
    if segment.parse::<usize>().is_ok()
        && let Some(items) = object.get("items")
    {
        return Some(items);
    }
    if let Some(property) = object.get("properties").and_then(|p| p.get(segment)) {
        return Some(property);
    }
    object.get("additionalProperties").filter(|v| v.is_object())
}

/// `at` with `$ref`s followed and `anyOf`/`oneOf` (an `Option`) opened, down to the
/// schema that describes an object or a list.
fn object_of<'s>(root: &'s Value, at: &'s Value) -> Option<&'s Map<String, Value>> {
    let mut at = at;
    for _ in 0..8 {
        let object = at.as_object()?;
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            let name = reference.strip_prefix("#/$defs/")?;
            at = root.get("$defs")?.get(name)?;
        } else if let Some(options) = object
            .get("anyOf")
            .or_else(|| object.get("oneOf"))
            .and_then(Value::as_array)
        {
            at = options
                .iter()
                .find(|o| o.get("type").and_then(Value::as_str) != Some("null"))?;
        } else {
            return Some(object);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_by_case_and_by_edit_distance_at_the_right_depth() {
        assert_eq!(suggest_key("backends.0.URL").as_deref(), Some("url"));
        assert_eq!(
            suggest_key("aggregation.conflictResolutoin").as_deref(),
            Some("conflictResolution")
        );
        assert_eq!(
            suggest_key("incomingAuth.oidc.audiance").as_deref(),
            Some("audience")
        );
        assert_eq!(suggest_key("operational.logLevel"), None, "nothing close");
    }

    #[test]
    fn the_schema_closes_objects_but_not_maps() {
        let schema = json_schema();
        assert_eq!(schema["additionalProperties"], false);
        let backend = &schema["$defs"]["BackendConfig"];
        assert_eq!(backend["additionalProperties"], false, "{backend}");
        assert!(backend["properties"]["metadata"]["additionalProperties"].is_object());
    }
}
