#![doc = include_str!("../../docs/layers/headers.md")]
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::headers::HeaderValidationLayer;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(HeaderValidationLayer::new().allow_host("mcp.example.com"))
//!     .service_fn(|_req: Request<_>| async { Ok::<_, Infallible>(Response::new(Body::empty())) });
//! let request = Request::post("/mcp")
//!     .header("host", "evil.example")
//!     .body(Body::empty())
//!     .unwrap();
//! let response = service.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::FORBIDDEN);
//! # });
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tower_http::body::Limited;
use tower_http::limit::{RequestBodyLimit, RequestBodyLimitLayer};

use crate::jsonrpc;

/// The default request body limit.
pub const DEFAULT_BODY_LIMIT: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
struct Rules {
    hosts: Vec<String>,
    origins: Vec<String>,
    any_host: bool,
}

/// Produces [`HeaderValidation`] services; holds the allow-lists and the body limit.
#[derive(Debug, Clone)]
pub struct HeaderValidationLayer {
    rules: Arc<Rules>,
    body_limit: usize,
}

impl Default for HeaderValidationLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderValidationLayer {
    /// Loopback hosts and origins only, 8 MiB bodies.
    pub fn new() -> Self {
        Self {
            rules: Arc::new(Rules {
                hosts: Vec::new(),
                origins: Vec::new(),
                any_host: false,
            }),
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }

    /// Also accept this `Host` name (without port), e.g. the public hostname.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.rules)
            .hosts
            .push(host.into().to_ascii_lowercase());
        self
    }

    /// Accept any `Host` (when a proxy in front already checks it).
    pub fn allow_any_host(mut self) -> Self {
        Arc::make_mut(&mut self.rules).any_host = true;
        self
    }

    /// Also accept this `Origin` (`scheme://host[:port]`, compared exactly).
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.rules)
            .origins
            .push(origin.into().to_ascii_lowercase());
        self
    }

    /// The request body limit in bytes.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }
}

impl HeaderValidationLayer {
    /// Whether these rules accept the request's `Host`, for routes served outside
    /// the MCP path (the protected-resource metadata derives its `resource` from it).
    pub fn allows_host(&self, headers: &HeaderMap, uri_host: Option<&str>) -> bool {
        self.rules.host_allowed(headers, uri_host)
    }
}

impl<S> Layer<S> for HeaderValidationLayer {
    type Service = HeaderValidation<S>;

    fn layer(&self, inner: S) -> HeaderValidation<S> {
        HeaderValidation {
            inner: RequestBodyLimitLayer::new(self.body_limit).layer(inner),
            rules: self.rules.clone(),
        }
    }
}

/// Validates the request head; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct HeaderValidation<S> {
    inner: RequestBodyLimit<S>,
    rules: Arc<Rules>,
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host part of `host[:port]` or `[v6]:port`, lowercased.
fn host_name(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_owned();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_owned(),
        _ => authority,
    }
}

impl Rules {
    fn host_allowed(&self, headers: &HeaderMap, uri_host: Option<&str>) -> bool {
        if self.any_host {
            return true;
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(uri_host);
        let Some(host) = host else { return false };
        let host = host_name(host);
        is_loopback(&host) || self.hosts.contains(&host)
    }

    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return true;
        }
        match origin.split_once("://") {
            Some(("http" | "https", authority)) => is_loopback(&host_name(authority)),
            _ => false,
        }
    }
}

/// Whether `headers` carry more than one `Authorization`: a caller's token must be
/// one value, or the layer that checks it and a hop that forwards it can each see
/// a different one.
pub(crate) fn ambiguous_authorization(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .nth(1)
        .is_some()
}

/// A refused header's value for the log: the client's text, [`shown`](crate::shown::shown).
fn header_shown(
    headers: &HeaderMap,
    name: header::HeaderName,
) -> crate::shown::Shown<std::borrow::Cow<'_, str>> {
    let value = headers
        .get(name)
        .map_or("(none)".into(), |v| String::from_utf8_lossy(v.as_bytes()));
    crate::shown::shown(value)
}

fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let essence = t.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("text/event-stream") || essence == "*/*"
        })
}

