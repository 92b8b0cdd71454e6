//! Client side of the legacy MCP "HTTP+SSE" transport (protocol revision 2024-11-05).
//!
//! rmcp 3.11 dropped its client for this "two-endpoint" transport; many deployed MCP servers
//! still only speak it, so vmcp carries its own implementation.
//!
//! # Protocol
//!
//! 1. The client opens a long-lived `GET` on the SSE URL with `Accept: text/event-stream`.
//! 2. The server's first event is `event: endpoint`; its data is a (usually relative) URL to
//!    which the client POSTs its messages. It is resolved against the SSE URL.
//! 3. Every server → client JSON-RPC message arrives as `event: message` whose data is the JSON
//!    text of the message.
//! 4. Every client → server JSON-RPC message is POSTed to the endpoint URL with
//!    `Content-Type: application/json`. The answer (normally `202 Accepted`) carries no message;
//!    any reply comes back over the event stream.
//!
//! The session lives exactly as long as the event stream: when it ends, the server has
//! forgotten the session, so [`SseClientTransport::receive`](Transport::receive) returns `None`
//! and further sends fail with [`SseTransportError::Closed`]. There is no reconnection.
//!
//! # Safety measures
//!
//! * The endpoint URL must have the same origin (scheme, host, port) as the configured SSE URL,
//!   so a backend cannot redirect our POSTs — and the extra headers they carry, such as
//!   credentials — to another host.
//! * A single event may not exceed [`SseClientConfig::max_event_size`] bytes.
//! * Malformed events (bad JSON, unknown event types, SSE syntax errors) are logged and skipped.
//!
//! # Example
//!
//! ```no_run
//! use rmcp::ServiceExt;
//! use vmcp_service::backend::sse::{SseClientConfig, SseClientTransport};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = SseClientConfig::new("http://127.0.0.1:3001/sse");
//! let transport = SseClientTransport::connect(reqwest::Client::new(), config).await?;
//! let client = ().serve(transport).await?;
//! let tools = client.list_all_tools().await?;
//! # drop(tools);
//! # Ok(())
//! # }
//! ```

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, stream::BoxStream};
use http::{
    HeaderMap, HeaderValue, StatusCode,
    header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE},
};
use reqwest::Url;
use rmcp::{
    RoleClient,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use sse_stream::Sse;

use framing::event_stream;

mod error;
pub use error::{SseTransportError, UrlParseError};
use tokio::{sync::mpsc, task::JoinHandle};

/// Default for [`SseClientConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`SseClientConfig::post_timeout`].
pub const DEFAULT_POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default for [`SseClientConfig::max_event_size`] (16 MiB, as rmcp's own SSE clients).
pub const DEFAULT_MAX_EVENT_SIZE: usize = 16 * 1024 * 1024;

/// How many received messages may wait for [`Transport::receive`] before the reader stops
/// reading the stream.
const CHANNEL_CAPACITY: usize = 64;
/// How much of a POST answer body we read: quoted in errors, drained on success so the
/// connection can be reused.
const MAX_POST_BODY: usize = 512;
/// How much of a malformed event's data is quoted in a log line.
const LOG_PREVIEW: usize = 200;

/// Configuration of one legacy HTTP+SSE connection; see [`SseClientTransport::connect`].
#[derive(Clone)]
pub struct SseClientConfig {
    /// The SSE URL the client GETs, e.g. `http://127.0.0.1:3001/sse`. Must be `http` or `https`.
    pub url: String,
    /// Extra headers sent with the `GET` and with every `POST` (e.g. `Authorization`).
    ///
    /// `Accept` on the `GET` and `Content-Type` on the `POST`s are set by the transport and
    /// override any value given here.
    pub headers: HeaderMap,
    /// Bound on the whole handshake: from sending the `GET` to receiving the `endpoint` event.
    pub connect_timeout: Duration,
    /// Per-request timeout of each `POST`, or `None` for no timeout.
    ///
    /// The `POST` answer does not wait for the reply (that arrives on the stream), so this can
    /// be short. Do not give the [`reqwest::Client`] itself a total request timeout: it would
    /// also cut the long-lived event stream.
    pub post_timeout: Option<Duration>,
    /// Maximum size in bytes of a single server-sent event; a larger event ends the stream.
    pub max_event_size: usize,
}

impl SseClientConfig {
    /// A configuration for `url` with no extra headers and the default limits.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: HeaderMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            post_timeout: Some(DEFAULT_POST_TIMEOUT),
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
        }
    }
}

