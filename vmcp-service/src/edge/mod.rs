//! The lean client edge: plain requests answered without rmcp's server.
//! (Over 600 lines, one idea: `admit`, the single decision, and `serve`, its
//! answer; the checks, forwarding, lists and sessions are its submodules.)
//!
//! rmcp's streamable HTTP server parses every body a second time (the layers, or the
//! bare checks, already did), re-serializes it into a `Value` to check the SEP-2243
//! headers, clones the called tool to find its schema, and runs the handler in a
//! task of its own. For a request that needs no server-to-client stream none of that
//! is needed, so [`VmcpService`](crate::VmcpService) answers it here, from the one
//! [`ParsedMcpRequest`], forwarding over the backend's direct path.
//!
//! # The split: one decision, in [`Edge::admit`]
//!
//! A request is served here only when *every* condition holds; anything else,
//! including every request that rmcp would refuse, goes to rmcp unchanged, so refusals
//! stay rmcp's own (statuses, codes, messages):
//!
//! - the method is one of [`ROUTES`]' fast verbs: `tools/call`, `prompts/get`,
//!   `resources/read`, `completion/complete` and the four list verbs;
//! - it is either a 2026-07-28 stateless request (no `Mcp-Session-Id`) whose
//!   `_meta` carries exactly the protocol version of its `MCP-Protocol-Version`
//!   header, the client capabilities, and no `progressToken`, no `logLevel` and no
//!   other reserved key (those may need a stream: progress, logs, and whatever comes
//!   next), with `Mcp-Method` and `Mcp-Name` (plain or Base64) agreeing with the
//!   body; or a 2025-11-25 session request, without `_meta`, on a session of this
//!   caller whose state allows a plain JSON answer (see [`session`]);
//! - the door checks rmcp makes pass: `Host` in rmcp's allow-list, no `Origin`
//!   (browser requests keep rmcp's origin rules), an `Accept` naming both JSON and
//!   event streams without weights, a JSON `Content-Type`, the body within rmcp's
//!   limit;
//! - the params hold nothing the fast path does not read (no `task`, no MRTR
//!   `inputResponses`/`requestState`, only `cursor` on lists), and what it reads
//!   has the type rmcp reads (a completion's params read as rmcp's, with
//!   [`crate::params`]); malformed params are the handler's to refuse;
//! - the target is known and served by a 2026-07-28 backend (the direct path), on
//!   its shared connection or, when its credentials depend on the caller
//!   (`token_exchange`, `passthroughHeaders`), on the caller's own from the
//!   backend's pool, picked and retried as the handler does; a tool's schema
//!   promotes no argument to an `Mcp-Param-*` header. A list filtered
//!   per caller (an admission handle) is cut from the caller's view
//!   ([`lists`]).
//!
//! Answers are built from the same rmcp types as the handler's, so a fast answer is
//! byte-for-byte what rmcp would have sent (`tests/e2e/edge.rs` sends one corpus to
//! both sides and compares).

mod checks;
mod forward;
mod lists;
mod session;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use rmcp::model::{ErrorCode, NumberOrString, ServerJsonRpcMessage, ServerResult};
use serde_json::Value;
use vmcp_layers::context::{
    AdmissionHandle, BackendCalls, ListKind, McpRevision, ParsedMcpRequest,
};

use crate::aggregator::Aggregator;
use crate::backend::Caller;
use forward::Answer;

/// `VmcpService`'s response body (named here so the edge does not import the
/// service that runs it).
type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// What serves a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// This edge, when the request passes [`Edge::admit`].
    Fast(Verb),
    /// Always rmcp's server.
    Rmcp,
}

/// The verbs the fast path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    CallTool,
    GetPrompt,
    ReadResource,
    Complete,
    List(ListKind),
}

