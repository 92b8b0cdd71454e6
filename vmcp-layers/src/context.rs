//! Request-context types shared by the layers and the aggregating service.
//!
//! Layers put these into `http::Request` extensions; the service reads them back from
//! the request's `http::request::Parts`, which rmcp hands to its handler. Nothing here
//! depends on the service, so a layer can be used in front of any MCP server.
//!
//! | Extension | Inserted by | Read by |
//! |---|---|---|
//! | `Arc<Identity>` | [`auth`](crate::auth) | discovery, authorization, audit, the service |
//! | `Arc<ParsedMcpRequest>` | [`auth`](crate::auth) (its parsing step) | every later layer |
//! | [`Discovered`] | [`discovery`](crate::discovery) | annotation and backend enrichment, authorization |
//! | [`ToolAnnotations`] | [`annotations`](crate::annotations) | authorization |
//! | [`AdmissionDecision`], [`AdmissionHandle`] | [`authz`](crate::authz) | [`gate`](crate::gate), the service's list filtering |
//! | [`BackendTarget`] | [`backend_enrichment`](crate::backend_enrichment) | telemetry, audit |
//! | [`BackendCalls`] | [`telemetry`](crate::telemetry) | the service, around each backend call |
//! | [`WorkflowAudit`] | [`audit`](crate::audit) | the service, for each composite tool step |
//!
//! What a layer learnt also travels back out in the *response* extensions
//! (`Arc<Identity>`, `Arc<ParsedMcpRequest>`, [`BackendTarget`]), which is how the
//! audit layer, sitting outside them, records who did what.

use std::sync::Arc;

use futures::future::BoxFuture;
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

/// The caller's bearer token, put next to [`Identity`] by the authentication layer
/// once it has validated it: the subject token of an RFC 8693 exchange for a backend.
/// Never printed (`Debug` is redacted) and never forwarded as is.
#[derive(Clone, PartialEq, Eq)]
pub struct SubjectToken(std::sync::Arc<str>);

impl SubjectToken {
    /// A validated token.
    pub fn new(token: &str) -> Self {
        Self(std::sync::Arc::from(token))
    }

    /// The token itself; only for putting it on the wire to the token endpoint.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectToken(<redacted>)")
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
    /// `params.name` for `tools/call` and `prompts/get`; `params.ref.name` for a
    /// `completion/complete` of a prompt (`ref/prompt`).
    pub name: Option<String>,
    /// `params.uri` for `resources/read`, `resources/subscribe`, `resources/unsubscribe`;
    /// `params.ref.uri` for a `completion/complete` of a resource (`ref/resource`).
    pub uri: Option<String>,
    /// `params.arguments`, when an object.
    pub arguments: Option<Map<String, Value>>,
    /// `params._meta`, when an object.
    pub meta: Option<Map<String, Value>>,
    /// The client's name and version: `params.clientInfo` of `initialize`, or the
    /// `io.modelcontextprotocol/clientInfo` `_meta` key of a Modern request.
    pub client: Option<ClientInfo>,
    /// The revision the request speaks: Modern when it carries the
    /// `io.modelcontextprotocol/protocolVersion` `_meta` key or a Modern
    /// `MCP-Protocol-Version` header without a session; Legacy otherwise.
    pub revision: Option<McpRevision>,
    /// The top-level members not taken into the fields above: `jsonrpc`, anything
    /// unexpected, and `method` or `params` when they have an unexpected type. Kept
    /// so a consumer can tell a plain request from an odd one without a second parse.
    pub rest: Map<String, Value>,
    /// The members of `params` not taken into the fields above (`cursor`, `ref`,
    /// `argument`, ...), and `name`, `uri`, `arguments` or `_meta` when they have an
    /// unexpected type.
    pub params_rest: Map<String, Value>,
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
    /// An object repeats a key: parsers disagree on which one counts.
    #[error("request body repeats a key: {0}")]
    DuplicateKey(String),
    /// `id` is present but neither a string nor an integer (e.g. `null`).
    #[error("the JSON-RPC id must be a string or an integer")]
    InvalidId,
}

