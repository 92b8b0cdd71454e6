//! One audit line: its schema (serialized in field order without intermediate
//! `Value`s), its outcome, and the pieces of a request it is made from (event and
//! target types, redacted and capped payloads, client strings cut to a bound).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::context::{CallKind, ClientInfo, ListKind};

/// What became of a request (or event), as its line's `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Success,
    /// A 4xx other than 401/403, or a JSON-RPC error.
    Failure,
    /// 401 or 403.
    Denied,
    /// A 5xx, a response that never finished on the server's side, or a panic.
    Error,
    /// The caller cancelled the request: a Legacy `notifications/cancelled` the
    /// service acted on, or the client went away before the answer ended.
    Cancelled,
    /// A rate limit refused the request.
    Limited,
}

impl Outcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
            Self::Denied => "denied",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Limited => "limited",
        }
    }
}

pub(super) fn event_type(method: Option<&str>, http: &http::Method) -> &'static str {
    match method {
        Some("initialize") => "mcp_initialize",
        Some("server/discover") => "mcp_discover",
        Some("ping") => "mcp_ping",
        Some("tools/call") => "mcp_tool_call",
        Some("tools/list") => "mcp_tools_list",
        Some("resources/read") => "mcp_resource_read",
        Some("resources/list") => "mcp_resources_list",
        Some("resources/templates/list") => "mcp_resource_templates_list",
        Some("prompts/get") => "mcp_prompt_get",
        Some("prompts/list") => "mcp_prompts_list",
        Some("completion/complete") => "mcp_completion",
        Some(m) if m.starts_with("notifications/") => "mcp_notification",
        Some(_) => "mcp_request",
        None if http == http::Method::GET => "mcp_stream",
        None if http == http::Method::DELETE => "mcp_session_end",
        None => "mcp_request",
    }
}

pub(super) fn target_type(method: &str) -> Option<&'static str> {
    let kind = CallKind::of_method(method).or_else(|| {
        Some(match ListKind::of_method(method)? {
            ListKind::Tools => CallKind::Tool,
            ListKind::Prompts => CallKind::Prompt,
            ListKind::Resources | ListKind::ResourceTemplates => CallKind::Resource,
        })
    })?;
    Some(match kind {
        CallKind::Tool => "tool",
        CallKind::Prompt => "prompt",
        CallKind::Resource => "resource",
    })
}

const SECRET_WORDS: [&str; 8] = [
    "token",
    "password",
    "passwd",
    "secret",
    "authorization",
    "api_key",
    "apikey",
    "credential",
];

pub(super) fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                let lower = key.to_ascii_lowercase();
                if SECRET_WORDS.iter().any(|w| lower.contains(w)) {
                    *v = Value::String("[redacted]".into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

pub(super) fn capped(value: Value, max: usize) -> Value {
    let text = value.to_string();
    if text.len() <= max {
        value
    } else {
        json!({"truncated": true, "size_bytes": text.len()})
    }
}

/// Whether the first JSON-RPC response in `head` (a JSON body or an SSE stream) is an
/// error.
pub(super) fn is_jsonrpc_error(head: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        error: Option<serde::de::IgnoredAny>,
        id: Option<serde::de::IgnoredAny>,
    }
    // Without the key `"error"` in it (and without a `\u` escape, which could spell
    // it), no message in `head` can be an error: skip parsing it. A `tools/list`
    // result is kilobytes of JSON, and parsing it cost more than the rest of the
    // record.
    if memchr::memmem::find(head, br#""error""#).is_none()
        && memchr::memmem::find(head, br"\u").is_none()
    {
        return false;
    }
    if let Ok(probe) = serde_json::from_slice::<Probe>(head) {
        return probe.error.is_some();
    }
    String::from_utf8_lossy(head)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Probe>(d.trim()).ok())
        .find(|p| p.id.is_some())
        .is_some_and(|p| p.error.is_some())
}

/// One audit line, serialized in this field order without intermediate `Value`s.
#[derive(Serialize)]
pub(super) struct Record<'a> {
    pub(super) audit_id: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'a str,
    pub(super) logged_at: &'a str,
    pub(super) outcome: &'a str,
    pub(super) component: &'a str,
    pub(super) subjects: Subjects<'a>,
    pub(super) target: RecordTarget<'a>,
    pub(super) metadata: Metadata<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) data: Option<&'a Map<String, Value>>,
}

pub(super) struct Subjects<'a> {
    pub(super) user_id: Option<&'a str>,
    pub(super) user: Option<&'a Value>,
    pub(super) client: Option<&'a ClientInfo>,
}

impl Serialize for Subjects<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        if let Some(user_id) = self.user_id {
            map.serialize_entry("user_id", user_id)?;
        }
        if let Some(user) = self.user {
            map.serialize_entry("user", user)?;
        }
        if let Some(client) = self.client {
            cut_entry(&mut map, "client_name", "client_name_bytes", &client.name)?;
            cut_entry(
                &mut map,
                "client_version",
                "client_version_bytes",
                &client.version,
            )?;
        }
        map.end()
    }
}