/// Every method of the 2025-11-25 and 2026-07-28 specifications (client to server),
/// with the side that serves it. A method not listed (unknown, custom) goes to rmcp,
/// which answers -32601.
pub(crate) const ROUTES: &[(&str, Side)] = &[
    ("tools/call", Side::Fast(Verb::CallTool)),
    ("prompts/get", Side::Fast(Verb::GetPrompt)),
    ("resources/read", Side::Fast(Verb::ReadResource)),
    ("completion/complete", Side::Fast(Verb::Complete)),
    ("tools/list", Side::Fast(Verb::List(ListKind::Tools))),
    ("prompts/list", Side::Fast(Verb::List(ListKind::Prompts))),
    (
        "resources/list",
        Side::Fast(Verb::List(ListKind::Resources)),
    ),
    (
        "resources/templates/list",
        Side::Fast(Verb::List(ListKind::ResourceTemplates)),
    ),
    // The session lifecycle and discovery: rmcp owns negotiation.
    ("initialize", Side::Rmcp),
    ("server/discover", Side::Rmcp),
    ("ping", Side::Rmcp),
    // Streams and per-session state.
    ("subscriptions/listen", Side::Rmcp),
    ("resources/subscribe", Side::Rmcp),
    ("resources/unsubscribe", Side::Rmcp),
    ("logging/setLevel", Side::Rmcp),
    // Tasks (SEP-2663): state the gateway does not hold.
    ("tasks/get", Side::Rmcp),
    ("tasks/list", Side::Rmcp),
    ("tasks/result", Side::Rmcp),
    ("tasks/cancel", Side::Rmcp),
    ("tasks/update", Side::Rmcp),
    // Notifications and responses to server requests are never answered with a body.
    ("notifications/initialized", Side::Rmcp),
    ("notifications/cancelled", Side::Rmcp),
    ("notifications/progress", Side::Rmcp),
    ("notifications/roots/list_changed", Side::Rmcp),
    ("notifications/tasks/status", Side::Rmcp),
];

/// The side serving `method`.
pub(crate) fn side(method: &str) -> Side {
    ROUTES
        .iter()
        .find(|(m, _)| *m == method)
        .map_or(Side::Rmcp, |(_, side)| *side)
}

/// The edge's share of the service: what it needs to check and answer requests.
#[derive(Clone)]
pub(crate) struct Edge {
    aggregator: Arc<Aggregator>,
    checks: Arc<checks::DoorChecks>,
    pages: Arc<lists::PageCache>,
    session: Arc<session::SessionState>,
    /// Requests answered here, for tests and diagnostics.
    served: Arc<AtomicU64>,
}

/// A request admitted to the fast path, with what [`Edge::admit`] learnt.
pub(crate) struct Admitted {
    verb: Verb,
    id: NumberOrString,
    /// A completion's params, read as rmcp reads them.
    completion: Option<Box<rmcp::model::CompleteRequestParams>>,
    parsed: Arc<ParsedMcpRequest>,
    tasks: bool,
    calls: Option<BackendCalls>,
    /// The caller's admission, when it decides on this request: its answer is the
    /// caller's own view (cache scope private).
    admission: Option<AdmissionHandle>,
    /// The 2025-11-25 session it belongs to; `None` for a 2026-07-28 request.
    session: Option<Arc<str>>,
    /// When the gateway received it (backend deadlines are timed from here), and
    /// for whom.
    origin: forward::Origin,
    /// The audit layer's note (behind an auditing stack): a session call the caller
    /// cancelled is audited as `cancelled`.
    audit: Option<vmcp_layers::context::AuditNote>,
}

impl Edge {
    /// The edge over `aggregator`, checking the doors as rmcp's `config` does, and
    /// reading Legacy sessions' state from `sessions` and the handler's `log_levels`.
    pub(crate) fn new(
        aggregator: Arc<Aggregator>,
        config: &rmcp::transport::streamable_http_server::StreamableHttpServerConfig,
        sessions: Arc<crate::sessions::Sessions>,
        log_levels: Arc<crate::handler::LogLevels>,
    ) -> Self {
        Self {
            aggregator,
            checks: Arc::new(checks::DoorChecks::from_config(config)),
            pages: Arc::new(lists::PageCache::default()),
            session: Arc::new(session::SessionState::new(sessions, log_levels)),
            served: Arc::default(),
        }
    }

    /// A request of the 2025-11-25 session `session` (bound to its caller) that the
    /// fast path does not answer: a `notifications/cancelled` for a call it runs
    /// cancels that call.
    pub(crate) fn session_message(&self, session: &str, parsed: &ParsedMcpRequest) {
        self.session.cancelled(session, parsed);
    }

