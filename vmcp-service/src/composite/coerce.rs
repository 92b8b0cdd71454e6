//! Arguments rendered from templates are strings; the step's tool wants its own
//! types. Coerce each value to the tool's input schema (string → integer, number,
//! boolean; JSON text → object or array; nested objects and arrays recursively).

use serde_json::{Map, Value};

/// A value that does not fit its schema; the message names the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument {path}: {problem}")]
pub(crate) struct CoerceError {
    path: String,
    problem: String,
}

fn fail(path: &str, problem: impl Into<String>) -> CoerceError {
    CoerceError {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The schema's type, the first non-null one of a type list.
fn schema_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null"),
        _ => None,
    }
}

/// Coerce every argument to its property schema in `input_schema`.
pub(crate) fn coerce_arguments(
    arguments: Map<String, Value>,
    input_schema: &Map<String, Value>,
) -> Result<Map<String, Value>, CoerceError> {
    let properties = input_schema.get("properties");
    arguments
        .into_iter()
        .map(|(key, value)| {
            let value = match properties.and_then(|p| p.get(&key)) {
                Some(schema) => coerce(value, schema, &key)?,
                None => value,
            };
            Ok((key, value))
        })
        .collect()
}

/// Coerce `value` to `schema`; `path` names it in errors.
pub(crate) fn coerce(value: Value, schema: &Value, path: &str) -> Result<Value, CoerceError> {
    let Some(kind) = schema_type(schema) else {
        return Ok(value);
    };
    match (kind, value) {
        ("integer", Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| fail(path, format!("{s:?} is not an integer"))),
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Ok(Value::from(i)),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Value::from(f as i64)),
                _ => Err(fail(path, format!("{n} is not an integer"))),
            },
        },
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| fail(path, format!("{s:?} is not a number"))),
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(fail(path, format!("{s:?} is not true or false"))),
        },
        ("object", Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(map)) => coerce(Value::Object(map), schema, path),
            _ => Err(fail(path, "is not a JSON object")),
        },
        ("object", Value::Object(map)) => {
            let properties = schema.get("properties");
            let map = map
                .into_iter()
                .map(|(key, item)| {
                    let item = match properties.and_then(|p| p.get(&key)) {
                        Some(inner) => coerce(item, inner, &format!("{path}.{key}"))?,
                        None => item,
                    };
                    Ok((key, item))
                })
                .collect::<Result<Map<_, _>, CoerceError>>()?;
            Ok(Value::Object(map))
        }
        ("array", Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Array(items)) => coerce(Value::Array(items), schema, path),
            _ => Err(fail(path, "is not a JSON array")),
        },
        ("array", Value::Array(items)) => {
            let Some(inner) = schema.get("items") else {
                return Ok(Value::Array(items));
            };
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| coerce(item, inner, &format!("{path}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        ("string", Value::Number(n)) => Ok(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Ok(Value::String(b.to_string())),
        (_, value) => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn coerces_nested_strings_to_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "inner": {"type": "object", "properties": {
                "flag": {"type": "boolean"},
                "xs": {"type": "array", "items": {"type": "number"}}
            }}
        }});
        let args = json!({"n": "42", "inner": {"flag": "TRUE", "xs": ["1.5", "2"]}, "free": "x"});
        let out = coerce_arguments(
            args.as_object().unwrap().clone(),
            schema.as_object().unwrap(),
        )
        .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"n": 42, "inner": {"flag": true, "xs": [1.5, 2.0]}, "free": "x"})
        );
    }

    #[test]
    fn names_the_argument_that_does_not_fit() {
        let schema = json!({"type": "object", "properties": {"inner": {"type": "object", "properties": {"n": {"type": "integer"}}}}});
        let err = coerce_arguments(
            json!({"inner": {"n": "many"}}).as_object().unwrap().clone(),
            schema.as_object().unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "argument inner.n: \"many\" is not an integer"
        );
    }
}
