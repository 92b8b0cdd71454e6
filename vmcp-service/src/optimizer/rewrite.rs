//! `call_tool {tool_name, parameters}` as the `tools/call` it wraps, made before any
//! layer reads the request (the parse layer applies it behind the stack; the bare
//! service right after its own parse), so every decision, audit line, metric and
//! rate limit is about the real tool. `find_tool` is marked a local call: admitted
//! for everyone, its hits filtered per caller.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};
use vmcp_layers::context::{Arguments, ParsedMcpRequest};
use vmcp_layers::rewrite::{RequestRewrite, Rewrite, Rewritten};

use super::{CALL_TOOL, FIND_TOOL, is_meta_tool};
use crate::aggregator::Aggregator;

/// The optimizer's [`RequestRewrite`], on while the live configuration has an
/// `optimizer` section.
pub(crate) struct OptimizerRewrite {
    aggregator: Arc<Aggregator>,
}

impl OptimizerRewrite {
    pub(crate) fn new(aggregator: Arc<Aggregator>) -> Self {
        Self { aggregator }
    }
}

impl RequestRewrite for OptimizerRewrite {
    fn rewrite(&self, parsed: &ParsedMcpRequest, body: &[u8]) -> Option<Rewrite> {
        // The configuration is read only for a call of one of the optimizer's names
        // (not on every request).
        if parsed.method != "tools/call" || !parsed.name.as_deref().is_some_and(is_meta_tool) {
            return None;
        }
        self.aggregator.config().optimizer.as_ref()?;
        rewrite(parsed, body)
    }
}

/// The bare service's request after its parse, rewritten when the optimizer is on
/// (there is no authorization or audit layer to tell about a local call).
pub(crate) async fn bare(
    config: &crate::config::VmcpConfig,
    req: http::Request<http_body_util::Full<Bytes>>,
    parsed: Option<ParsedMcpRequest>,
) -> (
    http::Request<http_body_util::Full<Bytes>>,
    Option<ParsedMcpRequest>,
) {
    let Some(request) = parsed.as_ref().filter(|_| config.optimizer.is_some()) else {
        return (req, parsed);
    };
    let (mut parts, body) = req.into_parts();
    let bytes = match http_body_util::BodyExt::collect(body).await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    match rewrite(request, &bytes) {
        Some(Rewrite::Replaced(rewritten)) => {
            vmcp_layers::rewrite::retarget_headers(&mut parts.headers, &rewritten.parsed);
            (
                http::Request::from_parts(parts, http_body_util::Full::new(rewritten.body)),
                Some(rewritten.parsed),
            )
        }
        _ => (
            http::Request::from_parts(parts, http_body_util::Full::new(bytes)),
            parsed,
        ),
    }
}

/// The tool `call_tool`'s arguments name and the arguments for it: `tool_name` at
/// the top or (tolerated, as the reference does) inside `parameters`; `parameters`
/// an object, or a string holding one (some models send that), or absent.
pub(crate) fn unwrap_call(arguments: &Map<String, Value>) -> Option<(String, Map<String, Value>)> {
    let mut parameters = match arguments.get("parameters") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(text)) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            _ => return None,
        },
        Some(_) => return None,
    };
    let name = match arguments.get("tool_name") {
        Some(Value::String(name)) => name.clone(),
        Some(_) => return None,
        None => match parameters.remove("tool_name") {
            Some(Value::String(name)) => name,
            _ => return None,
        },
    };
    (!name.is_empty() && !is_meta_tool(&name)).then_some((name, parameters))
}

/// The rewrite of one request (see the module docs).
pub(crate) fn rewrite(parsed: &ParsedMcpRequest, body: &[u8]) -> Option<Rewrite> {
    if parsed.method != "tools/call" {
        return None;
    }
    match parsed.name.as_deref()? {
        FIND_TOOL => Some(Rewrite::Local),
        // Malformed: the handler answers it (invalid params), as for everyone.
        CALL_TOOL => {
            Some(replaced(parsed, body).map_or(Rewrite::Local, |r| Rewrite::Replaced(Box::new(r))))
        }
        _ => None,
    }
}