    /// A call of the 2025-11-25 session `session` that the handler runs, behind an
    /// auditing stack: the session's `notifications/cancelled` for it marks its audit
    /// line `cancelled`. Hold the guard while the call's stream is open.
    pub(crate) fn note_session_call(
        &self,
        session: &str,
        parsed: &ParsedMcpRequest,
        note: vmcp_layers::context::AuditNote,
    ) -> Option<session::Noted> {
        let id = parsed.id.as_ref()?;
        Some(self.session.note(session, id, note))
    }

    /// The one decision: whether this edge serves `req` (see the module docs).
    /// `session` is the request's `Mcp-Session-Id` when the session binding found it
    /// bound to this caller and holds it in use.
    pub(crate) fn admit<B: http_body::Body>(
        &self,
        req: &Request<B>,
        parsed: &Arc<ParsedMcpRequest>,
        session: Option<&str>,
    ) -> Option<Admitted> {
        let Side::Fast(verb) = side(&parsed.method) else {
            return None;
        };
        // The optimizer's tools/list and its own tools are the handler's.
        if self.aggregator.config().optimizer.is_some()
            && (verb == Verb::List(ListKind::Tools)
                || (verb == Verb::CallTool
                    && parsed
                        .name
                        .as_deref()
                        .is_some_and(crate::optimizer::is_meta_tool)))
        {
            return None;
        }
        // So are code mode's tools/list (it adds its tool) and its tool.
        if crate::code_mode::enabled(&self.aggregator.config()).is_some()
            && (verb == Verb::List(ListKind::Tools)
                || (verb == Verb::CallTool
                    && parsed.name.as_deref() == Some(crate::code_mode::EXECUTE_TOOL_SCRIPT)))
        {
            return None;
        }
        let id = match parsed.id.as_ref()? {
            Value::String(s) => NumberOrString::String(s.as_str().into()),
            Value::Number(n) => NumberOrString::Number(n.as_i64()?),
            _ => return None,
        };
        if !(parsed.jsonrpc_2_0 && parsed.rest.is_empty()) {
            return None;
        }
        let has_session = req.headers().contains_key(checks::MCP_SESSION_ID);
        if !self.checks.door(req, has_session) {
            return None;
        }
        let tasks = if has_session {
            // The header must be the bound session's (it is: `session` was read from it).
            let session = session?;
            if parsed.revision != Some(McpRevision::Legacy)
                || !self.session.plain(session, req.headers(), parsed)
            {
                return None;
            }
            false
        } else {
            if parsed.revision != Some(McpRevision::Modern) {
                return None;
            }
            let tasks = checks::plain_meta(parsed.meta.as_ref()?)?;
            if !checks::standard_headers(req.headers(), parsed) {
                return None;
            }
            tasks
        };
        let extensions = req.extensions();
        let catalog = self.aggregator.catalog();
        let no_extra = parsed.params_rest.is_empty();
        let completion = match verb {
            Verb::Complete => crate::params::request::<rmcp::model::CompleteRequest>(
                &parsed.method,
                Some(&Value::Object(parsed.params_rest.clone())),
            )
            .ok()
            .map(|request| Box::new(request.params)),
            _ => None,
        };
        // Whether the target's connection is the caller's own (set by `direct`).
        let per_caller = std::cell::Cell::new(false);
        let direct = |backend: &str| {
            self.direct(backend)
                .inspect(|own| per_caller.set(*own))
                .is_some()
        };
        let known = match verb {
            Verb::CallTool => {
                no_extra
                    && parsed.uri.is_none()
                    && parsed.name.as_deref().is_some_and(|name| {
                        catalog.tool(name).is_some_and(|entry| {
                            !checks::promotes_arguments(&entry.tool.input_schema)
                                && direct(&entry.route.backend)
                        })
                    })
            }
            Verb::GetPrompt => {
                no_extra
                    && parsed.uri.is_none()
                    && parsed.name.as_deref().is_some_and(|name| {
                        catalog
                            .prompt(name)
                            .is_some_and(|entry| direct(&entry.route.backend))
                    })
            }
            Verb::ReadResource => {
                no_extra
                    && parsed.name.is_none()
                    && parsed.arguments.is_none()
                    && parsed
                        .uri
                        .as_deref()
                        .is_some_and(|uri| catalog.resource_owner(uri).is_some_and(|b| direct(b)))
            }
            // The parse took the prompt's name or the resource's URI from `ref` (that
            // is what the completion is authorized as) and left the rest, which must
            // read as rmcp reads it (`argument`, `context`): malformed params go to
            // the handler, which answers them as it answers every verb's.
            Verb::Complete => {
                parsed.arguments.is_none()
                    && completion.is_some()
                    && match (parsed.name.as_deref(), parsed.uri.as_deref()) {
                        (Some(name), None) => catalog
                            .prompt(name)
                            .is_some_and(|entry| direct(&entry.route.backend)),
                        (None, Some(uri)) => catalog
                            .completion_owner_for_resource(uri)
                            .is_some_and(|backend| direct(backend)),
                        _ => false,
                    }
            }
            Verb::List(_) => {
                parsed.name.is_none()
                    && parsed.uri.is_none()
                    && parsed.arguments.is_none()
                    && parsed
                        .params_rest
                        .iter()
                        .all(|(key, value)| key == "cursor" && value.is_string())
            }
        };
        let caller = per_caller.get().then(|| {
            Caller::new(
                extensions.get::<Arc<vmcp_layers::Identity>>().map(|i| &**i),
                extensions
                    .get::<vmcp_layers::context::SubjectToken>()
                    .cloned(),
                req.headers(),
                &self.aggregator.registry().passthrough(),
            )
        });
        known.then(|| Admitted {
            verb,
            id,
            completion,
            parsed: parsed.clone(),
            tasks,
            calls: extensions.get::<BackendCalls>().cloned(),
            admission: extensions.get::<AdmissionHandle>().cloned(),
            audit: extensions.get::<vmcp_layers::context::AuditNote>().cloned(),
            session: has_session.then(|| session.map(Arc::from)).flatten(),
            origin: forward::Origin {
                received: crate::backend::Received::of(extensions),
                caller: crate::backend::CallerKey::of(
                    extensions.get::<Arc<vmcp_layers::Identity>>().map(|i| &**i),
                    session,
                ),
                connection: caller,
            },
        })
    }

