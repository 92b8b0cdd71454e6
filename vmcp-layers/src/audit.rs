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
//! (the service marks its answer with [`RateLimited`]), `error` for 5xx and for responses that never
//! finished on the server's side, `cancelled` for a request its caller cancelled (a
//! Legacy `notifications/cancelled` the service acted on, or a client that went away
//! before the answer ended), `failure` for other 4xx and for JSON-RPC errors, else
//! `success` (a 202 for an accepted notification, which has no body, included).
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

use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::body::ObservedBody;
use crate::context::{AuditNote, BackendTarget, Identity, ParsedMcpRequest, WorkflowAudit};
use pending::Pending;
use record::{Metadata, Record, RecordTarget, Subjects, audit_id};
use serde_json::{Map, Value};
pub use sink::{AuditSink, StdoutSink, TracingSink, WriterSink};

mod pending;
mod record;
mod sink;
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

/// A response extension: the service refused the request by a rate limit (audited
/// with outcome `limited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited;

impl<S> Layer<S> for AuditLayer {
    type Service = Audit<S>;

    fn layer(&self, inner: S) -> Audit<S> {
        Audit {
            inner,
            auditor: self.auditor.clone(),
            steps: WorkflowAudit(Arc::new(workflow::StepAuditor(self.auditor.clone()))),
        }
    }
}

/// Writes audit lines; see the [module docs](self).
#[derive(Clone)]
pub struct Audit<S> {
    inner: S,
    auditor: Arc<Auditor>,
    /// Handed to the service with every request, for composite steps' lines (built
    /// once, not per request).
    steps: WorkflowAudit,
}

impl<S> std::fmt::Debug for Audit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").finish_non_exhaustive()
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
        req.extensions_mut().insert(self.steps.clone());
        let note = AuditNote::default();
        req.extensions_mut().insert(note.clone());
        let path = req.uri().path().to_owned();
        let mut pending = Pending {
            limited: false,
            auditor: self.auditor.clone(),
            started: Instant::now(),
            path,
            http_method: req.method().clone(),
            status: None,
            identity: None,
            parsed: None,
            backend: None,
            note,
            failed: false,
            written: false,
        };
        let capture = if self.auditor.config.include_response_data {
            self.auditor.config.max_data().max(4096)
        } else {
            4096
        };
        let future = self.inner.call(req);
        Box::pin(async move {
            let response = match future.await {
                Ok(response) => response,
                Err(error) => {
                    pending.failed = true;
                    pending.finish(None);
                    return Err(error);
                }
            };
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
    use std::io::Write;
    use std::sync::Mutex;

    use serde_json::json;

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
}