pin_project! {
    /// The response future of [`HeaderValidation`]: a refusal, or the inner answer
    /// with a bare 413 (from the body limit) given a JSON-RPC body.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: crate::future::ResponseFuture<F>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = ready!(self.project().inner.poll(cx))?;
        if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Poll::Ready(Ok(jsonrpc::error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                jsonrpc::INVALID_REQUEST,
                "request body too large",
            )));
        }
        Poll::Ready(Ok(response))
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for HeaderValidation<S>
where
    S: Service<Request<Limited<ReqBody>>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<<RequestBodyLimit<S> as Service<Request<ReqBody>>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let reject = |status, message: &str| ResponseFuture {
            inner: crate::future::ResponseFuture::ready(jsonrpc::error_response(
                status,
                None,
                jsonrpc::INVALID_REQUEST,
                message,
            )),
        };
        if !self.rules.host_allowed(req.headers(), req.uri().host()) {
            tracing::warn!(host = %header_shown(req.headers(), header::HOST), "rejected: Host not allowed");
            return reject(StatusCode::FORBIDDEN, "Host header is not allowed");
        }
        if !self.rules.origin_allowed(req.headers()) {
            tracing::warn!(origin = %header_shown(req.headers(), header::ORIGIN), "rejected: Origin not allowed");
            return reject(StatusCode::FORBIDDEN, "Origin header is not allowed");
        }
        if ambiguous_authorization(req.headers()) {
            tracing::warn!("rejected: more than one Authorization header");
            return reject(
                StatusCode::BAD_REQUEST,
                "more than one Authorization header",
            );
        }
        if req.method() == Method::GET && !accepts_event_stream(req.headers()) {
            return reject(
                StatusCode::NOT_ACCEPTABLE,
                "GET must accept text/event-stream",
            );
        }
        ResponseFuture {
            inner: crate::future::ResponseFuture::inner(self.inner.call(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    fn service() -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
        HeaderValidationLayer::new()
            .allow_host("mcp.example.com")
            .allow_origin("https://app.example.com")
            .body_limit(16)
            .layer(tower::service_fn(|_req: Request<Limited<Body>>| async {
                Ok::<_, Infallible>(Response::new(Body::from("ok")))
            }))
    }

    async fn status(req: Request<Body>) -> StatusCode {
        service().oneshot(req).await.unwrap().status()
    }

    fn post() -> http::request::Builder {
        Request::post("/mcp").header("host", "127.0.0.1:4483")
    }

    #[tokio::test]
    async fn hosts_and_origins() {
        assert_eq!(
            status(post().body(Body::empty()).unwrap()).await,
            StatusCode::OK
        );
        let req = Request::post("/mcp")
            .header("host", "[::1]:80")
            .body(Body::empty());
        assert_eq!(status(req.unwrap()).await, StatusCode::OK);
        let req = Request::post("/mcp").header("host", "MCP.example.com:443");
        assert_eq!(
            status(req.body(Body::empty()).unwrap()).await,
            StatusCode::OK
        );
        let req = Request::post("/mcp").header("host", "rebind.attacker.net");
        assert_eq!(
            status(req.body(Body::empty()).unwrap()).await,
            StatusCode::FORBIDDEN
        );
        for (origin, want) in [
            ("http://localhost:3000", StatusCode::OK),
            ("https://app.example.com", StatusCode::OK),
            ("https://evil.example", StatusCode::FORBIDDEN),
            ("null", StatusCode::FORBIDDEN),
        ] {
            let req = post().header("origin", origin).body(Body::empty()).unwrap();
            assert_eq!(status(req).await, want, "{origin}");
        }
    }

    #[tokio::test]
    async fn one_authorization_header_at_most() {
        let req = post()
            .header("authorization", "Bearer a")
            .body(Body::empty());
        assert_eq!(status(req.unwrap()).await, StatusCode::OK);
        let req = post()
            .header("authorization", "Bearer a")
            .header("authorization", "Bearer b")
            .body(Body::empty());
        assert_eq!(status(req.unwrap()).await, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn get_needs_event_stream_and_bodies_are_limited() {
        let req = Request::get("/mcp")
            .header("host", "localhost")
            .body(Body::empty());
        assert_eq!(status(req.unwrap()).await, StatusCode::NOT_ACCEPTABLE);
        let req = Request::get("/mcp")
            .header("host", "localhost")
            .header("accept", "text/event-stream")
            .body(Body::empty());
        assert_eq!(status(req.unwrap()).await, StatusCode::OK);
        let req = post()
            .header("content-length", "17")
            .body(Body::from(vec![b'x'; 17]));
        assert_eq!(status(req.unwrap()).await, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