    /// How many requests this edge (and its clones) answered.
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Whether `backend` is served over the 2026-07-28 direct path: `Some(false)` on
    /// its one shared connection, `Some(true)` on the caller's own (a backend whose
    /// credentials depend on the caller: `token_exchange`, `passthroughHeaders`;
    /// its connections are opened per caller from the backend's pool, as the
    /// handler opens them). `None`: the handler's.
    fn direct(&self, backend: &str) -> Option<bool> {
        let registry = self.aggregator.registry();
        registry
            .get(backend)
            .filter(|client| client.revision() == Some(McpRevision::Modern))?;
        Some(registry.caller_pool(backend).is_some())
    }

    /// Answer an admitted request, or hand it back (`None`: serve it with rmcp, as if
    /// never admitted) when a 2025-11-25 caller's backend answered `input_required`:
    /// the handler asks the caller over its session and retries (`handler::mrtr`),
    /// which needs the session's peer. The handler's own first call repeats the
    /// backend's, which had not completed (that is what `input_required` says).
    pub(crate) async fn serve(&self, admitted: Admitted) -> Option<Response<Body>> {
        let Admitted {
            verb,
            id,
            completion,
            parsed,
            tasks,
            calls,
            admission,
            session,
            origin,
            audit,
        } = admitted;
        let filtered = admission.is_some();
        let legacy = session.is_some();
        let catalog = self.aggregator.catalog();
        let outcome = match verb {
            Verb::List(kind) => {
                let cursor = parsed.params_rest.get("cursor").and_then(Value::as_str);
                let page_size = self.aggregator.config().page_size();
                let view = admission.as_ref().map(|h| &*h.0);
                match self
                    .pages
                    .page(&catalog, kind, cursor, page_size, legacy, view)
                {
                    Ok(bytes) => {
                        self.served.fetch_add(1, Ordering::Relaxed);
                        return Some(json(StatusCode::OK, envelope(&id, &bytes)));
                    }
                    Err(error) => Err(error),
                }
            }
            _ => {
                let call = async {
                    let typed = match verb {
                        Verb::CallTool => {
                            return self.call_tool(&parsed, tasks, calls, legacy, origin).await;
                        }
                        Verb::GetPrompt => {
                            return self
                                .get_prompt(&catalog, &parsed, calls, legacy, origin)
                                .await;
                        }
                        Verb::ReadResource => {
                            self.read_resource(&catalog, &parsed, calls, filtered, legacy, origin)
                                .await
                        }
                        _ => self.complete(&catalog, completion, legacy, origin).await,
                    };
                    typed.map(Answer::Typed)
                };
                match (&session, &parsed.id) {
                    // A session's call can be cancelled by a notification on another
                    // request; the backend call is dropped as the handler drops it,
                    // and, as MCP asks, no response is sent: the stream just ends.
                    (Some(session), Some(raw_id)) => {
                        let inflight = self.session.start(session, raw_id);
                        tokio::select! {
                            outcome = call => outcome,
                            () = inflight.token.cancelled() => {
                                if let Some(note) = &audit {
                                    note.cancel();
                                }
                                self.served.fetch_add(1, Ordering::Relaxed);
                                return Some(no_answer());
                            }
                        }
                    }
                    _ => call.await,
                }
            }
        };
        let outcome = match outcome {
            Ok(Answer::Spliced(result)) => {
                self.served.fetch_add(1, Ordering::Relaxed);
                return Some(json(StatusCode::OK, envelope(&id, &result)));
            }
            Ok(Answer::Typed(ServerResult::InputRequiredResult(_))) if legacy => return None,
            Ok(Answer::Typed(result)) if legacy => Ok(session::for_legacy_peer(result)),
            Ok(Answer::Typed(result)) => Ok(result),
            Err(error) => Err(error),
        };
        self.served.fetch_add(1, Ordering::Relaxed);
        let message = match outcome {
            Ok(result) => ServerJsonRpcMessage::response(result, id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        // A session request's answer is a stream's message in rmcp: always 200.
        let status = if legacy {
            StatusCode::OK
        } else {
            status_of(&message)
        };
        Some(match serde_json::to_vec(&message) {
            Ok(body) => json(status, Bytes::from(body)),
            Err(error) => {
                tracing::error!("could not serialize an answer: {error}");
                let mut response = Response::new(empty());
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        })
    }
}

/// Only `jsonrpc: "2.0"` besides `id`, `method` and `params`.
/// rmcp's HTTP status for a 2026-07-28 answer (its `jsonrpc_http_status`; admitted
/// requests have well-formed `_meta`, so -32602 stays in-band).
fn status_of(message: &ServerJsonRpcMessage) -> StatusCode {
    let ServerJsonRpcMessage::Error(error) = message else {
        return StatusCode::OK;
    };
    match error.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` around a result serialized earlier, in
/// the member order rmcp writes.
fn envelope(id: &NumberOrString, result: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(result.len() + 48);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // An id serializes infallibly (a string or an integer).
    let _ = serde_json::to_writer(&mut body, id);
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(result);
    body.push(b'}');
    Bytes::from(body)
}

/// A cancelled session call: an event stream that ends without a message.
fn no_answer() -> Response<Body> {
    let mut response = Response::new(empty());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerResult;

    /// Every client-to-server method of both specifications; each must be routed
    /// deliberately.
    const SPEC_METHODS: &[&str] = vmcp_layers::jsonrpc::CLIENT_METHODS;

    #[test]
    fn every_spec_method_is_routed_deliberately() {
        for method in SPEC_METHODS {
            assert!(
                ROUTES.iter().any(|(m, _)| m == method),
                "{method} has no deliberate side"
            );
        }
        let fast: Vec<_> = ROUTES
            .iter()
            .filter(|(_, side)| matches!(side, Side::Fast(_)))
            .map(|(m, _)| *m)
            .collect();
        assert_eq!(
            fast,
            [
                "tools/call",
                "prompts/get",
                "resources/read",
                "completion/complete",
                "tools/list",
                "prompts/list",
                "resources/list",
                "resources/templates/list"
            ]
        );
        assert_eq!(side("no/such/method"), Side::Rmcp);
        assert_eq!(
            ROUTES.len(),
            SPEC_METHODS.len(),
            "a route for a non-spec method"
        );
    }

    #[test]
    fn the_envelope_is_what_rmcp_writes() {
        let result = ServerResult::empty(());
        for id in [
            NumberOrString::Number(7),
            NumberOrString::String("a\"b".into()),
        ] {
            let rmcp =
                serde_json::to_vec(&ServerJsonRpcMessage::response(result.clone(), id.clone()))
                    .unwrap();
            let ours = envelope(&id, &serde_json::to_vec(&result).unwrap());
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&rmcp)
            );
        }
    }
}