const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";

/// A client's self-description (`clientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientInfo {
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
}

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

    /// The `_meta` protocol version of a Modern request.
    pub fn meta_protocol_version(&self) -> Option<&str> {
        self.meta
            .as_ref()
            .and_then(|m| m.get(PROTOCOL_VERSION_META))
            .and_then(Value::as_str)
    }

    /// The name a request targets: the tool or prompt name, or the resource URI.
    pub fn target(&self) -> Option<&str> {
        self.name.as_deref().or(self.uri.as_deref())
    }

    /// True for a request (it has an id and a method).
    pub fn is_request(&self) -> bool {
        self.id.is_some() && !self.method.is_empty()
    }
}

/// The hints a tool declares about itself (MCP `ToolAnnotations`).
///
/// Backends make these claims; they are not verified. Use them in policy together
/// with data the operator controls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    /// The hints that are set, under their MCP names.
    pub fn hints(&self) -> impl Iterator<Item = (&'static str, bool)> {
        [
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
    }
}

/// A tool as the caller's capability view knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The backend that serves it.
    pub backend: Arc<str>,
    /// Its annotations.
    pub annotations: ToolAnnotations,
}

/// The caller's aggregated capabilities: what it can see and who serves it.
///
/// The discovery layer obtains one per request from a [`CapabilityProvider`]; the
/// enrichment layers and authorization read it. `vmcp-service` implements it for its
/// catalog; implement it to use those layers in front of another server.
pub trait CatalogView: Send + Sync + 'static {
    /// An advertised tool by name.
    fn tool(&self, name: &str) -> Option<ToolInfo>;
    /// The backend serving an advertised prompt.
    fn prompt_backend(&self, name: &str) -> Option<Arc<str>>;
    /// The backend serving a resource URI (exact resource or template match).
    fn resource_backend(&self, uri: &str) -> Option<Arc<str>>;
}

/// The capability view attached to a request by the discovery layer.
#[derive(Clone)]
pub struct Discovered(pub Arc<dyn CatalogView>);

impl std::fmt::Debug for Discovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Discovered(..)")
    }
}

/// Why a capability view could not be produced.
#[derive(Debug, Clone, thiserror::Error)]
#[error("capability discovery failed: {0}")]
pub struct DiscoveryError(pub String);

/// Produces the capability view of an identity.
pub trait CapabilityProvider: Send + Sync + 'static {
    /// The view `identity` may see.
    fn view(
        &self,
        identity: &Identity,
    ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>>;
}

/// The backend that will serve this request (backend enrichment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTarget(pub Arc<str>);

/// What kind of capability use an admission decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// `tools/call`.
    Tool,
    /// `prompts/get`, and `completion/complete` of a prompt.
    Prompt,
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`, and
    /// `completion/complete` of a resource or template.
    Resource,
}

impl CallKind {
    /// The kind of a method that is admission-checked, if it is one, when the
    /// method alone decides it (every checked method but `completion/complete`).
    pub fn of_method(method: &str) -> Option<Self> {
        match method {
            "tools/call" => Some(Self::Tool),
            "prompts/get" => Some(Self::Prompt),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                Some(Self::Resource)
            }
            _ => None,
        }
    }

    /// The kind of a request that is admission-checked, if it is one: every verb
    /// that names a tool, prompt or resource. A completion is checked as what its
    /// `ref` names; one without a prompt or resource reference as a prompt with no
    /// name, which no policy admits.
    pub fn of_request(parsed: &ParsedMcpRequest) -> Option<Self> {
        if parsed.method == "completion/complete" {
            return Some(if parsed.uri.is_some() {
                Self::Resource
            } else {
                Self::Prompt
            });
        }
        Self::of_method(&parsed.method)
    }

    /// The kind-only denial message the gate answers with.
    pub fn denial_message(self) -> &'static str {
        match self {
            Self::Tool => "call denied by authorization policy",
            Self::Prompt => "prompt denied by authorization policy",
            Self::Resource => "read denied by authorization policy",
        }
    }
}

/// The one admission decision for a `tools/call`, `prompts/get` or `resources/read`,
/// computed by the authorization layer and enforced by the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionDecision {
    /// What was decided about.
    pub kind: CallKind,
    /// Whether the request may proceed.
    pub allowed: bool,
}

/// One of the four MCP lists: what an [`Admission`] filters, and (serialised in
/// camelCase) which list a gateway pagination cursor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list` (admitted like resources).
    ResourceTemplates,
}

