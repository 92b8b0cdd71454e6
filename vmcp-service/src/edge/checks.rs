//! What rmcp checks before it dispatches a 2026-07-28 request, as predicates that
//! pass only when rmcp's check would pass too. A request that fails one is not
//! refused here: it goes to rmcp, which refuses it in its own words.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use http::{HeaderMap, HeaderName, Request, header};
use rmcp::model::{ClientCapabilities, Implementation, JsonObject};
use rmcp::transport::common::http_header::{BASE64_HEADER_PREFIX, BASE64_HEADER_SUFFIX};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use serde::Deserialize;
use serde_json::{Map, Value};
use vmcp_layers::context::ParsedMcpRequest;

/// The only protocol version served here.
const MODERN: &str = "2026-07-28";
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const RESERVED_PREFIX: &str = "io.modelcontextprotocol/";

// Header names as constants: a `&str` name is parsed and checked on every lookup.
pub(super) const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
pub(super) const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// A `Host` as rmcp compares it: lower case, IPv6 brackets removed, port if any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn new(host: &str, port: Option<u16>) -> Self {
        Self {
            host: host
                .trim_matches('[')
                .trim_matches(']')
                .to_ascii_lowercase(),
            port,
        }
    }

    /// An allow-list entry, read as rmcp reads it.
    fn allowed(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        Some(match http::uri::Authority::try_from(entry) {
            Ok(authority) => Self::new(authority.host(), authority.port_u16()),
            Err(_) => Self::new(entry, None),
        })
    }
}

/// rmcp's door checks, from its HTTP settings.
#[derive(Debug)]
pub(super) struct DoorChecks {
    /// `None`: every `Host` is allowed (rmcp's empty list).
    hosts: Option<Vec<Authority>>,
    body_limit: usize,
    /// The last `Host` found allowed.
    allowed_host: std::sync::RwLock<Option<Box<str>>>,
}

impl DoorChecks {
    pub(super) fn from_config(config: &StreamableHttpServerConfig) -> Self {
        Self {
            hosts: (!config.allowed_hosts.is_empty()).then(|| {
                config
                    .allowed_hosts
                    .iter()
                    .filter_map(|h| Authority::allowed(h))
                    .collect()
            }),
            body_limit: config.max_request_body_bytes,
            allowed_host: Default::default(),
        }
    }

    /// `Host`, `Origin`, `Accept`, `Content-Type`, the session header (present
    /// exactly when `session`) and the body size, in the order rmcp checks them.
    pub(super) fn door<B: http_body::Body>(&self, req: &Request<B>, session: bool) -> bool {
        let headers = req.headers();
        req.method() == http::Method::POST
            && self.host_allowed(headers)
            && !headers.contains_key(header::ORIGIN)
            && accepts_json_and_events(headers)
            && content_type_is_json(headers)
            && headers.contains_key(MCP_SESSION_ID) == session
            && req
                .body()
                .size_hint()
                .exact()
                .is_some_and(|n| n <= self.body_limit as u64)
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        // The answer for a `Host` never changes, and a client sends the same one
        // every time: reading it as rmcp does copies it and lower-cases it.
        if self
            .allowed_host
            .read()
            .is_ok_and(|last| last.as_deref() == Some(host))
        {
            return true;
        }
        let Ok(authority) = http::uri::Authority::try_from(host) else {
            return false;
        };
        let authority = Authority::new(authority.host(), authority.port_u16());
        let allowed = match &self.hosts {
            None => true,
            Some(allowed) => allowed.iter().any(|a| {
                a.host == authority.host && a.port.is_none_or(|port| authority.port == Some(port))
            }),
        };
        if allowed && let Ok(mut last) = self.allowed_host.write() {
            *last = Some(host.into());
        }
        allowed
    }
}

/// Both media types listed, with no parameters (a `q` weight could exclude one).
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let values = headers.get_all(header::ACCEPT);
    // What MCP clients send, compared whole before it is taken apart.
    let mut each = values.iter();
    if let (Some(only), None) = (each.next(), each.next())
        && only.as_bytes() == b"application/json, text/event-stream"
    {
        return true;
    }
    let (mut json, mut events) = (false, false);
    for value in values {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for range in value.split(',') {
            let range = range.trim();
            let is_json = range.eq_ignore_ascii_case("application/json");
            let is_events = range.eq_ignore_ascii_case("text/event-stream");
            if range.contains(';') || range.contains('"') {
                return false;
            }
            json |= is_json;
            events |= is_events;
        }
    }
    json && events
}

fn content_type_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// The sole value of a header, as text.
fn sole(headers: &HeaderMap, name: HeaderName) -> Option<&str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// A SEP-2243 header value, unwrapped from Base64 when wrapped.
fn decoded(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    match value
        .strip_prefix(BASE64_HEADER_PREFIX)
        .and_then(|inner| inner.strip_suffix(BASE64_HEADER_SUFFIX))
    {
        None => Some(value.into()),
        Some(inner) => {
            let bytes = BASE64_STANDARD.decode(inner).ok()?;
            String::from_utf8(bytes).ok().map(Into::into)
        }
    }
}

/// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` agree with the body.
pub(super) fn standard_headers(headers: &HeaderMap, parsed: &ParsedMcpRequest) -> bool {
    if sole(headers, MCP_PROTOCOL_VERSION) != Some(MODERN)
        || parsed.meta_protocol_version() != Some(MODERN)
        || sole(headers, MCP_METHOD) != Some(parsed.method.as_str())
    {
        return false;
    }
    let expected = match parsed.method.as_str() {
        "tools/call" | "prompts/get" => parsed.name.as_deref(),
        "resources/read" => parsed.uri.as_deref(),
        _ => return true,
    };
    match (expected, sole(headers, MCP_NAME).and_then(decoded)) {
        (Some(expected), Some(header)) => header == expected,
        _ => false,
    }
}

/// The request `_meta` of a plain request: the protocol version (checked with the
/// headers), readable client capabilities and client info, and no other reserved
/// key (`progressToken` and `logLevel` ask for a stream). `Some(declares tasks)`.
pub(super) fn plain_meta(meta: &Map<String, Value>) -> Option<bool> {
    let mut capabilities = None;
    for (key, value) in meta {
        match key.as_str() {
            PROTOCOL_VERSION => {}
            // What clients send, recognized without building rmcp's types: empty
            // capabilities, and client info of a name and a version.
            CLIENT_CAPABILITIES => {
                capabilities = Some(match value {
                    Value::Object(declared) if declared.is_empty() => {
                        ClientCapabilities::default().supports_tasks()
                    }
                    _ => ClientCapabilities::deserialize(value)
                        .ok()?
                        .supports_tasks(),
                });
            }
            CLIENT_INFO if name_and_version(value) => {}
            CLIENT_INFO => {
                Implementation::deserialize(value).ok()?;
            }
            "progressToken" => return None,
            key if key.starts_with(RESERVED_PREFIX) => return None,
            _ => {}
        }
    }
    capabilities
}

/// A client info of exactly a string `name` and a string `version`: valid
/// `Implementation`s (every other member is optional).
fn name_and_version(value: &Value) -> bool {
    value.as_object().is_some_and(|info| {
        info.len() == 2
            && info
                .iter()
                .all(|(key, value)| matches!(key.as_str(), "name" | "version") && value.is_string())
    })
}

/// Whether a tool's schema promotes arguments to `Mcp-Param-*` headers anywhere
/// (rmcp then checks those headers; such calls stay with it).
pub(super) fn promotes_arguments(schema: &JsonObject) -> bool {
    fn walk(value: &Value) -> bool {
        match value {
            Value::Object(map) => map
                .iter()
                .any(|(key, value)| key == "x-mcp-header" || walk(value)),
            Value::Array(items) => items.iter().any(walk),
            _ => false,
        }
    }
    schema
        .iter()
        .any(|(key, value)| key == "x-mcp-header" || walk(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn accept_must_name_both_without_weights() {
        let ok = headers(&[("accept", "application/json, text/event-stream")]);
        assert!(accepts_json_and_events(&ok));
        for bad in [
            "application/json",
            "application/json, text/event-stream;q=0",
            "*/*",
        ] {
            assert!(
                !accepts_json_and_events(&headers(&[("accept", bad)])),
                "{bad}"
            );
        }
    }

    #[test]
    fn base64_names_are_unwrapped() {
        assert_eq!(decoded("=?base64?aMOpbGxv?=").as_deref(), Some("héllo"));
        assert_eq!(decoded("plain").as_deref(), Some("plain"));
        assert_eq!(decoded("=?base64?!!?="), None);
    }

    #[test]
    fn hosts_follow_rmcps_allow_list() {
        let checks = DoorChecks::from_config(&StreamableHttpServerConfig::default());
        for ok in ["localhost", "127.0.0.1:8080", "[::1]:1", "LOCALHOST"] {
            assert!(checks.host_allowed(&headers(&[("host", ok)])), "{ok}");
        }
        // Asked again, in turns (the last allowed `Host` is remembered), each answer stands.
        for _ in 0..2 {
            for bad in ["evil.example", "localhost.evil", "", "evil.example:8080"] {
                assert!(!checks.host_allowed(&headers(&[("host", bad)])), "{bad}");
                assert!(checks.host_allowed(&headers(&[("host", "localhost")])));
            }
        }
    }

    #[test]
    fn streaming_meta_is_not_plain() {
        let meta = |extra: Value| {
            let mut meta = serde_json::json!({
                PROTOCOL_VERSION: MODERN,
                CLIENT_CAPABILITIES: {},
            });
            meta.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            meta.as_object().unwrap().clone()
        };
        assert_eq!(plain_meta(&meta(serde_json::json!({}))), Some(false));
        assert_eq!(
            plain_meta(&meta(serde_json::json!({"traceparent": "x"}))),
            Some(false)
        );
        for streaming in [
            serde_json::json!({"progressToken": 1}),
            serde_json::json!({"io.modelcontextprotocol/logLevel": "debug"}),
        ] {
            assert_eq!(plain_meta(&meta(streaming)), None);
        }
        let mut missing = meta(serde_json::json!({}));
        missing.remove(CLIENT_CAPABILITIES);
        assert_eq!(plain_meta(&missing), None);
    }
}
