//! Request-context types shared by the layers and the aggregating service.
//!
//! Layers put these into `http::Request` extensions; the service reads them back from
//! the request's `http::request::Parts`, which rmcp hands to its handler. Nothing here
//! depends on the service, so a layer can be used in front of any MCP server.
//!
//! | Extension | Inserted by | Read by |
//! |---|---|---|
//! | `Arc<Identity>` | [`auth`](crate::auth) | discovery, authorization, audit, the service |
//! | `Arc<ParsedMcpRequest>` | [`parse`](crate::parse) | every later layer |
//! | [`Discovered`] | [`discovery`](crate::discovery) | annotation and backend enrichment, authorization |
//! | [`ToolAnnotations`] | [`annotations`](crate::annotations) | authorization |
//! | [`AdmissionDecision`], [`AdmissionHandle`] | [`authz`](crate::authz) | [`gate`](crate::gate), the service's list filtering |
//! | [`BackendTarget`] | [`backend_enrichment`](crate::backend_enrichment) | telemetry, audit |
//! | [`BackendCalls`] | [`telemetry`](crate::telemetry) | the service, around each backend call |
//! | [`WorkflowAudit`] | [`audit`](crate::audit) | the service, for each composite tool step |
//! | [`AuditNote`] | [`audit`](crate::audit) | parse, auth and backend enrichment (note what they learn), the service (notes a cancellation) |
//!
//! What a layer learnt also travels back out in the *response* extensions
//! (`Arc<Identity>`, `Arc<ParsedMcpRequest>`, [`BackendTarget`]), which is how the
//! audit layer, sitting outside them, records who did what.

mod arguments;
mod audit_note;
mod decode;

pub use arguments::Arguments;
pub use audit_note::AuditNote;

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
    /// `params.arguments`, when an object: as the client wrote it, parsed into a
    /// map only when read ([`Arguments::map`]).
    pub arguments: Option<Arguments>,
    /// `params._meta`, when an object.
    pub meta: Option<Map<String, Value>>,
    /// The client's name and version: `params.clientInfo` of `initialize`, or the
    /// `io.modelcontextprotocol/clientInfo` `_meta` key of a Modern request.
    pub client: Option<ClientInfo>,
    /// The revision the request speaks: Modern when it carries the
    /// `io.modelcontextprotocol/protocolVersion` `_meta` key or a Modern
    /// `MCP-Protocol-Version` header without a session; Legacy otherwise.
    pub revision: Option<McpRevision>,
    /// Whether `jsonrpc` is `"2.0"`, as in every JSON-RPC 2.0 message; it is then
    /// not in `rest`.
    pub jsonrpc_2_0: bool,
    /// The top-level members not taken into the fields above: anything unexpected
    /// (`jsonrpc` when it is not `"2.0"`, `result`, `error`), and `method` or `params`
    /// when they have an unexpected type. Kept so a consumer can tell a plain
    /// request from an odd one without a second parse.
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

/// A client's self-description (`clientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientInfo {
    /// `name`.
    pub name: String,
    /// `version`.
    pub version: String,
}

impl ParsedMcpRequest {
    /// The `_meta` protocol version of a Modern request.
    pub fn meta_protocol_version(&self) -> Option<&str> {
        self.meta_value(decode::PROTOCOL_VERSION_META)
            .and_then(Value::as_str)
    }