fn replaced(parsed: &ParsedMcpRequest, body: &[u8]) -> Option<Rewritten> {
    let (name, arguments) = unwrap_call(parsed.arguments.as_ref()?.map())?;
    let mut message: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let Some(Value::Object(params)) = message.get_mut("params") else {
        return None;
    };
    params.insert("name".into(), Value::String(name.clone()));
    params.insert("arguments".into(), Value::Object(arguments.clone()));
    let body = Bytes::from(serde_json::to_vec(&message).ok()?);
    Some(Rewritten {
        parsed: ParsedMcpRequest {
            name: Some(name),
            arguments: Some(Arguments::from_map(arguments)),
            ..parsed.clone()
        },
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(arguments: Value) -> (ParsedMcpRequest, Vec<u8>) {
        let body = json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "call_tool", "arguments": arguments, "_meta": {"k": 1}}
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        (ParsedMcpRequest::parse(&bytes, None, true).unwrap(), bytes)
    }

    fn replaced_of(arguments: Value) -> Option<(ParsedMcpRequest, Value)> {
        let (parsed, bytes) = request(arguments);
        match rewrite(&parsed, &bytes)? {
            Rewrite::Replaced(r) => Some((r.parsed, serde_json::from_slice(&r.body).unwrap())),
            Rewrite::Local => None,
        }
    }

    #[test]
    fn call_tool_becomes_the_call_it_wraps() {
        let (parsed, body) =
            replaced_of(json!({"tool_name": "gh_echo", "parameters": {"x": 1}})).unwrap();
        assert_eq!(parsed.name.as_deref(), Some("gh_echo"));
        assert_eq!(
            parsed.arguments.clone().map(Arguments::into_map),
            json!({"x": 1}).as_object().cloned()
        );
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "gh_echo", "arguments": {"x": 1}, "_meta": {"k": 1}}})
        );
        // The reparse of the new body agrees with the rewritten parse.
        let reparsed =
            ParsedMcpRequest::parse(&serde_json::to_vec(&body).unwrap(), None, true).unwrap();
        assert_eq!(reparsed.name, parsed.name);
        assert_eq!(reparsed.arguments, parsed.arguments);
    }

    #[test]
    fn tool_name_nested_in_parameters_is_tolerated() {
        let (parsed, _) =
            replaced_of(json!({"parameters": {"tool_name": "gh_echo", "x": 1}})).unwrap();
        assert_eq!(parsed.name.as_deref(), Some("gh_echo"));
        assert_eq!(
            parsed.arguments.clone().map(Arguments::into_map),
            json!({"x": 1}).as_object().cloned()
        );
        let (parsed, _) =
            replaced_of(json!({"tool_name": "t", "parameters": "{\"a\": true}"})).unwrap();
        assert_eq!(
            parsed.arguments.clone().map(Arguments::into_map),
            json!({"a": true}).as_object().cloned()
        );
    }

    #[test]
    fn malformed_or_meta_targets_stay_local() {
        for arguments in [
            json!({}),
            json!({"tool_name": 3}),
            json!({"tool_name": ""}),
            json!({"tool_name": "find_tool"}),
            json!({"tool_name": "call_tool"}),
            json!({"tool_name": "t", "parameters": [1]}),
        ] {
            let (parsed, bytes) = request(arguments.clone());
            assert!(
                matches!(rewrite(&parsed, &bytes), Some(Rewrite::Local)),
                "{arguments}"
            );
        }
    }

    #[test]
    fn other_requests_are_left_alone() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, true).unwrap();
        assert!(rewrite(&parsed, body).is_none());
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"find_tool"}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, true).unwrap();
        assert!(matches!(rewrite(&parsed, body), Some(Rewrite::Local)));
    }
}