/// Shows header names only: header values often carry credentials.
impl fmt::Debug for SseClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientConfig")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("connect_timeout", &self.connect_timeout)
            .field("post_timeout", &self.post_timeout)
            .field("max_event_size", &self.max_event_size)
            .finish()
    }
}

/// A client [`Transport`] over the legacy MCP HTTP+SSE transport (see the [module](self) docs).
///
/// Created by [`connect`](Self::connect), used through rmcp, e.g.
/// `().serve(transport).await`. Dropping it stops the background reader and so closes the
/// event stream.
pub struct SseClientTransport {
    client: reqwest::Client,
    endpoint: Url,
    post_headers: HeaderMap,
    post_timeout: Option<Duration>,
    messages: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: Option<JoinHandle<()>>,
    closed: Arc<AtomicBool>,
}

impl fmt::Debug for SseClientTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseClientTransport")
            .field("endpoint", &self.endpoint.as_str())
            .field("closed", &self.closed.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

impl SseClientTransport {
    /// Opens the event stream and waits for the `endpoint` event.
    ///
    /// The whole handshake is bounded by [`SseClientConfig::connect_timeout`], so a dead URL,
    /// a URL that is not an SSE endpoint, or a server that never names its endpoint fails
    /// here with a specific [`SseTransportError`]. On success a background task reads the
    /// stream; it must be called within a Tokio runtime.
    ///
    /// `client` should not have a total request timeout (see
    /// [`SseClientConfig::post_timeout`]).
    pub async fn connect(
        client: reqwest::Client,
        config: SseClientConfig,
    ) -> Result<Self, SseTransportError> {
        let SseClientConfig {
            url,
            headers,
            connect_timeout,
            post_timeout,
            max_event_size,
        } = config;
        let sse_url = match Url::parse(&url) {
            Ok(sse_url) => sse_url,
            Err(source) => return Err(SseTransportError::InvalidUrl { url, source }),
        };
        if !matches!(sse_url.scheme(), "http" | "https") {
            return Err(SseTransportError::UnsupportedScheme {
                scheme: sse_url.scheme().to_owned(),
                url: sse_url.into(),
            });
        }

        let Handshake {
            endpoint,
            events,
            early,
        } = tokio::time::timeout(
            connect_timeout,
            handshake(&client, &sse_url, &headers, max_event_size),
        )
        .await
        .map_err(|_elapsed| SseTransportError::ConnectTimeout {
            url: sse_url.to_string(),
            timeout: connect_timeout,
        })??;
        tracing::debug!(url = %sse_url, %endpoint, "legacy SSE transport connected");

        let mut post_headers = headers;
        post_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let (sender, messages) = mpsc::channel(CHANNEL_CAPACITY);
        let closed = Arc::new(AtomicBool::new(false));
        let reader = tokio::spawn(read_events(
            events,
            early,
            sender,
            CloseOnDrop(closed.clone()),
            sse_url,
        ));
        Ok(Self {
            client,
            endpoint,
            post_headers,
            post_timeout,
            messages,
            reader: Some(reader),
            closed,
        })
    }

    /// The endpoint URL announced by the server, to which messages are POSTed.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// Whether the session is over: the event stream ended or [`close`](Transport::close) was
    /// called. Messages already received can still be read with
    /// [`receive`](Transport::receive).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn stop_reader(&mut self) -> Option<JoinHandle<()>> {
        self.closed.store(true, Ordering::Release);
        self.messages.close();
        let reader = self.reader.take()?;
        reader.abort();
        Some(reader)
    }
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        self.stop_reader();
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = SseTransportError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.post_headers.clone();
        let timeout = self.post_timeout;
        let closed = self.closed.clone();
        async move {
            if closed.load(Ordering::Acquire) {
                return Err(SseTransportError::Closed);
            }
            post_message(&client, endpoint, headers, timeout, &item).await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        self.messages.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(reader) = self.stop_reader() {
            // Wait for the abort to land so the stream's connection is released on return.
            let _cancelled = reader.await;
        }
        Ok(())
    }
}

