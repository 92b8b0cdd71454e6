// Over 600 lines: the record schema, its writer and the layer are one idea; a fifth is tests.
#![doc = include_str!("../../docs/layers/audit.md")]
//!
//! # Example
//!
//! ```json
//! {"audit_id":"…","type":"mcp_tool_call","logged_at":"2026-12-02T12:00:00.123Z",
//!  "outcome":"success","component":"vmcp",
//!  "subjects":{"user_id":"alice","client_name":"cli","client_version":"1.0"},
//!  "target":{"endpoint":"/mcp","method":"tools/call","type":"tool","name":"gh_echo","backend":"gh"},
//!  "metadata":{"duration_ms":3.2,"transport":"streamable-http","protocol_version":"2026-07-28",
//!              "status":200,"response_size_bytes":180}}
//! ```
//!
//! `outcome` is `denied` for 401/403, `limited` for a request a rate limit refused
//! (the service marks its answer with [`RateLimited`]), `error` for 5xx and for
//! responses that never finished, `failure` for other 4xx and for JSON-RPC errors,
//! else `success` (a 202 for an accepted notification, which has no body, included).
//! Request and response payloads are written only when `includeRequestData` /
//! `includeResponseData` are set, capped at `maxDataSize` bytes, with values under
//! secret-looking keys (`token`, `password`, `secret`, `authorization`, …) redacted.
//! Headers are never written, so neither is a bearer token.
//!
//! ```
//! use std::{convert::Infallible, sync::{Arc, Mutex}};
//! use axum::body::Body;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::audit::{AuditLayer, AuditSettings, WriterSink};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let lines = Arc::new(Mutex::new(Vec::new()));
//! let layer = AuditLayer::new(AuditSettings::default(), Arc::new(WriterSink::new(SharedVec(lines.clone()))));
//! let service = ServiceBuilder::new()
//!     .layer(layer)
//!     .service_fn(|_req: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("{}"))) });
//! let response = service.oneshot(Request::post("/mcp").body(Body::empty()).unwrap()).await.unwrap();
//! http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
//! let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
//! assert!(text.contains(r#""outcome":"success""#));
//! # });
//! # struct SharedVec(Arc<Mutex<Vec<u8>>>);
//! # impl std::io::Write for SharedVec {
//! #     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { self.0.lock().unwrap().extend_from_slice(b); Ok(b.len()) }
//! #     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
//! # }
//! ```

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tower::{Layer, Service};

use crate::body::{BodySummary, ObservedBody};
use crate::context::{
    BackendTarget, CallKind, ClientInfo, Identity, ListKind, ParsedMcpRequest, WorkflowAudit,
};

mod workflow;

/// What the audit layer records. The gateway's `audit:` section
/// (`vmcp_service::config::AuditConfig`) is translated into this.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// The `component` field of every record.
    pub component: String,
    /// Only these event types ([`EVENT_TYPES`]); empty: all of them.
    pub event_types: Vec<String>,
    /// Never these event types.
    pub exclude_event_types: Vec<String>,
    /// Include the request's params (redacted, capped).
    pub include_request_data: bool,
    /// Include the response body (capped).
    pub include_response_data: bool,
    /// Cap on each included payload, in bytes.
    pub max_data_size: usize,
}

impl Default for AuditSettings {
    /// Every event, no payloads, component `vmcp`, payload cap 10 000 bytes.
    fn default() -> Self {
        Self {
            component: "vmcp".to_owned(),
            event_types: Vec::new(),
            exclude_event_types: Vec::new(),
            include_request_data: false,
            include_response_data: false,
            max_data_size: 10_000,
        }
    }
}

/// Every event type this layer emits.
pub const EVENT_TYPES: [&str; 18] = [
    "mcp_initialize",
    "mcp_discover",
    "mcp_ping",
    "mcp_tool_call",
    "mcp_tools_list",
    "mcp_resource_read",
    "mcp_resources_list",
    "mcp_resource_templates_list",
    "mcp_prompt_get",
    "mcp_prompts_list",
    "mcp_completion",
    "mcp_notification",
    "mcp_request",
    "mcp_stream",
    "mcp_session_end",
    workflow::STEP_EVENT,
    "integrity_change",
    "integrity_approval",
];

impl AuditSettings {
    fn max_data(&self) -> usize {
        self.max_data_size
    }

