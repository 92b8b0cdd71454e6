//! Request-context types shared by the layers and the aggregating service.
//!
//! Layers put these into `http::Request` extensions; the service reads them back from
//! the request's `http::request::Parts`, which rmcp hands to its handler. Nothing here
//! depends on the service, so a layer can be used in front of any MCP server.

use serde_json::{Map, Value};

/// The caller on whose behalf a request runs.
///
/// Authentication layers insert one into the request extensions; without one, the
/// service treats the caller as [`Identity::anonymous`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Identity {
    /// Stable subject identifier (a JWT `sub`, or `anonymous`).
    pub subject: String,
    /// Token issuer, when the identity came from a token.
    pub issuer: Option<String>,
    /// Group memberships, used as Cedar parents.
    pub groups: Vec<String>,
    /// All validated claims, for policies that need them.
    pub claims: Map<String, Value>,
}

impl Identity {
    /// The identity of an unauthenticated caller.
    pub fn anonymous() -> Self {
        Self {
            subject: "anonymous".to_owned(),
            ..Self::default()
        }
    }

    /// True for the identity returned by [`Identity::anonymous`].
    pub fn is_anonymous(&self) -> bool {
        self.issuer.is_none() && self.subject == "anonymous"
    }
}

/// The MCP revision a request (or a backend) speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpRevision {
    /// MCP 2025-11-25: `initialize`, `Mcp-Session-Id`, SSE streams.
    Legacy,
    /// MCP 2026-07-28: stateless, `server/discover`, per-request `_meta`.
    Modern,
}

impl McpRevision {
    /// The protocol version string of this revision.
    pub fn as_str(self) -> &'static str {
        match self {
            McpRevision::Legacy => "2025-11-25",
            McpRevision::Modern => "2026-07-28",
        }
    }

    /// Classify a protocol version string: `2026-07-28` and later are Modern.
    pub fn from_version(version: &str) -> Self {
        if version >= "2026-07-28" {
            McpRevision::Modern
        } else {
            McpRevision::Legacy
        }
    }
}

impl std::fmt::Display for McpRevision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC request body decoded once, so no later layer parses it again.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedMcpRequest {
    /// The JSON-RPC id; `None` for notifications and responses.
    pub id: Option<Value>,
    /// The JSON-RPC method (empty for a client's response to a server request).
    pub method: String,
    /// `params.name` for `tools/call` and `prompts/get`.
    pub name: Option<String>,
    /// `params.uri` for `resources/read`, `resources/subscribe`, `resources/unsubscribe`.
    pub uri: Option<String>,
    /// `params.arguments`, when an object.
    pub arguments: Option<Map<String, Value>>,
    /// `params._meta`, when an object.
    pub meta: Option<Map<String, Value>>,
    /// The revision the request speaks: Modern when it carries the
    /// `io.modelcontextprotocol/protocolVersion` `_meta` key or a Modern
    /// `MCP-Protocol-Version` header without a session; Legacy otherwise.
    pub revision: Option<McpRevision>,
}

/// Why a body could not be decoded as one JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    NotJson(String),
    /// The body is a JSON-RPC batch, which MCP no longer allows.
    #[error("JSON-RPC batches are not supported")]
    Batch,
    /// The body is JSON but not a JSON-RPC object.
    #[error("request body is not a JSON-RPC object")]
    NotAnObject,
}

const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

impl ParsedMcpRequest {
    /// Decode a JSON-RPC body. `protocol_header` is the `MCP-Protocol-Version`
    /// header and `has_session` whether an `Mcp-Session-Id` header was sent; both
    /// feed the revision classification.
    pub fn parse(
        body: &[u8],
        protocol_header: Option<&str>,
        has_session: bool,
    ) -> Result<Self, ParseError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => return Err(ParseError::Batch),
            _ => return Err(ParseError::NotAnObject),
        };
        let method = match object.remove("method") {
            Some(Value::String(method)) => method,
            _ => String::new(),
        };
        let id = object.remove("id");
        let mut params = match object.remove("params") {
            Some(Value::Object(params)) => params,
            _ => Map::new(),
        };
        let take_string = |params: &mut Map<String, Value>, key: &str| match params.remove(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let name = take_string(&mut params, "name");
        let uri = take_string(&mut params, "uri");
        let arguments = match params.remove("arguments") {
            Some(Value::Object(arguments)) => Some(arguments),
            _ => None,
        };
        let meta = match params.remove("_meta") {
            Some(Value::Object(meta)) => Some(meta),
            _ => None,
        };
        let meta_version = meta
            .as_ref()
            .and_then(|m| m.get(PROTOCOL_VERSION_META))
            .and_then(Value::as_str);
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
            revision: Some(revision),
        })
    }

    /// True for a request (it has an id and a method).
    pub fn is_request(&self) -> bool {
        self.id.is_some() && !self.method.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_modern_tool_call_once() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gh_create_issue","arguments":{"repo":"a/b"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, Some("2026-07-28"), false).unwrap();
        assert_eq!(parsed.method, "tools/call");
        assert_eq!(parsed.id, Some(Value::from(7)));
        assert_eq!(parsed.name.as_deref(), Some("gh_create_issue"));
        assert_eq!(parsed.arguments.unwrap()["repo"], "a/b");
        assert_eq!(parsed.revision, Some(McpRevision::Modern));
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
}