/// What the handshake hands over to the reader task.
struct Handshake {
    endpoint: Url,
    events: BoxStream<'static, Result<Sse, sse_stream::Error>>,
    /// Messages that arrived before the `endpoint` event.
    early: Vec<ServerJsonRpcMessage>,
}

/// GETs the SSE URL and reads events up to and including the `endpoint` event.
async fn handshake(
    client: &reqwest::Client,
    sse_url: &Url,
    headers: &HeaderMap,
    max_event_size: usize,
) -> Result<Handshake, SseTransportError> {
    let mut get_headers = headers.clone();
    get_headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    get_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let response = client
        .get(sse_url.clone())
        .headers(get_headers)
        .send()
        .await
        .map_err(|source| SseTransportError::Connect {
            url: sse_url.to_string(),
            source,
        })?;

    let status = response.status();
    if status != StatusCode::OK {
        return Err(SseTransportError::ConnectStatus {
            url: sse_url.to_string(),
            status,
        });
    }
    let content_type = response.headers().get(CONTENT_TYPE);
    if !content_type.is_some_and(is_event_stream) {
        return Err(SseTransportError::NotEventStream {
            url: sse_url.to_string(),
            content_type: content_type
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into()),
        });
    }

    // After redirects, relative endpoints are relative to where the stream really is.
    let base = response.url().clone();
    let mut events = event_stream(response, max_event_size);
    let mut early = Vec::new();
    loop {
        let Some(event) = events.next().await else {
            return Err(SseTransportError::EndedBeforeEndpoint {
                url: sse_url.to_string(),
            });
        };
        let event = match event {
            Ok(event) => event,
            Err(source @ sse_stream::Error::Body(_)) => {
                return Err(SseTransportError::Stream {
                    url: sse_url.to_string(),
                    source,
                });
            }
            Err(error) => {
                tracing::warn!(url = %sse_url, %error, "skipping malformed server-sent event");
                continue;
            }
        };
        match EventKind::of(&event) {
            EventKind::Endpoint => {
                let endpoint = resolve_endpoint(sse_url, &base, event.data.as_deref())?;
                return Ok(Handshake {
                    endpoint,
                    events,
                    early,
                });
            }
            EventKind::Message => early.extend(decode_message_event(sse_url, &event)),
            EventKind::Other(name) => {
                tracing::debug!(url = %sse_url, event = name, "ignoring server-sent event");
            }
        }
    }
}

/// Reads the event stream after the handshake and forwards messages to the transport.
///
/// Ends (closing the channel, so `receive` returns `None`) when the stream ends or fails, or
/// when the transport is gone.
async fn read_events(
    mut events: BoxStream<'static, Result<Sse, sse_stream::Error>>,
    early: Vec<ServerJsonRpcMessage>,
    sender: mpsc::Sender<ServerJsonRpcMessage>,
    _closed: CloseOnDrop,
    url: Url,
) {
    for message in early {
        if sender.send(message).await.is_err() {
            return;
        }
    }
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(sse_stream::Error::Body(error)) => {
                tracing::warn!(%url, %error, "legacy SSE stream failed");
                return;
            }
            Err(error) => {
                tracing::warn!(%url, %error, "skipping malformed server-sent event");
                continue;
            }
        };
        match EventKind::of(&event) {
            EventKind::Message => {
                for message in decode_message_event(&url, &event) {
                    if sender.send(message).await.is_err() {
                        return;
                    }
                }
            }
            EventKind::Endpoint => {
                tracing::warn!(%url, data = ?event.data, "ignoring repeated `endpoint` event");
            }
            EventKind::Other(name) => {
                tracing::debug!(%url, event = name, "ignoring server-sent event");
            }
        }
    }
    tracing::debug!(%url, "legacy SSE stream ended");
}

