#![doc = include_str!("../../docs/layers/parse.md")]
//!
//! # Example
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use axum::body::Body;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::{parse::McpParseLayer, ParsedMcpRequest};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(McpParseLayer::new())
//!     .service_fn(|req: Request<Full<bytes::Bytes>>| async move {
//!         let parsed = req.extensions().get::<Arc<ParsedMcpRequest>>().unwrap();
//!         Ok::<_, Infallible>(Response::new(Body::from(parsed.method.clone())))
//!     });
//! let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
//! let response = service.oneshot(Request::post("/mcp").body(Body::from(body)).unwrap()).await.unwrap();
//! # let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
//! # assert_eq!(&bytes[..], b"tools/list");
//! # });
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Layer, Service};

use crate::context::{ParseError, ParsedMcpRequest};
use crate::future::poll_now;
use crate::jsonrpc;
use crate::prerequisite::McpParsed;
use crate::rewrite::{LocalCall, RequestRewrite, Rewrite};

/// Produces [`McpParse`] services.
#[derive(Clone, Default)]
pub struct McpParseLayer {
    rewrite: Option<Arc<dyn RequestRewrite>>,
}

impl std::fmt::Debug for McpParseLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpParseLayer")
            .field("rewrite", &self.rewrite.is_some())
            .finish()
    }
}

impl McpParseLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply `rewrite` to each parsed request before the layers after this one
    /// read it ([`crate::rewrite`]).
    pub fn with_rewrite(mut self, rewrite: Arc<dyn RequestRewrite>) -> Self {
        self.rewrite = Some(rewrite);
        self
    }
}

impl<S> Layer<S> for McpParseLayer {
    type Service = McpParse<S>;

    fn layer(&self, inner: S) -> McpParse<S> {
        McpParse {
            inner,
            rewrite: self.rewrite.clone(),
        }
    }
}

/// Buffers and parses the body; see the [module docs](self).
#[derive(Clone)]
pub struct McpParse<S> {
    inner: S,
    rewrite: Option<Arc<dyn RequestRewrite>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for McpParse<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpParse")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The 2026-07-28 header/body consistency rules (SEP-2243).
fn header_mismatch(headers: &HeaderMap, parsed: &ParsedMcpRequest) -> Option<&'static str> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(method) = get("mcp-method")
        && method != parsed.method
    {
        return Some("Mcp-Method header does not match the request body");
    }
    if let Some(name) = get("mcp-name")
        && Some(name) != parsed.target()
    {
        return Some("Mcp-Name header does not match the request body");
    }
    if let (Some(header), Some(meta)) =
        (get("mcp-protocol-version"), parsed.meta_protocol_version())
        && header != meta
    {
        return Some("MCP-Protocol-Version header does not match _meta protocolVersion");
    }
    None
}

fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Decode a POST body; `Err` is the refusal to answer with.
fn parse(headers: &HeaderMap, bytes: &[u8]) -> Result<ParsedMcpRequest, Box<Response<Body>>> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    match ParsedMcpRequest::parse(
        bytes,
        header("mcp-protocol-version"),
        headers.contains_key("mcp-session-id"),
    ) {
        Ok(request) => match header_mismatch(headers, &request) {
            Some(message) => Err(Box::new(jsonrpc::error_response(
                StatusCode::BAD_REQUEST,
                request.id.as_ref(),
                jsonrpc::HEADER_MISMATCH,
                message,
            ))),
            None => Ok(request),
        },
        Err(error) => {
            let code = match error {
                ParseError::NotJson(_) => jsonrpc::PARSE_ERROR,
                _ => jsonrpc::INVALID_REQUEST,
            };
            Err(Box::new(jsonrpc::error_response(
                StatusCode::BAD_REQUEST,
                None,
                code,
                &error.to_string(),
            )))
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for McpParse<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: http_body::Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<axum::BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    // Boxed: the body must be awaited before the inner service can be called.
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (parts, body) = req.into_parts();
        // A body already read to its end (a small request usually is) is parsed
        // now; otherwise the same read is awaited.
        let mut collecting = Box::pin(body.collect());
        if let Poll::Ready(collected) = poll_now(&mut collecting) {
            return match prepared(parts, collected, self.rewrite.as_deref()) {
                Ok((req, parsed)) => Box::pin(answered(self.inner.call(req), parsed)),
                Err(refusal) => Box::pin(async move { Ok(*refusal) }),
            };
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let rewrite = self.rewrite.clone();
        Box::pin(async move {
            match prepared(parts, collecting.await, rewrite.as_deref()) {
                Ok((req, parsed)) => answered(inner.call(req), parsed).await,
                Err(refusal) => Ok(*refusal),
            }
        })
    }
}

/// The request for the inner service, and what the parse found (`None` for a
/// request that is not a POST).
type Prepared = (Request<Full<Bytes>>, Option<Arc<ParsedMcpRequest>>);

/// The request for the inner service from its read body: parsed (and rewritten)
/// when a POST, with what the parse found in its extensions; or the refusal.
fn prepared<E: Into<axum::BoxError>>(
    mut parts: http::request::Parts,
    collected: Result<http_body_util::Collected<Bytes>, E>,
    rewrite: Option<&dyn RequestRewrite>,
) -> Result<Prepared, Box<Response<Body>>> {
    let mut bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let error: axum::BoxError = error.into();
            let (status, message) = if is_length_limit(&*error) {
                (StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            } else {
                (StatusCode::BAD_REQUEST, "request body could not be read")
            };
            return Err(Box::new(jsonrpc::error_response(
                status,
                None,
                jsonrpc::INVALID_REQUEST,
                message,
            )));
        }
    };
    let mut parsed = None;
    if parts.method == Method::POST {
        let request = parse(&parts.headers, &bytes)?;
        // After the header checks, which held for the request as sent.
        match rewrite.and_then(|r| r.rewrite(&request, &bytes)) {
            None => parsed = Some(Arc::new(request)),
            Some(Rewrite::Local) => {
                parts.extensions.insert(LocalCall);
                parsed = Some(Arc::new(request));
            }
            Some(Rewrite::Replaced(rewritten)) => {
                crate::rewrite::retarget_headers(&mut parts.headers, &rewritten.parsed);
                bytes = rewritten.body;
                parsed = Some(Arc::new(rewritten.parsed));
            }
        }
    }
    parts.extensions.insert(McpParsed);
    if let Some(parsed) = &parsed {
        if let Some(note) = parts.extensions.get::<crate::context::AuditNote>() {
            note.parsed(parsed);
        }
        parts.extensions.insert(parsed.clone());
    }
    Ok((Request::from_parts(parts, Full::new(bytes)), parsed))
}

/// The inner service's answer, with the parsed request in its extensions.
async fn answered<F, B, E>(
    answer: F,
    parsed: Option<Arc<ParsedMcpRequest>>,
) -> Result<Response<Body>, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let mut response = answer.await?.map(Body::new);
    if let Some(parsed) = parsed {
        response.extensions_mut().insert(parsed);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    fn service()
    -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
        McpParseLayer::new().layer(tower::service_fn(|req: Request<Full<Bytes>>| async move {
            let marked = req.extensions().get::<McpParsed>().is_some();
            let method = req
                .extensions()
                .get::<Arc<ParsedMcpRequest>>()
                .map(|p| p.method.clone())
                .unwrap_or_default();
            Ok::<_, Infallible>(Response::new(Body::from(format!("{marked} {method}"))))
        }))
    }

    async fn text(response: Response<Body>) -> (StatusCode, String) {
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn get_passes_marked_but_unparsed() {
        let request = Request::get("/mcp").body(Body::empty()).unwrap();
        let (status, body) = text(service().oneshot(request).await.unwrap()).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "true "));
    }

    #[tokio::test]
    async fn a_header_that_disagrees_with_the_body_is_refused() {
        let request = Request::post("/mcp")
            .header("mcp-method", "tools/list")
            .body(Body::from(
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call"}"#,
            ))
            .unwrap();
        let (status, body) = text(service().oneshot(request).await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.contains("-32020") && body.contains(r#""id":3"#),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_body_still_arriving_is_awaited_and_parsed_alike() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        // Not there at the first poll: the read is awaited, not read now.
        let late = futures::stream::once(async move {
            tokio::task::yield_now().await;
            Ok::<_, std::io::Error>(Bytes::from(body))
        });
        for body in [Body::from_stream(late), Body::from(body)] {
            let request = Request::post("/mcp").body(body).unwrap();
            let (status, body) = text(service().oneshot(request).await.unwrap()).await;
            assert_eq!((status, body.as_str()), (StatusCode::OK, "true tools/list"));
        }
    }

    #[tokio::test]
    async fn garbage_is_a_parse_error() {
        let request = Request::post("/mcp").body(Body::from("{nope")).unwrap();
        let (status, body) = text(service().oneshot(request).await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("-32700"), "{body}");
    }
}