    fn wants(&self, event: &str) -> bool {
        (self.event_types.is_empty() || self.event_types.iter().any(|t| t == event))
            && !self.exclude_event_types.iter().any(|t| t == event)
    }
}

/// Where audit lines go. `write` gets one complete JSON line (with `\n`).
pub trait AuditSink: Send + Sync {
    /// Write one line.
    fn write(&self, line: &[u8]);
}

/// Lines to standard output.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutSink;

impl AuditSink for StdoutSink {
    fn write(&self, line: &[u8]) {
        let _ = std::io::stdout().lock().write_all(line);
    }
}

/// Lines to any writer (a file, a buffer), one `write_all` per line.
#[derive(Debug)]
pub struct WriterSink<W>(Mutex<W>);

impl<W: Write + Send> WriterSink<W> {
    /// Write lines to `writer`.
    pub fn new(writer: W) -> Self {
        Self(Mutex::new(writer))
    }
}

impl WriterSink<std::fs::File> {
    /// Append lines to the file at `path`.
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self::new(file))
    }
}

impl<W: Write + Send> AuditSink for WriterSink<W> {
    fn write(&self, line: &[u8]) {
        let mut writer = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writer.write_all(line).and_then(|_| writer.flush()) {
            tracing::error!("audit line not written: {e}");
        }
    }
}

/// Lines as `tracing` events (target `vmcp::audit`, level INFO).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

impl AuditSink for TracingSink {
    fn write(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        tracing::info!(target: "vmcp::audit", "{}", line.trim_end());
    }
}

struct Auditor {
    config: AuditSettings,
    sink: Arc<dyn AuditSink>,
}

/// Produces [`Audit`] services; holds the configuration and the sink.
#[derive(Clone)]
pub struct AuditLayer {
    auditor: Arc<Auditor>,
}

impl std::fmt::Debug for AuditLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLayer")
            .field("config", &self.auditor.config)
            .finish_non_exhaustive()
    }
}

impl AuditLayer {
    /// Audit into `sink`.
    pub fn new(settings: AuditSettings, sink: Arc<dyn AuditSink>) -> Self {
        Self {
            auditor: Arc::new(Auditor {
                config: settings,
                sink,
            }),
        }
    }

    /// Audit by appending to the file at `log_file`, or to standard output.
    pub fn open(settings: AuditSettings, log_file: Option<&Path>) -> std::io::Result<Self> {
        let sink: Arc<dyn AuditSink> = match log_file {
            Some(path) => Arc::new(WriterSink::append(path)?),
            None => Arc::new(StdoutSink),
        };
        Ok(Self::new(settings, sink))
    }

    /// Record an event that is not a request, such as a configuration reload
    /// (`kind` `config_reload`, `outcome` `success` or `failure`): no subject, and
    /// `endpoint` names what did it.
    pub fn record_event(&self, kind: &str, outcome: &str, endpoint: &str) {
        self.write_event(
            kind,
            outcome,
            RecordTarget {
                endpoint,
                method: None,
                kind: None,
                name: None,
                backend: None,
            },
            None,
        );
    }

    /// Record an event about one backend catalog entry that no request caused: a
    /// definition that changed (`integrity_change`) or an approval the gateway picked
    /// up (`integrity_approval`). `entry` is `tool`, `prompt` or `template`; `name`
    /// the backend's own name (cut like a client's); `data` small and bounded.
    /// Honors `eventTypes` / `excludeEventTypes`.
    pub fn record_entry_event(
        &self,
        kind: &str,
        outcome: &str,
        entry: &'static str,
        name: &str,
        backend: &str,
        data: Option<&Map<String, Value>>,
    ) {
        if !self.auditor.config.wants(kind) {
            return;
        }
        self.write_event(
            kind,
            outcome,
            RecordTarget {
                endpoint: "integrity",
                method: None,
                kind: Some(entry),
                name: Some(name),
                backend: Some(backend),
            },
            data,
        );
    }

    fn write_event(
        &self,
        kind: &str,
        outcome: &str,
        target: RecordTarget<'_>,
        data: Option<&Map<String, Value>>,
    ) {
        let mut ids = [0u8; 36];
        let logged_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let record = Record {
            audit_id: audit_id(&mut ids),
            kind,
            logged_at: &logged_at,
            outcome,
            component: &self.auditor.config.component,
            subjects: Subjects {
                user_id: None,
                user: None,
                client: None,
            },
            target,
            metadata: Metadata {
                duration_ms: 0.0,
                transport: "none",
                protocol_version: None,
                status: None,
                response_size_bytes: None,
            },
            data,
        };
        match serde_json::to_vec(&record) {
            Ok(mut line) => {
                line.push(b'\n');
                self.auditor.sink.write(&line);
            }
            Err(e) => tracing::error!("audit line not serialized: {e}"),
        }
    }
}