    /// `key`'s value in `params._meta`. By scanning, not hashing: a `_meta` has a
    /// few keys, and comparing them costs less than hashing the long reserved key.
    pub fn meta_value(&self, key: &str) -> Option<&Value> {
        decode::member(self.meta.as_ref()?, key)
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

/// Why a capability view could not be produced (the request is answered with an
/// error; nothing runs without a view).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// What the provider aggregates could not be reached or read.
    #[error("capability discovery failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl DiscoveryError {
    /// The provider could not produce a view because of `cause`.
    pub fn unavailable(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Unavailable(cause.into())
    }
}

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

impl ListKind {
    /// The list a method asks for, if it is one of the four.
    pub fn of_method(method: &str) -> Option<Self> {
        match method {
            "tools/list" => Some(Self::Tools),
            "prompts/list" => Some(Self::Prompts),
            "resources/list" => Some(Self::Resources),
            "resources/templates/list" => Some(Self::ResourceTemplates),
            _ => None,
        }
    }
}

/// Per-item admission for list filtering, bound to the caller's identity.
///
/// The same evaluation as the call side (the call's action, the item as resource,
/// no arguments), so a listed item is one the caller may use.
pub trait Admission: Send + Sync {
    /// Whether a whole list is hidden (an explicit `forbid` on its list action).
    fn list_hidden(&self, kind: ListKind) -> bool;
    /// Whether the caller may call this tool (no arguments: list filtering).
    fn tool(&self, name: &str, backend: Option<&str>, annotations: &ToolAnnotations) -> bool;
    /// Whether the caller may call this tool with `arguments`: the decision a direct
    /// `tools/call` with them gets (policies may read `context.arguments`). Composite
    /// steps are decided here, with their rendered arguments.
    fn tool_call(
        &self,
        name: &str,
        backend: Option<&str>,
        annotations: &ToolAnnotations,
        arguments: &Map<String, Value>,
    ) -> bool;
    /// Whether the caller may get this prompt.
    fn prompt(&self, name: &str, backend: Option<&str>) -> bool;
    /// Whether the caller may read this resource (or template string).
    fn resource(&self, uri: &str, backend: Option<&str>) -> bool;
    /// A key under which this admission's argument-free answers (`list_hidden`,
    /// `tool`, `prompt`, `resource`) never change: admissions with equal keys answer
    /// alike, so a filtered list may keep the caller's view of a catalog by it
    /// instead of asking once per item. `None` (the default): ask every time.
    fn stable_key(&self) -> Option<AdmissionKey> {
        None
    }
}

/// What an [`Admission`]'s answers are decided from (see
/// [`Admission::stable_key`]), compared by identity. The objects are held, so no
/// other can take their address while a key is kept.
#[derive(Clone)]
pub struct AdmissionKey([Arc<dyn std::any::Any + Send + Sync>; 2]);

impl AdmissionKey {
    /// The key of answers decided by `decider` for `subject` (the same two objects,
    /// not equal copies, make an equal key).
    pub fn new(
        decider: Arc<dyn std::any::Any + Send + Sync>,
        subject: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        Self([decider, subject])
    }

    fn addresses(&self) -> [*const (); 2] {
        self.0.each_ref().map(|part| Arc::as_ptr(part).cast::<()>())
    }
}

impl PartialEq for AdmissionKey {
    fn eq(&self, other: &Self) -> bool {
        self.addresses() == other.addresses()
    }
}

impl Eq for AdmissionKey {}

impl std::hash::Hash for AdmissionKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.addresses().hash(state);
    }
}

impl std::fmt::Debug for AdmissionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AdmissionKey")
            .field(&self.addresses())
            .finish()
    }
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
    /// A step of composite tool `composite` starts: its span is a child of the
    /// request's, and the step's backend calls are observed under it.
    fn step(&self, composite: &str, step: &str) -> Box<dyn StepScope>;
    /// A run of composite tool `composite` ended (per-composite executions, errors,
    /// duration); `error` when it failed, was refused or was cancelled.
    fn workflow(&self, composite: &str, elapsed: std::time::Duration, error: bool);
    /// A rate-limit decision: `tool` (a bounded label), the `bucket` kind, and
    /// `decision` (`allowed`, `limited`, `error`).
    fn rate_limit(&self, tool: &str, bucket: &str, decision: &str) {
        let _ = (tool, bucket, decision);
    }
    /// A `find_tool` answered by keyword only because the embedding service failed.
    fn optimizer_fallback(&self) {}
}

/// One observed composite step.
pub trait StepScope: Send {
    /// The observer of the step's backend calls (children of the step's span).
    fn calls(&self) -> BackendCalls;
    /// The step ended with `outcome` (as audited: `success`, `failure`, …).
    fn end(self: Box<Self>, outcome: &str);
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