/// `key: value` with a client-supplied `value` cut to
/// [`SHOWN_CHARS`](crate::shown::SHOWN_CHARS) characters, and `length_key`: its full
/// length in bytes when it was cut (a 1 MiB tool name must not make a 1 MiB record).
fn cut_entry<M: serde::ser::SerializeMap>(
    map: &mut M,
    key: &'static str,
    length_key: &'static str,
    value: &str,
) -> Result<(), M::Error> {
    let (kept, length) = crate::shown::cut(value);
    map.serialize_entry(key, kept)?;
    if let Some(length) = length {
        map.serialize_entry(length_key, &length)?;
    }
    Ok(())
}

pub(super) struct RecordTarget<'a> {
    /// The request's path, as the client sent it.
    pub(super) endpoint: &'a str,
    pub(super) method: Option<&'a str>,
    pub(super) kind: Option<&'static str>,
    pub(super) name: Option<&'a str>,
    pub(super) backend: Option<&'a str>,
}

impl Serialize for RecordTarget<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        cut_entry(&mut map, "endpoint", "endpoint_bytes", self.endpoint)?;
        if let Some(method) = self.method {
            cut_entry(&mut map, "method", "method_bytes", method)?;
        }
        if let Some(kind) = self.kind {
            map.serialize_entry("type", kind)?;
        }
        if let Some(name) = self.name {
            cut_entry(&mut map, "name", "name_bytes", name)?;
        }
        if let Some(backend) = self.backend {
            map.serialize_entry("backend", backend)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
pub(super) struct Metadata<'a> {
    pub(super) duration_ms: f64,
    pub(super) transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) protocol_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) response_size_bytes: Option<u64>,
}

/// A fresh audit id, a version-4 UUID (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`) written
/// into `buf`. Not one random draw per record (a `getrandom` system call each): the
/// first 8 bytes are drawn once per process (60 random bits around the version), the
/// last 8 hold a 58-bit bijection of a process counter (after the variant bits), so
/// ids are unique within a process and do not reveal the request count.
pub(super) fn audit_id(buf: &mut [u8; 36]) -> &str {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<(u64, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const MASK: u64 = (1 << 58) - 1;
    let (high, offset) = *SEED.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair());
    // Each step is a bijection of 58-bit values: distinct counters, distinct ids.
    let mut x = offset.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed)) & MASK;
    x ^= x >> 29;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & MASK;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & MASK;
    x ^= x >> 27;
    uuid::Builder::from_u128((u128::from(high) << 64) | u128::from(x))
        .with_version(uuid::Version::Random)
        .with_variant(uuid::Variant::RFC4122)
        .into_uuid()
        .hyphenated()
        .encode_lower(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_jsonrpc_errors_in_json_and_sse() {
        assert!(is_jsonrpc_error(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#
        ));
        assert!(!is_jsonrpc_error(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        ));
        assert!(is_jsonrpc_error(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}\n\n"
        ));
        assert!(!is_jsonrpc_error(
            b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"error\":1}}\n"
        ));
        assert!(is_jsonrpc_error(
            br#"{"jsonrpc":"2.0","id":1,"\u0065rror":{"code":1,"message":"x"}}"#
        ));
        assert!(!is_jsonrpc_error(
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#
        ));
        assert!(!is_jsonrpc_error(
            br#"{"jsonrpc":"2.0","id":1,"error":null}"#
        ));
    }

    #[test]
    fn target_types_follow_the_call_and_list_kinds() {
        assert_eq!(target_type("tools/call"), Some("tool"));
        assert_eq!(target_type("tools/list"), Some("tool"));
        assert_eq!(target_type("prompts/get"), Some("prompt"));
        assert_eq!(target_type("resources/templates/list"), Some("resource"));
        assert_eq!(target_type("resources/subscribe"), Some("resource"));
        assert_eq!(target_type("ping"), None);
    }

    #[test]
    fn client_strings_are_cut_with_their_length() {
        let long = "n".repeat(200_000);
        let client = ClientInfo {
            name: long.clone(),
            version: "1".into(),
        };
        let target = RecordTarget {
            endpoint: "/mcp",
            method: Some(&long),
            kind: Some("tool"),
            name: Some(&long),
            backend: None,
        };
        let subjects = Subjects {
            user_id: None,
            user: None,
            client: Some(&client),
        };
        let shown = "n".repeat(crate::shown::SHOWN_CHARS);
        assert_eq!(
            serde_json::to_value(&target).unwrap(),
            json!({"endpoint": "/mcp", "method": shown, "method_bytes": 200_000,
                   "type": "tool", "name": shown, "name_bytes": 200_000})
        );
        assert_eq!(
            serde_json::to_value(&subjects).unwrap(),
            json!({"client_name": shown, "client_name_bytes": 200_000, "client_version": "1"})
        );
    }

    #[test]
    fn redacts_secret_keys() {
        let mut v = json!({"arguments": {"api_key": "k", "nested": {"Password": "p", "ok": 1}}});
        redact(&mut v);
        assert_eq!(
            v,
            json!({"arguments": {"api_key": "[redacted]", "nested": {"Password": "[redacted]", "ok": 1}}})
        );
    }
}
