//! The structured output of a composite: `output.properties` become the advertised
//! `outputSchema`, and after the run each property's `value` template is rendered
//! against the workflow context, coerced to its type, and replaced by its `default`
//! when it cannot be rendered or coerced.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::coerce::coerce;
use crate::config::composite::{OutputConfig, OutputProperty};
use crate::templates::Template;

/// Why the output could not be built; names the property.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("output property {path}: {problem}")]
pub(crate) struct OutputError {
    path: String,
    problem: String,
}

/// The advertised `outputSchema`.
pub(crate) fn schema(output: &OutputConfig) -> Map<String, Value> {
    let mut schema = object_schema(&output.properties);
    if !output.required.is_empty() {
        schema.insert("required".into(), json!(output.required));
    }
    schema
}

fn object_schema(properties: &BTreeMap<String, OutputProperty>) -> Map<String, Value> {
    let properties: Map<String, Value> = properties
        .iter()
        .map(|(name, p)| {
            let mut one = Map::new();
            one.insert("type".into(), json!(p.kind.as_str()));
            if let Some(d) = &p.description {
                one.insert("description".into(), json!(d));
            }
            if !p.properties.is_empty() {
                one.extend(object_schema(&p.properties));
            }
            (name.clone(), Value::Object(one))
        })
        .collect();
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema
}

/// Build the structured content from the finished workflow's `context`.
pub(crate) fn build(output: &OutputConfig, context: &Value) -> Result<Value, OutputError> {
    let object = build_object(&output.properties, context, "")?;
    for name in &output.required {
        if !object.contains_key(name) {
            return Err(OutputError {
                path: name.clone(),
                problem: "is required and has no value".into(),
            });
        }
    }
    Ok(Value::Object(object))
}

fn build_object(
    properties: &BTreeMap<String, OutputProperty>,
    context: &Value,
    prefix: &str,
) -> Result<Map<String, Value>, OutputError> {
    let mut object = Map::new();
    for (name, property) in properties {
        let path = format!("{prefix}{name}");
        if let Some(value) = property_value(property, context, &path)? {
            object.insert(name.clone(), value);
        }
    }
    Ok(object)
}

fn property_value(
    property: &OutputProperty,
    context: &Value,
    path: &str,
) -> Result<Option<Value>, OutputError> {
    let computed = match &property.value {
        Some(template) => Template::parse(template)
            .and_then(|t| t.render(context))
            .map_err(|e| e.to_string())
            .and_then(|text| {
                let schema = json!({"type": property.kind.as_str()});
                coerce(Value::String(text), &schema, path).map_err(|e| e.to_string())
            })
            .map(Some),
        None if !property.properties.is_empty() => {
            build_object(&property.properties, context, &format!("{path}."))
                .map(|o| Some(Value::Object(o)))
                .map_err(|e| e.to_string())
        }
        None => Ok(None),
    };
    match (computed, &property.default) {
        (Ok(Some(v)), _) => Ok(Some(v)),
        (Ok(None), default) => Ok(default.clone()),
        (Err(_), Some(default)) => Ok(Some(default.clone())),
        (Err(problem), None) => Err(OutputError {
            path: path.to_owned(),
            problem,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::composite::OutputType;

    fn prop(kind: OutputType, value: Option<&str>, default: Option<Value>) -> OutputProperty {
        OutputProperty {
            kind,
            value: value.map(str::to_owned),
            default,
            ..Default::default()
        }
    }

    #[test]
    fn coerces_values_and_falls_back_to_defaults() {
        let output = OutputConfig {
            properties: BTreeMap::from([
                (
                    "n".into(),
                    prop(OutputType::Integer, Some("{{ steps.a.output.n }}"), None),
                ),
                (
                    "missing".into(),
                    prop(
                        OutputType::String,
                        Some("{{ steps.b.output.url }}"),
                        Some(json!("none")),
                    ),
                ),
                (
                    "list".into(),
                    prop(
                        OutputType::Array,
                        Some("{{ steps.a.output.xs | json }}"),
                        None,
                    ),
                ),
            ]),
            required: vec!["n".into()],
        };
        let ctx =
            json!({"steps": {"a": {"output": {"n": "7", "xs": [1, 2]}}, "b": {"output": {}}}});
        assert_eq!(
            build(&output, &ctx).unwrap(),
            json!({"n": 7, "missing": "none", "list": [1, 2]})
        );
        let schema = Value::Object(schema(&output));
        assert_eq!(schema["properties"]["n"]["type"], "integer");
        assert_eq!(schema["required"], json!(["n"]));
    }
}
