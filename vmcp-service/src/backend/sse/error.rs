//! How the legacy HTTP+SSE client transport fails.

use std::time::Duration;

use reqwest::{StatusCode, Url};

/// The error type of [`Url`] parsing (`url::ParseError`, which reqwest does not re-export).
pub type UrlParseError = <Url as std::str::FromStr>::Err;

/// Errors of the legacy HTTP+SSE client transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SseTransportError {
    /// [`SseClientConfig::url`] is not a valid absolute URL.
    #[error("invalid SSE URL {url:?}: {source}")]
    InvalidUrl {
        /// The configured URL.
        url: String,
        /// Why it does not parse.
        #[source]
        source: UrlParseError,
    },
    /// [`SseClientConfig::url`] is not an `http` or `https` URL.
    #[error("unsupported scheme {scheme:?} in SSE URL {url} (expected http or https)")]
    UnsupportedScheme {
        /// The configured URL.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The `GET` of the SSE URL failed (connection refused, DNS, TLS, ...).
    #[error("GET {url} failed: {}", root_cause(.source))]
    Connect {
        /// The SSE URL.
        url: String,
        /// The underlying HTTP error.
        #[source]
        source: reqwest::Error,
    },
    /// The `GET` of the SSE URL answered another status than `200 OK`.
    #[error("GET {url} answered HTTP {status}, expected 200 with an event stream")]
    ConnectStatus {
        /// The SSE URL.
        url: String,
        /// The status received.
        status: StatusCode,
    },
    /// The `GET` of the SSE URL answered something else than `text/event-stream`.
    #[error("GET {url} answered content type {content_type:?}, not text/event-stream")]
    NotEventStream {
        /// The SSE URL.
        url: String,
        /// The `Content-Type` received, if any.
        content_type: Option<String>,
    },
    /// No `endpoint` event arrived within [`SseClientConfig::connect_timeout`].
    #[error("no `endpoint` event from {url} within {timeout:?}")]
    ConnectTimeout {
        /// The SSE URL.
        url: String,
        /// The configured connect timeout.
        timeout: Duration,
    },
    /// The event stream ended before the `endpoint` event.
    #[error("the event stream from {url} ended before the `endpoint` event")]
    EndedBeforeEndpoint {
        /// The SSE URL.
        url: String,
    },
    /// Reading the event stream failed before the `endpoint` event (connection reset, event
    /// larger than [`SseClientConfig::max_event_size`], ...).
    #[error("reading the event stream from {url} failed before the `endpoint` event: {source}")]
    Stream {
        /// The SSE URL.
        url: String,
        /// The underlying error.
        #[source]
        source: sse_stream::Error,
    },
    /// The data of the `endpoint` event is not a usable URL.
    #[error("invalid `endpoint` event data {data:?}: {reason}")]
    InvalidEndpoint {
        /// The event data.
        data: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The `endpoint` event designates a URL on another origin than the SSE URL.
    #[error("`endpoint` event points to {endpoint}, which is not on the origin of {url}")]
    CrossOriginEndpoint {
        /// The SSE URL.
        url: String,
        /// The resolved endpoint URL.
        endpoint: String,
    },
    /// A message could not be serialized to JSON.
    #[error("failed to serialize a JSON-RPC message: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A `POST` to the endpoint failed (connection refused, timeout, ...).
    #[error("POST {endpoint} failed: {}", root_cause(.source))]
    Post {
        /// The endpoint URL.
        endpoint: String,
        /// The underlying HTTP error.
        #[source]
        source: reqwest::Error,
    },
    /// A `POST` to the endpoint answered a non-2xx status.
    #[error("POST {endpoint} answered HTTP {status}{}", quote_body(.body))]
    PostStatus {
        /// The endpoint URL.
        endpoint: String,
        /// The status received.
        status: StatusCode,
        /// The beginning of the answer body (lossy UTF-8, possibly empty).
        body: String,
    },
    /// The event stream has ended or the transport was closed: the session is gone.
    #[error("the SSE session is closed")]
    Closed,
}

/// The innermost cause of `error`: for reqwest errors the informative part ("Connection
/// refused", "operation timed out"), the outer layers only repeat the URL.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

fn quote_body(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body:?}")
    }
}
