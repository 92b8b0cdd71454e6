//! Decoding a JSON-RPC body into a [`ParsedMcpRequest`]: once per request, by the
//! parse layer, so no later layer parses it again.

use serde_json::{Map, Value};

use super::{ClientInfo, McpRevision, ParseError, ParsedMcpRequest};

pub(super) const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";

impl ClientInfo {
    fn from_value(value: &Value) -> Option<Self> {
        let name = value.get("name")?.as_str()?.to_owned();
        let version = value
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Some(Self { name, version })
    }
}

impl ParsedMcpRequest {
    /// Decode a JSON-RPC body. `protocol_header` is the `MCP-Protocol-Version`
    /// header and `has_session` whether an `Mcp-Session-Id` header was sent; both
    /// feed the revision classification.
    pub fn parse(
        body: &[u8],
        protocol_header: Option<&str>,
        has_session: bool,
    ) -> Result<Self, ParseError> {
        let value = crate::strict_json::from_slice(body).map_err(|e| {
            if e.classify() == serde_json::error::Category::Data {
                ParseError::DuplicateKey(e.to_string())
            } else {
                ParseError::NotJson(e.to_string())
            }
        })?;
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => return Err(ParseError::Batch),
            _ => return Err(ParseError::NotAnObject),
        };
        let method = match object.remove("method") {
            Some(Value::String(method)) => method,
            Some(other) => {
                object.insert("method".to_owned(), other);
                String::new()
            }
            None => String::new(),
        };
        let id = object.remove("id");
        // rmcp reads ids as string or i64; anything else would reach it and be
        // answered 415 instead of -32600.
        if id
            .as_ref()
            .is_some_and(|id| !(id.is_string() || id.is_i64()))
        {
            return Err(ParseError::InvalidId);
        }
        let mut params = match object.remove("params") {
            Some(Value::Object(params)) => params,
            Some(other) => {
                object.insert("params".to_owned(), other);
                Map::new()
            }
            None => Map::new(),
        };
        // Take `key` when it has the expected shape; otherwise leave it in `params`.
        fn take<T>(
            params: &mut Map<String, Value>,
            key: &str,
            shape: impl FnOnce(Value) -> Result<T, Value>,
        ) -> Option<T> {
            let value = params.remove(key)?;
            match shape(value) {
                Ok(taken) => Some(taken),
                Err(value) => {
                    params.insert(key.to_owned(), value);
                    None
                }
            }
        }
        let string = |value| match value {
            Value::String(s) => Ok(s),
            other => Err(other),
        };
        let object_of = |value| match value {
            Value::Object(o) => Ok(o),
            other => Err(other),
        };
        let mut name = take(&mut params, "name", string);
        let client_info = params.get("clientInfo").and_then(ClientInfo::from_value);
        let mut uri = take(&mut params, "uri", string);
        // A completion names what it completes in `ref`; it is authorized as that
        // prompt or resource, so the name goes where those requests carry theirs.
        // `ref` itself stays in the params: it is forwarded as it came.
        if method == "completion/complete"
            && let Some(Value::Object(reference)) = params.get("ref")
        {
            let field = |key: &str| {
                reference
                    .get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            match reference.get("type").and_then(Value::as_str) {
                Some("ref/prompt") => name = field("name"),
                Some("ref/resource") => uri = field("uri"),
                _ => {}
            }
        }
        let arguments = take(&mut params, "arguments", object_of);
        let meta = take(&mut params, "_meta", object_of);
        let meta_version = meta
            .as_ref()
            .and_then(|m| m.get(PROTOCOL_VERSION_META))
            .and_then(Value::as_str);
        let client = client_info.or_else(|| {
            meta.as_ref()
                .and_then(|m| m.get(CLIENT_INFO_META))
                .and_then(ClientInfo::from_value)
        });
        let revision = if method == "initialize" || has_session {
            McpRevision::Legacy
        } else if let Some(version) = meta_version.or(protocol_header) {
            McpRevision::from_version(version)
        } else {
            McpRevision::Legacy
        };
        Ok(Self {
            id,
            method,
            name,
            uri,
            arguments,
            meta,
            client,
            revision: Some(revision),
            rest: object,
            params_rest: params,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::CallKind;

    #[test]
    fn parses_a_modern_tool_call_once() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gh_create_issue","arguments":{"repo":"a/b"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, Some("2026-07-28"), false).unwrap();
        assert_eq!(parsed.method, "tools/call");
        assert_eq!(parsed.id, Some(Value::from(7)));
        assert_eq!(parsed.name.as_deref(), Some("gh_create_issue"));
        assert_eq!(parsed.arguments.as_ref().unwrap()["repo"], "a/b");
        assert_eq!(parsed.revision, Some(McpRevision::Modern));
        assert_eq!(parsed.meta_protocol_version(), Some("2026-07-28"));
    }

    #[test]
    fn client_info_from_initialize_or_meta() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"c","version":"1"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.client.unwrap().name, "c");
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"m","version":"2"}}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.client.unwrap().version, "2");
    }

    #[test]
    fn initialize_and_session_requests_are_legacy() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.revision, Some(McpRevision::Legacy));
        let body = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        let parsed = ParsedMcpRequest::parse(body, Some("2025-11-25"), true).unwrap();
        assert_eq!(parsed.revision, Some(McpRevision::Legacy));
    }

    #[test]
    fn completions_name_what_they_complete() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"gh_p"},"argument":{"name":"a","value":""}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.target(), Some("gh_p"));
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Prompt));
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"x://{id}"},"argument":{"name":"id","value":""}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.uri.as_deref(), Some("x://{id}"));
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Resource));
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/other","name":"n"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.target(), None, "an unknown reference names nothing");
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Prompt));
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"x://a"}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Resource));
    }

    #[test]
    fn rejects_batches_and_garbage() {
        assert_eq!(
            ParsedMcpRequest::parse(b"[]", None, false),
            Err(ParseError::Batch)
        );
        assert!(matches!(
            ParsedMcpRequest::parse(b"{nope", None, false),
            Err(ParseError::NotJson(_))
        ));
        assert_eq!(
            ParsedMcpRequest::parse(b"42", None, false),
            Err(ParseError::NotAnObject)
        );
    }

    #[test]
    fn rejects_duplicate_keys_and_ids_rmcp_cannot_read() {
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#;
        assert!(matches!(
            ParsedMcpRequest::parse(twice, None, false),
            Err(ParseError::DuplicateKey(_))
        ));
        for id in ["null", "{}", "[1]", "true", "1.5"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
            assert_eq!(
                ParsedMcpRequest::parse(body.as_bytes(), None, false),
                Err(ParseError::InvalidId),
                "id {id}"
            );
        }
        let body = br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#;
        assert!(ParsedMcpRequest::parse(body, None, false).is_ok());
    }
}