impl<S> Layer<S> for AuditLayer {
    type Service = Audit<S>;

    fn layer(&self, inner: S) -> Audit<S> {
        Audit {
            inner,
            auditor: self.auditor.clone(),
        }
    }
}

/// Writes audit lines; see the [module docs](self).
#[derive(Clone)]
pub struct Audit<S> {
    inner: S,
    auditor: Arc<Auditor>,
}

impl<S> std::fmt::Debug for Audit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").finish_non_exhaustive()
    }
}

fn event_type(method: Option<&str>, http: &http::Method) -> &'static str {
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

fn target_type(method: &str) -> Option<&'static str> {
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

fn redact(value: &mut Value) {
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

fn capped(value: Value, max: usize) -> Value {
    let text = value.to_string();
    if text.len() <= max {
        value
    } else {
        json!({"truncated": true, "size_bytes": text.len()})
    }
}

/// Whether the first JSON-RPC response in `head` (a JSON body or an SSE stream) is an
/// error.
fn is_jsonrpc_error(head: &[u8]) -> bool {
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
struct Record<'a> {
    audit_id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    logged_at: &'a str,
    outcome: &'a str,
    component: &'a str,
    subjects: Subjects<'a>,
    target: RecordTarget<'a>,
    metadata: Metadata<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Map<String, Value>>,
}

struct Subjects<'a> {
    user_id: Option<&'a str>,
    user: Option<&'a Value>,
    client: Option<&'a ClientInfo>,
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

struct RecordTarget<'a> {
    /// The request's path, as the client sent it.
    endpoint: &'a str,
    method: Option<&'a str>,
    kind: Option<&'static str>,
    name: Option<&'a str>,
    backend: Option<&'a str>,
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
struct Metadata<'a> {
    duration_ms: f64,
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_size_bytes: Option<u64>,
}

