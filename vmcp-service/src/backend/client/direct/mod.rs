// Over 600 lines only with its tests (about 300: raw streaming backends for the connection-reuse and drain cases); the reading of answers and the SEP-2243 headers are modules of their own.
//! Forwarded 2026-07-28 requests sent as one HTTP POST from the caller's own task.
//!
//! A Modern backend needs no session, so `tools/call` and `prompts/get` on a Modern
//! connection do not go through rmcp's client service loop. That path hands every
//! request through three tasks (the service loop, the transport worker, and a
//! stream task for an SSE answer) and parses the answer as an untagged union of
//! every message and result type; on a 2-core machine those hand-offs cost more than
//! the rest of the gateway's work per call (see `docs/benchmarks.md`). Here the
//! caller serializes the params once, POSTs them with the SEP-2243 headers, and
//! parses the answer straight into the type it expects.
//!
//! Connecting (`server/discover`), lists, subscriptions, `resources/read` (whose
//! results rmcp caches), completions and Legacy sessions stay on rmcp's client.

mod answer;
mod headers;

pub(super) use answer::{call_response, prompt_response};

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures::{FutureExt, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, GetPromptRequestParams,
    GetPromptResponse, Implementation, JsonObject, NumberOrString, ProgressToken, ProtocolVersion,
    RequestMetaObject, ServerJsonRpcMessage, ServerNotification, Tool,
};
use rmcp::service::ServiceError;
use rmcp::transport::DynamicTransportError;
use serde_json::value::RawValue;

use super::wire::{self, Context, RequestParams};
use crate::backend::http_clients::{DirectClient, DirectHttpError, PooledBody};
use crate::backend::relay::{Relay, Relayed};
use answer::{Envelope, answer};
use headers::{
    LOWER_METHOD, LOWER_NAME, LOWER_PROTOCOL_VERSION, ParamHeader, add_param_headers,
    encode_header_value, param_headers,
};