/// Per-item admission for list filtering, bound to the caller's identity.
///
/// The same evaluation as the call side (the call's action, the item as resource,
/// no arguments), so a listed item is one the caller may use.
pub trait Admission: Send + Sync {
    /// Whether a whole list is hidden (an explicit `forbid` on its list action).
    fn list_hidden(&self, kind: ListKind) -> bool;
    /// Whether the caller may call this tool.
    fn tool(&self, name: &str, backend: Option<&str>, annotations: &ToolAnnotations) -> bool;
    /// Whether the caller may get this prompt.
    fn prompt(&self, name: &str, backend: Option<&str>) -> bool;
    /// Whether the caller may read this resource (or template string).
    fn resource(&self, uri: &str, backend: Option<&str>) -> bool;
}

/// The admission handle the authorization layer attaches for list filtering.
#[derive(Clone)]
pub struct AdmissionHandle(pub Arc<dyn Admission>);

impl std::fmt::Debug for AdmissionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdmissionHandle(..)")
    }
}

/// Observes the backend calls made while serving one request (telemetry: a child
/// span per call, per-backend metrics, W3C trace context for the backend).
pub trait BackendObserver: Send + Sync {
    /// A backend call starts.
    fn start(&self, backend: &str, method: &str, name: Option<&str>) -> Box<dyn BackendCallScope>;
}

/// One observed backend call.
pub trait BackendCallScope: Send {
    /// The W3C `traceparent` to send to the backend (in `_meta`), if tracing.
    fn traceparent(&self) -> Option<String>;
    /// The call ended; `error` describes a failure.
    fn end(self: Box<Self>, error: Option<&str>);
}

/// The backend-call observer the telemetry layer attaches.
#[derive(Clone)]
pub struct BackendCalls(pub Arc<dyn BackendObserver>);

impl std::fmt::Debug for BackendCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackendCalls(..)")
    }
}

/// One step of a composite tool (a workflow the service runs), as audited.
#[derive(Debug, Clone)]
pub struct WorkflowStep<'a> {
    /// The run's id (one per composite call).
    pub workflow_id: &'a str,
    /// The composite tool.
    pub composite: &'a str,
    /// The step's id.
    pub step: &'a str,
    /// The tool the step called (its advertised name), if any.
    pub tool: Option<&'a str>,
    /// The backend that served it.
    pub backend: Option<&'a str>,
    /// `success`, `failure`, `skipped`, `denied` or `timeout`.
    pub outcome: &'a str,
    /// How long the step took (all attempts).
    pub duration: std::time::Duration,
    /// Attempts made (retries included).
    pub attempts: u32,
    /// The caller.
    pub identity: Option<&'a Identity>,
}

/// Writes audit lines for work the service does on a request's behalf.
pub trait WorkflowAuditor: Send + Sync {
    /// One composite step finished (or was skipped).
    fn step(&self, step: &WorkflowStep<'_>);
}

/// The auditor the audit layer attaches, so the service can audit each step of a
/// composite tool into the same sink.
#[derive(Clone)]
pub struct WorkflowAudit(pub Arc<dyn WorkflowAuditor>);

impl std::fmt::Debug for WorkflowAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkflowAudit(..)")
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