/// A fresh audit id, a version-4 UUID (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`) written
/// into `buf`. Not one random draw per record (a `getrandom` system call each): the
/// first 8 bytes are drawn once per process (60 random bits around the version), the
/// last 8 hold a 58-bit bijection of a process counter (after the variant bits), so
/// ids are unique within a process and do not reveal the request count.
fn audit_id(buf: &mut [u8; 36]) -> &str {
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

/// A response extension: the service refused the request by a rate limit (audited
/// with outcome `limited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited;

struct Pending {
    auditor: Arc<Auditor>,
    started: Instant,
    path: String,
    http_method: http::Method,
    status: Option<StatusCode>,
    identity: Option<Arc<Identity>>,
    parsed: Option<Arc<ParsedMcpRequest>>,
    backend: Option<BackendTarget>,
    limited: bool,
    written: bool,
}

impl Pending {
    fn finish(&mut self, summary: Option<BodySummary>) {
        if std::mem::replace(&mut self.written, true) {
            return;
        }
        let method = self.parsed.as_ref().map(|p| p.method.as_str());
        let event = event_type(method, &self.http_method);
        let config = &self.auditor.config;
        if !config.wants(event) {
            return;
        }
        let aborted = summary.as_ref().is_none_or(|s| s.aborted);
        let outcome = match self.status {
            _ if self.limited => "limited",
            None => "error",
            Some(s) if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN => "denied",
            Some(s) if s.is_server_error() => "error",
            Some(s) if s.is_client_error() => "failure",
            // A notification or response the server accepted (202, no body): done.
            Some(StatusCode::ACCEPTED) => "success",
            Some(_) if aborted && summary.as_ref().is_none_or(|s| s.bytes == 0) => "error",
            Some(_) if summary.as_ref().is_some_and(|s| is_jsonrpc_error(&s.head)) => "failure",
            Some(_) => "success",
        };
        let mut ids = [0u8; 36];
        let logged_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let record = Record {
            audit_id: audit_id(&mut ids),
            kind: event,
            logged_at: &logged_at,
            outcome,
            component: &self.auditor.config.component,
            subjects: Subjects {
                user_id: self.identity.as_ref().map(|i| i.subject.as_str()),
                user: self
                    .identity
                    .as_ref()
                    .and_then(|i| i.claims.get("name").or(i.claims.get("email"))),
                client: self.parsed.as_ref().and_then(|p| p.client.as_ref()),
            },
            target: RecordTarget {
                endpoint: &self.path,
                method: self.parsed.as_ref().map(|p| p.method.as_str()),
                kind: self.parsed.as_ref().and_then(|p| target_type(&p.method)),
                name: self.parsed.as_ref().and_then(|p| p.target()),
                backend: self.backend.as_ref().map(|BackendTarget(b)| &**b),
            },
            metadata: Metadata {
                duration_ms: (self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round()
                    / 1000.0,
                transport: "streamable-http",
                protocol_version: self
                    .parsed
                    .as_ref()
                    .and_then(|p| p.revision)
                    .map(|r| r.as_str()),
                status: self.status.map(|s| s.as_u16()),
                response_size_bytes: summary.as_ref().map(|s| s.bytes),
            },
            data: None,
        };
        let max = config.max_data();
        let mut data = Map::new();
        if config.include_request_data
            && let Some(parsed) = &self.parsed
        {
            let mut request = json!({
                "arguments": parsed.arguments.clone().map(Value::Object),
            });
            redact(&mut request);
            data.insert("request".into(), capped(request, max));
        }
        if config.include_response_data
            && let Some(summary) = &summary
        {
            let text = String::from_utf8_lossy(&summary.head[..summary.head.len().min(max)]);
            data.insert(
                "response".into(),
                json!({"body": text, "truncated": summary.bytes as usize > max}),
            );
        }
        let record = Record {
            data: (!data.is_empty()).then_some(&data),
            ..record
        };
        let mut line = Vec::with_capacity(512);
        if let Err(e) = serde_json::to_writer(&mut line, &record) {
            tracing::error!("audit line not serialized: {e}");
            return;
        }
        line.push(b'\n');
        self.auditor.sink.write(&line);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // The request never produced a response (a panic unwinding, or the client
        // went away): still one line, outcome `error`.
        self.finish(None);
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Audit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        req.extensions_mut()
            .insert(WorkflowAudit(Arc::new(workflow::StepAuditor(
                self.auditor.clone(),
            ))));
        let path = req.uri().path().to_owned();
        let mut pending = Pending {
            auditor: self.auditor.clone(),
            started: Instant::now(),
            path,
            http_method: req.method().clone(),
            status: None,
            identity: None,
            parsed: None,
            backend: None,
            limited: false,
            written: false,
        };
        let capture = if self.auditor.config.include_response_data {
            self.auditor.config.max_data().max(4096)
        } else {
            4096
        };
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = future.await?;
            pending.status = Some(response.status());
            pending.identity = response.extensions().get::<Arc<Identity>>().cloned();
            pending.parsed = response
                .extensions()
                .get::<Arc<ParsedMcpRequest>>()
                .cloned();
            pending.backend = response.extensions().get::<BackendTarget>().cloned();
            pending.limited = response.extensions().get::<RateLimited>().is_some();
            Ok(response.map(|body| {
                Body::new(ObservedBody::new(body, capture, move |summary| {
                    pending.finish(Some(summary))
                }))
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn entry_events_name_the_entry_cut_and_follow_the_event_filter() {
        let lines = Lines::default();
        let settings = AuditSettings {
            exclude_event_types: vec!["integrity_approval".into()],
            ..AuditSettings::default()
        };
        let layer = AuditLayer::new(settings, Arc::new(WriterSink::new(lines.clone())));
        let data: Map<String, Value> = [("fields".to_owned(), json!(["description"]))]
            .into_iter()
            .collect();
        let long = "e".repeat(10_000);
        layer.record_entry_event(
            "integrity_change",
            "blocked",
            "tool",
            &long,
            "py",
            Some(&data),
        );
        layer.record_entry_event("integrity_approval", "success", "tool", "echo", "py", None);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let records: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), 1, "the excluded type is not written: {text}");
        let record = &records[0];
        assert_eq!(record["type"], "integrity_change");
        assert_eq!(record["outcome"], "blocked");
        assert_eq!(record["target"]["type"], "tool");
        assert_eq!(record["target"]["backend"], "py");
        assert_eq!(record["target"]["name_bytes"], 10_000);
        assert!(record["target"]["name"].as_str().unwrap().len() < 1100);
        assert_eq!(record["data"]["fields"][0], "description");
    }

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