/// A JSON answer, or one event of a streamed answer, larger than this is refused
/// (rmcp's client has the same kind of bound).
const MAX_ANSWER: usize = 16 * 1024 * 1024;
const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// Why a direct request failed below the JSON-RPC level.
#[derive(Debug, thiserror::Error)]
pub(super) enum DirectError {
    /// The HTTP exchange failed.
    #[error("http: {0}")]
    Http(#[from] DirectHttpError),
    /// Reading the answer's body failed.
    #[error("http body: {0}")]
    Body(#[from] hyper::Error),
    /// The backend answered with an HTTP status and no JSON-RPC error.
    #[error("backend answered HTTP {0}")]
    Status(StatusCode),
    /// The answer was neither JSON nor an event stream.
    #[error("unexpected content type {0:?}")]
    ContentType(String),
    /// The answer (or one event of it) exceeded [`MAX_ANSWER`].
    #[error("answer larger than {MAX_ANSWER} bytes")]
    TooLarge,
    /// The answer could not be parsed.
    #[error("malformed answer: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The event stream ended without the answer.
    #[error("the event stream ended before the answer")]
    Incomplete,
    /// The event stream broke.
    #[error("event stream: {0}")]
    Stream(String),
}

impl From<DirectError> for ServiceError {
    fn from(error: DirectError) -> Self {
        ServiceError::TransportSend(DynamicTransportError::from_parts(
            "streamable-http (direct)",
            std::any::TypeId::of::<DirectError>(),
            Box::new(error),
        ))
    }
}

/// What a Modern connection needs to send requests without rmcp's service loop.
pub(super) struct DirectHttp {
    http: DirectClient,
    /// Parsed once, at connect.
    url: http::Uri,
    /// The headers every request carries (`Accept`, `Content-Type`,
    /// `MCP-Protocol-Version`, `Host`), built once: each request clones them.
    common: http::HeaderMap,
    /// The SEP-2575 client context rmcp's client puts in every request's `_meta`.
    context: Context,
    next_id: AtomicI64,
    /// Answered event streams being read to their end on the side (see [`drain`]).
    draining: Arc<AtomicUsize>,
    /// Tools (by backend name) whose schemas carry `x-mcp-header` annotations.
    param_headers: RwLock<Arc<HashMap<String, Arc<[ParamHeader]>>>>,
    /// Where notifications that arrive in an answer's event stream go.
    notify: Box<dyn Fn(ServerNotification) + Send + Sync>,
}

impl DirectHttp {
    /// Requests to `uri` as the client `info` that negotiated `version`.
    pub(super) fn new(
        http: DirectClient,
        uri: &str,
        version: ProtocolVersion,
        info: Implementation,
        capabilities: ClientCapabilities,
        notify: Box<dyn Fn(ServerNotification) + Send + Sync>,
    ) -> Option<Self> {
        let url: http::Uri = uri.parse().ok()?;
        let mut common = http::HeaderMap::with_capacity(6);
        common.insert(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        common.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        common.insert(
            HeaderName::from_static(LOWER_PROTOCOL_VERSION),
            HeaderValue::from_str(version.as_str()).ok()?,
        );
        // As `DirectClient::post` would add it to each request.
        if let Some(host) = url
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            common.insert(http::header::HOST, host);
        }
        Some(Self {
            http,
            url,
            common,
            context: Context::new(
                &RequestMetaObject::with_client_context(version, info, capabilities)
                    .0
                    .0,
            ),
            next_id: AtomicI64::new(1),
            draining: Arc::default(),
            param_headers: RwLock::default(),
            notify,
        })
    }

    /// Learn which of the backend's tools promote arguments to headers.
    pub(super) fn set_tools(&self, tools: &[Tool]) {
        let map: HashMap<String, Arc<[ParamHeader]>> = tools
            .iter()
            .filter_map(|tool| {
                let headers = param_headers(&tool.input_schema);
                (!headers.is_empty()).then(|| (tool.name.to_string(), headers.into()))
            })
            .collect();
        *self
            .param_headers
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
    }

    /// `tools/call`, answered with a result, an MRTR `input_required` or a task.
    /// `raw`: the caller's arguments as it wrote them, sent instead of the params'.
    /// With a `relay`, the call's progress and logs go to it (see `backend::relay`).
    pub(super) async fn call_tool(
        &self,
        params: &CallToolRequestParams,
        raw: Option<&RawValue>,
        relay: Option<&Relay>,
    ) -> Result<CallToolResponse, ServiceError> {
        let raw = self.call_tool_raw(params, raw, relay).await?;
        call_response(raw.get())
    }

    /// [`Self::call_tool`]'s answer as the backend wrote it.
    pub(super) async fn call_tool_raw(
        &self,
        params: &CallToolRequestParams,
        raw: Option<&RawValue>,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, ServiceError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (relayed, hop) = relayed_meta(params.meta.as_ref(), id, relay);
        let wire = RequestParams::call(params, &self.context)
            .raw_arguments(raw)
            .relayed(relayed.as_ref().map(|m| &m.0.0));
        let mut headers = self.headers("tools/call", Some(params.name.as_ref()));
        let schema = self
            .param_headers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(params.name.as_ref())
            .cloned();
        if let Some(annotations) = schema {
            // Raw arguments are read here only for a tool that promotes some to headers.
            let parsed: Option<JsonObject> =
                raw.and_then(|raw| serde_json::from_str(raw.get()).ok());
            if let Some(arguments) = parsed.as_ref().or(params.arguments.as_ref()) {
                add_param_headers(&mut headers, &annotations, arguments);
            }
        }
        self.send(
            "tools/call",
            id,
            &wire,
            headers,
            relay.map(|r| (r, hop.as_ref())),
        )
        .await
    }

    /// `prompts/get`, answered with a prompt or an MRTR `input_required`.
    pub(super) async fn get_prompt(
        &self,
        params: &GetPromptRequestParams,
        relay: Option<&Relay>,
    ) -> Result<GetPromptResponse, ServiceError> {
        let raw = self.get_prompt_raw(params, relay).await?;
        prompt_response(raw.get())
    }

    /// [`Self::get_prompt`]'s answer as the backend wrote it.
    pub(super) async fn get_prompt_raw(
        &self,
        params: &GetPromptRequestParams,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, ServiceError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (relayed, hop) = relayed_meta(params.meta.as_ref(), id, relay);
        let wire =
            RequestParams::prompt(params, &self.context).relayed(relayed.as_ref().map(|m| &m.0.0));
        let headers = self.headers("prompts/get", Some(&params.name));
        self.send(
            "prompts/get",
            id,
            &wire,
            headers,
            relay.map(|r| (r, hop.as_ref())),
        )
        .await
    }

    /// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` (SEP-2243).
    fn headers(&self, method: &'static str, name: Option<&str>) -> http::HeaderMap {
        let mut headers = self.common.clone();
        headers.insert(
            HeaderName::from_static(LOWER_METHOD),
            HeaderValue::from_static(method),
        );
        if let Some(value) = name.and_then(|n| HeaderValue::from_str(&encode_header_value(n)).ok())
        {
            headers.insert(HeaderName::from_static(LOWER_NAME), value);
        }
        headers
    }

    /// POST one request and return its `result`, raw; a JSON-RPC error is
    /// [`ServiceError::McpError`].
    async fn send(
        &self,
        method: &'static str,
        id: i64,
        params: &RequestParams<'_>,
        headers: http::HeaderMap,
        relay: Option<(&Relay, Option<&ProgressToken>)>,
    ) -> Result<Box<RawValue>, ServiceError> {
        let body = wire::request(id, method, params).map_err(DirectError::from)?;
        let response = self
            .http
            .post(&self.url, headers, body)
            .await
            .map_err(DirectError::from)?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        // Compared without case, and without a lower-cased copy per answer.
        let is = |prefix: &str| {
            content_type
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
        };
        if is("text/event-stream") && status.is_success() {
            return self.read_stream(response, id, relay).await;
        }
        if !is("application/json") {
            return Err(if status.is_success() {
                DirectError::ContentType(content_type.to_ascii_lowercase())
            } else {
                DirectError::Status(status)
            }
            .into());
        }
        if response
            .body()
            .size_hint()
            .exact()
            .is_some_and(|n| n > MAX_ANSWER as u64)
        {
            return Err(DirectError::TooLarge.into());
        }
        let body = read_limited(response).await?;
        match answer(&body, id) {
            Ok(Some(result)) if status.is_success() => Ok(result),
            // An HTTP error with a JSON-RPC error body (e.g. 400 -32020) is that error.
            Err(ServiceError::McpError(error)) => Err(ServiceError::McpError(error)),
            _ if !status.is_success() => Err(DirectError::Status(status).into()),
            Ok(Some(result)) => Ok(result),
            Ok(None) => Err(DirectError::Incomplete.into()),
            Err(error) => Err(error),
        }
    }

    /// Read an event stream until the answer to `id`, forwarding notifications. The
    /// caller's task reads it, so relayed notifications keep their wire order and all
    /// of them are handed over before the answer.
    async fn read_stream(
        &self,
        response: http::Response<PooledBody>,
        id: i64,
        relay: Option<(&Relay, Option<&ProgressToken>)>,
    ) -> Result<Box<RawValue>, ServiceError> {
        let mut events = sse_stream::SseStream::from_bytes_stream(bounded(
            response.into_body().into_data_stream(),
        ));
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| DirectError::Stream(e.to_string()))?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue; // priming event or keep-alive
            };
            match self.message(&data, id, relay)? {
                Step::Answer(result) => {
                    // MCP servers end a POST's stream after its answer, often in a
                    // write of its own. A body dropped before its end closes the
                    // connection, and the next call pays for a new one on both sides
                    // (under load on 2 cores, most calls did), so the end is read
                    // now when it is here, else on the side; the answer never waits.
                    if !matches!(events.next().now_or_never(), Some(None)) {
                        drain(events, &self.draining);
                    }
                    return Ok(result);
                }
                Step::Relay(relayed) => {
                    if let Some((relay, _)) = relay {
                        relay.send(relayed).await;
                    }
                }
                Step::Skip => {}
            }
        }
        Err(DirectError::Incomplete.into())
    }

    /// One message of an answer: the result for `id`, a notification for the call's
    /// relay, or nothing (a notification passed on to the connection's events, or a
    /// message that is not ours).
    fn message(
        &self,
        data: &str,
        id: i64,
        relay: Option<(&Relay, Option<&ProgressToken>)>,
    ) -> Result<Step, ServiceError> {
        let envelope: Envelope = serde_json::from_str(data).map_err(DirectError::from)?;
        if envelope.method.is_some() {
            match serde_json::from_str::<ServerJsonRpcMessage>(data) {
                Ok(ServerJsonRpcMessage::Notification(n)) if Relay::consumes(&n.notification) => {
                    if let Some(relayed) =
                        relay.and_then(|(relay, hop)| relay.translate(&n.notification, hop))
                    {
                        return Ok(Step::Relay(relayed));
                    }
                }
                Ok(ServerJsonRpcMessage::Notification(n)) => (self.notify)(n.notification),
                Ok(_) => tracing::debug!("ignoring a request a 2026-07-28 backend sent"),
                Err(error) => tracing::debug!("ignoring an unreadable message: {error}"),
            }
            return Ok(Step::Skip);
        }
        Ok(match envelope.into_answer(id)? {
            Some(result) => Step::Answer(result),
            None => Step::Skip,
        })
    }
}

