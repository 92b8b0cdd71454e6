//! The SEP-2243 headers of a direct request: `Mcp-Name` and the `Mcp-Param-*`
//! headers of a tool's `x-mcp-header` annotated arguments, Base64-wrapped when a
//! value cannot travel bare.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use http::{HeaderName, HeaderValue};
use rmcp::model::JsonObject;
use rmcp::transport::common::http_header::{
    BASE64_HEADER_PREFIX, BASE64_HEADER_SUFFIX, HEADER_MCP_PARAM_PREFIX,
};
use serde_json::Value;

/// The SEP-2243 header names as `HeaderName::from_static` needs them (lower case).
pub(super) const LOWER_PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub(super) const LOWER_METHOD: &str = "mcp-method";
pub(super) const LOWER_NAME: &str = "mcp-name";

/// One `x-mcp-header` annotation of a tool's input schema: the argument at `path`
/// travels as the `Mcp-Param-<name>` header too.
#[derive(Debug)]
pub(super) struct ParamHeader {
    path: Vec<String>,
    header: HeaderName,
}

/// Every `x-mcp-header` annotation reached from the schema root through
/// `properties` (nested ones included), as SEP-2243 defines them.
pub(super) fn param_headers(schema: &JsonObject) -> Vec<ParamHeader> {
    fn walk(properties: Option<&Value>, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) {
        let Some(Value::Object(properties)) = properties else {
            return;
        };
        for (name, schema) in properties {
            path.push(name.clone());
            if let Some(Value::String(header)) = schema.get("x-mcp-header")
                && !header.is_empty()
                && let Ok(header) =
                    HeaderName::from_bytes(format!("{HEADER_MCP_PARAM_PREFIX}{header}").as_bytes())
            {
                out.push(ParamHeader {
                    path: path.clone(),
                    header,
                });
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

/// `Mcp-Param-*` headers for the annotated arguments present as primitives.
pub(super) fn add_param_headers(
    headers: &mut http::HeaderMap,
    annotations: &[ParamHeader],
    args: &JsonObject,
) {
    for annotation in annotations {
        let Some((first, rest)) = annotation.path.split_first() else {
            continue;
        };
        let value = rest
            .iter()
            .try_fold(args.get(first.as_str()), |value, key| {
                Some(value?.get(key.as_str()))
            })
            .flatten();
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        if let Ok(value) = HeaderValue::from_str(&encode_header_value(&text)) {
            headers.insert(annotation.header.clone(), value);
        }
    }
}

/// A header value as SEP-2243 sends it: Base64-wrapped when it cannot travel bare.
pub(super) fn encode_header_value(value: &str) -> std::borrow::Cow<'_, str> {
    let bytes = value.as_bytes();
    let needs_base64 = !value.is_empty()
        && (matches!(bytes.first(), Some(b' ' | b'\t'))
            || matches!(bytes.last(), Some(b' ' | b'\t'))
            || bytes.iter().any(|&b| !(0x20..=0x7e).contains(&b))
            || (value.starts_with(BASE64_HEADER_PREFIX) && value.ends_with(BASE64_HEADER_SUFFIX)));
    if needs_base64 {
        format!(
            "{BASE64_HEADER_PREFIX}{}{BASE64_HEADER_SUFFIX}",
            BASE64_STANDARD.encode(value)
        )
        .into()
    } else {
        value.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::common::http_header::{
        HEADER_MCP_METHOD, HEADER_MCP_NAME, HEADER_MCP_PROTOCOL_VERSION,
    };
    use serde_json::json;

    #[test]
    fn lower_case_header_names_match_rmcp() {
        assert!(HEADER_MCP_PROTOCOL_VERSION.eq_ignore_ascii_case(LOWER_PROTOCOL_VERSION));
        assert!(HEADER_MCP_METHOD.eq_ignore_ascii_case(LOWER_METHOD));
        assert!(HEADER_MCP_NAME.eq_ignore_ascii_case(LOWER_NAME));
    }

    #[test]
    fn header_values_are_base64_wrapped_only_when_needed() {
        assert_eq!(encode_header_value("plain-name"), "plain-name");
        assert_eq!(encode_header_value(""), "");
        assert_eq!(encode_header_value(" lead"), "=?base64?IGxlYWQ=?=");
        assert_eq!(encode_header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(
            encode_header_value("=?base64?x?="),
            "=?base64?PT9iYXNlNjQ/eD89?="
        );
    }

    #[test]
    fn annotated_arguments_become_param_headers() {
        let schema = json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "opts": {"type": "object", "properties": {
                    "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
                    "note": {"type": "string"}
                }},
                "blank": {"type": "string", "x-mcp-header": ""}
            }
        });
        let annotations = param_headers(schema.as_object().unwrap());
        assert_eq!(annotations.len(), 2);
        let args = json!({"region": "eu west", "opts": {"dry": true}, "blank": "x"});
        let mut headers = http::HeaderMap::new();
        add_param_headers(&mut headers, &annotations, args.as_object().unwrap());
        assert_eq!(headers["mcp-param-region"], "eu west");
        assert_eq!(headers["mcp-param-dry-run"], "true");
        assert_eq!(headers.len(), 2);
    }
}