/// Marks the session closed when the reader task ends, however it ends (including abort).
struct CloseOnDrop(Arc<AtomicBool>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

enum EventKind<'a> {
    Endpoint,
    Message,
    Other(&'a str),
}

impl<'a> EventKind<'a> {
    fn of(event: &'a Sse) -> Self {
        // An event without an `event:` field has the type "message" (HTML SSE spec).
        match event.event.as_deref() {
            None | Some("message") => Self::Message,
            Some("endpoint") => Self::Endpoint,
            Some(other) => Self::Other(other),
        }
    }
}

/// Decodes the data of a `message` event: one JSON-RPC message, or a batch (a JSON array,
/// allowed by the 2024-11-05 revision). Undecodable data is logged and yields nothing.
fn decode_message_event(url: &Url, event: &Sse) -> Vec<ServerJsonRpcMessage> {
    let Some(data) = event.data.as_deref().filter(|data| !data.trim().is_empty()) else {
        tracing::debug!(%url, "ignoring server-sent message event without data");
        return Vec::new();
    };
    let decoded = if data.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<ServerJsonRpcMessage>>(data)
    } else {
        serde_json::from_str::<ServerJsonRpcMessage>(data).map(|message| vec![message])
    };
    decoded.unwrap_or_else(|error| {
        tracing::warn!(
            %url,
            %error,
            data = preview(data),
            "skipping server-sent message that is not a JSON-RPC message"
        );
        Vec::new()
    })
}

/// At most [`LOG_PREVIEW`] bytes of `text`, cut on a character boundary.
fn preview(text: &str) -> &str {
    if text.len() <= LOG_PREVIEW {
        return text;
    }
    let mut end = LOG_PREVIEW;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn is_event_stream(content_type: &HeaderValue) -> bool {
    content_type
        .to_str()
        .ok()
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Resolves the `endpoint` event data against `base` (where the stream was served from) and
/// checks that the result is on the origin of the configured SSE URL.
fn resolve_endpoint(
    sse_url: &Url,
    base: &Url,
    data: Option<&str>,
) -> Result<Url, SseTransportError> {
    let data = data.map(str::trim).unwrap_or_default();
    if data.is_empty() {
        return Err(SseTransportError::InvalidEndpoint {
            data: data.to_owned(),
            reason: "empty".to_owned(),
        });
    }
    let endpoint = base
        .join(data)
        .map_err(|error| SseTransportError::InvalidEndpoint {
            data: data.to_owned(),
            reason: error.to_string(),
        })?;
    if endpoint.origin() != sse_url.origin() {
        return Err(SseTransportError::CrossOriginEndpoint {
            url: sse_url.to_string(),
            endpoint: endpoint.into(),
        });
    }
    Ok(endpoint)
}

/// POSTs one message to the endpoint.
async fn post_message(
    client: &reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    timeout: Option<Duration>,
    message: &ClientJsonRpcMessage,
) -> Result<(), SseTransportError> {
    let body = serde_json::to_vec(message)?;
    let mut request = client.post(endpoint.clone()).headers(headers).body(body);
    if let Some(timeout) = timeout {
        request = request.timeout(timeout);
    }
    let mut response = match request.send().await {
        Ok(response) => response,
        Err(source) => {
            return Err(SseTransportError::Post {
                endpoint: endpoint.into(),
                source,
            });
        }
    };
    let status = response.status();
    let body = read_prefix(&mut response, MAX_POST_BODY).await;
    if status.is_success() {
        Ok(())
    } else {
        Err(SseTransportError::PostStatus {
            endpoint: endpoint.into(),
            status,
            body,
        })
    }
}

/// Reads at most about `limit` bytes of the body, as lossy UTF-8; read errors end the body.
async fn read_prefix(response: &mut reqwest::Response, limit: usize) -> String {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(limit);
    String::from_utf8_lossy(&body).into_owned()
}

mod framing;
#[cfg(test)]
mod tests;