/// What one message of an answer stream is to the call reading it.
enum Step {
    /// The answer to the call.
    Answer(Box<RawValue>),
    /// A notification for the call's relay.
    Relay(Relayed),
    /// Nothing for the call.
    Skip,
}

/// A relayed request's own `_meta`: the caller's, plus what the relay's caller
/// wants asked of the backend (progress under a token of this hop, the request id,
/// unique on this connection, and logs at the caller's level); and that token.
/// Without a relay, nothing: the caller's `_meta` is sent as it is.
fn relayed_meta(
    meta: Option<&RequestMetaObject>,
    id: i64,
    relay: Option<&Relay>,
) -> (Option<RequestMetaObject>, Option<ProgressToken>) {
    let Some(relay) = relay else {
        return (None, None);
    };
    let mut meta = meta.cloned().unwrap_or_default();
    if let Some(level) = relay.log_level() {
        meta.set_log_level(level);
    }
    let hop = relay.wants_progress().then(|| {
        let token = ProgressToken(NumberOrString::Number(id));
        meta.set_progress_token(token.clone());
        token
    });
    (Some(meta), hop)
}

/// How long the end of an answered event stream is waited for on the side.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// At most this many answered streams of one backend connection are read on the
/// side at once; past it, a stream is dropped, closing its connection, so a backend
/// that never ends its streams cannot pile up open connections.
const MAX_DRAINING: usize = 64;

/// Read what is left of an answered event stream in a task of its own, so its
/// connection goes back to the pool when the stream ends. Anything still sent is
/// dropped; a stream that errs or has not ended within [`DRAIN_WAIT`] is dropped,
/// which closes its connection, and so is one past [`MAX_DRAINING`].
fn drain<S, E>(mut rest: S, draining: &Arc<AtomicUsize>)
where
    S: futures::Stream<Item = Result<sse_stream::Sse, E>> + Send + Unpin + 'static,
{
    /// Holds one of the `MAX_DRAINING` places until dropped.
    struct Place(Arc<AtomicUsize>);
    impl Drop for Place {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    if draining.fetch_add(1, Ordering::Relaxed) >= MAX_DRAINING {
        draining.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let place = Place(draining.clone());
    tokio::spawn(async move {
        let _place = place;
        let _ = tokio::time::timeout(DRAIN_WAIT, async {
            while let Some(Ok(_)) = rest.next().await {}
        })
        .await;
    });
}

/// The body of an event stream, failing once an event grows past [`MAX_ANSWER`]
/// (the parser would otherwise buffer it whole). A blank line split across two
/// chunks is missed, which can only make the bound stricter.
fn bounded<E>(
    body: impl futures::Stream<Item = Result<bytes::Bytes, E>>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, DirectError>>
where
    DirectError: From<E>,
{
    let mut pending = 0usize;
    body.map(move |chunk| {
        let chunk = chunk?;
        let end = [&b"\n\n"[..], b"\n\r\n"]
            .iter()
            .filter_map(|blank| memchr::memmem::rfind(&chunk, blank).map(|at| at + blank.len()))
            .max();
        pending = match end {
            Some(end) => chunk.len() - end,
            None => pending + chunk.len(),
        };
        if pending > MAX_ANSWER {
            return Err(DirectError::TooLarge);
        }
        Ok(chunk)
    })
}

async fn read_limited(response: http::Response<PooledBody>) -> Result<Vec<u8>, ServiceError> {
    let mut incoming = response.into_body();
    let expected = incoming.size_hint().exact().unwrap_or(1024);
    let mut body = Vec::with_capacity(expected.min(MAX_ANSWER as u64) as usize);
    while let Some(frame) = incoming.frame().await {
        let Ok(chunk) = frame.map_err(DirectError::from)?.into_data() else {
            continue; // trailers
        };
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(DirectError::TooLarge.into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::super::wire::CLIENT_CAPABILITIES;
    use super::*;
    use serde_json::json;

    /// A backend answering every POST with a one-event stream that then ends (as
    /// MCP servers do), over keep-alive connections; counts the connections.
    async fn streaming_backend() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        streaming_backend_ending_on(None).await
    }

    /// [`streaming_backend`]; with `end`, each stream is chunked and its end is
    /// written only once `end` is notified (the answer itself goes out at once).
    async fn streaming_backend_ending_on(
        end: Option<Arc<tokio::sync::Notify>>,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let end = end.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let mut seen = Vec::new();
                        // The request's JSON body ends the request (one per write).
                        while !seen.ends_with(b"}") {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        let text = String::from_utf8_lossy(&seen);
                        let id: String = text
                            .split("\"id\":")
                            .nth(1)
                            .unwrap_or("0")
                            .chars()
                            .take_while(char::is_ascii_digit)
                            .collect();
                        let event = format!(
                            "data: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[]}}}}\n\n"
                        );
                        if let Some(end) = &end {
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
                                event.len()
                            );
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                            end.notified().await;
                            if stream.write_all(b"0\r\n\r\n").await.is_err() {
                                return;
                            }
                            continue;
                        }
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{event}",
                            event.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    /// A 2026-07-28 direct path to `url` over `http`, dropping notifications.
    fn modern_direct(url: &str, http: DirectClient) -> DirectHttp {
        DirectHttp::new(
            http,
            url,
            ProtocolVersion::V_2026_07_28,
            Implementation::new("vmcp", "0"),
            ClientCapabilities::default(),
            Box::new(|_| {}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn calls_answered_in_event_streams_reuse_their_connection() {
        let (url, accepted) = streaming_backend().await;
        let direct = modern_direct(&url, DirectClient::new(None, http::HeaderMap::new()));
        for _ in 0..3 {
            let answer = direct
                .call_tool(&CallToolRequestParams::new("echo"), None, None)
                .await
                .unwrap();
            assert!(matches!(answer, CallToolResponse::Complete(_)));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_ending_after_its_answer_still_returns_its_connection() {
        let end = Arc::new(tokio::sync::Notify::new());
        let (url, accepted) = streaming_backend_ending_on(Some(end.clone())).await;
        let http = DirectClient::new(None, http::HeaderMap::new());
        let direct = modern_direct(&url, http.clone());
        for round in 0..3 {
            // The answer does not wait for the stream's end...
            let answer = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                direct.call_tool(&CallToolRequestParams::new("echo"), None, None),
            )
            .await
            .expect("the answer waited for the end of its stream")
            .unwrap();
            assert!(matches!(answer, CallToolResponse::Complete(_)));
            assert_eq!(http.idle_connections(), 0, "round {round}");
            // ...and once the end comes, the connection is back in the pool.
            end.notify_one();
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while http.idle_connections() == 0 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "round {round}: the connection never came back"
                );
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn streams_that_never_end_hold_at_most_max_draining_connections() {
        // The end never comes: each answered stream waits on the side, up to the
        // bound; past it, calls still answer and their connections are closed.
        let never = Arc::new(tokio::sync::Notify::new());
        let (url, accepted) = streaming_backend_ending_on(Some(never)).await;
        let direct = modern_direct(&url, DirectClient::new(None, http::HeaderMap::new()));
        for _ in 0..MAX_DRAINING + 6 {
            let answer = direct
                .call_tool(&CallToolRequestParams::new("echo"), None, None)
                .await
                .unwrap();
            assert!(matches!(answer, CallToolResponse::Complete(_)));
        }
        assert_eq!(direct.draining.load(Ordering::Relaxed), MAX_DRAINING);
        assert_eq!(accepted.load(Ordering::SeqCst), MAX_DRAINING + 6);
    }

    #[test]
    fn notifications_in_an_answer_stream_are_passed_on() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let direct = DirectHttp::new(
            DirectClient::new(None, http::HeaderMap::new()),
            "http://127.0.0.1:9/mcp",
            ProtocolVersion::V_2026_07_28,
            Implementation::new("vmcp", "0"),
            ClientCapabilities::default(),
            Box::new(move |n| sink.lock().unwrap().push(n)),
        )
        .unwrap();
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert!(matches!(direct.message(note, 1, None).unwrap(), Step::Skip));
        let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert!(matches!(
            direct.message(answer, 1, None).unwrap(),
            Step::Answer(_)
        ));
        let seen = seen.lock().unwrap();
        assert!(matches!(
            seen.as_slice(),
            [ServerNotification::ToolListChangedNotification(_)]
        ));
    }

    #[test]
    fn the_callers_capabilities_stand_over_the_connections() {
        let mut gateway_caps = ClientCapabilities::default();
        gateway_caps.roots = Some(Default::default());
        let direct = DirectHttp::new(
            DirectClient::new(None, http::HeaderMap::new()),
            "http://127.0.0.1:9/mcp",
            ProtocolVersion::V_2026_07_28,
            Implementation::new("vmcp", "0"),
            gateway_caps,
            Box::new(|_| {}),
        )
        .unwrap();
        // The `_meta` a prompts/get sends, as written on the wire.
        let sent_meta = |params: &GetPromptRequestParams| {
            let wire = RequestParams::prompt(params, &direct.context);
            let body: serde_json::Value =
                serde_json::from_slice(&wire::request(1, "prompts/get", &wire).unwrap()).unwrap();
            body["params"]["_meta"].clone()
        };
        let plain = sent_meta(&GetPromptRequestParams::new("p"));
        assert_eq!(plain[CLIENT_CAPABILITIES], json!({"roots": {}}));
        assert_eq!(
            plain["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        let mut declared = GetPromptRequestParams::new("p");
        let mut meta = RequestMetaObject::default();
        meta.set_client_capabilities(ClientCapabilities::default());
        declared.meta = Some(meta);
        assert_eq!(sent_meta(&declared)[CLIENT_CAPABILITIES], json!({}));
    }

    #[tokio::test]
    async fn an_oversized_event_ends_the_stream() {
        let big = bytes::Bytes::from(vec![b'x'; MAX_ANSWER / 2 + 1]);
        let chunks: Vec<Result<_, hyper::Error>> = vec![
            Ok(bytes::Bytes::from_static(b"data: {}\n\n")),
            Ok(big.clone()),
            Ok(big),
        ];
        let out: Vec<_> = bounded(futures::stream::iter(chunks)).collect().await;
        assert!(out[0].is_ok() && out[1].is_ok());
        assert!(matches!(out[2], Err(DirectError::TooLarge)));
        let small: Vec<Result<_, hyper::Error>> =
            vec![Ok(bytes::Bytes::from_static(b"data: 1\n\ndata: 2\r\n\r\n"))];
        let out: Vec<_> = bounded(futures::stream::iter(small)).collect().await;
        assert!(out.iter().all(Result::is_ok));
    }
}
