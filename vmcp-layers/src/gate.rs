#![doc = include_str!("../../docs/layers/gate.md")]
//!
//! # Example
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use axum::body::Body;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::context::{AdmissionDecision, CallKind, ParsedMcpRequest};
//! use vmcp_layers::gate::GateLayer;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(GateLayer::new())
//!     .service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::empty())) });
//! let mut request = Request::new(());
//! request.extensions_mut().insert(Arc::new(ParsedMcpRequest {
//!     id: Some(1.into()), method: "tools/call".into(), name: Some("x".into()), ..Default::default()
//! }));
//! request.extensions_mut().insert(AdmissionDecision { kind: CallKind::Tool, allowed: false });
//! let response = service.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::FORBIDDEN);
//! # });
//! ```

use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::context::{AdmissionDecision, CallKind};
pub use crate::future::ResponseFuture;
use crate::{jsonrpc, prerequisite};

/// Produces [`Gate`] services.
#[derive(Debug, Clone, Copy, Default)]
pub struct GateLayer;

impl GateLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate { inner }
    }
}

/// Rejects denied calls; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Gate<S> {
    inner: S,
}

/// The gate's answer to a denied request with JSON-RPC `id`.
pub fn denial(kind: CallKind, id: Option<&serde_json::Value>) -> Response<Body> {
    jsonrpc::error_response(
        StatusCode::FORBIDDEN,
        id,
        jsonrpc::DENIED,
        kind.denial_message(),
    )
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Gate<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let parsed = match prerequisite::parsed(req.extensions(), "GateLayer") {
            Ok(parsed) => parsed,
            Err(missing) => return ResponseFuture::ready(missing.into_response()),
        };
        if let Some(parsed) = parsed
            && let Some(kind) = CallKind::of_request(parsed)
        {
            let allowed = req
                .extensions()
                .get::<AdmissionDecision>()
                .is_some_and(|d| d.kind == kind && d.allowed);
            if !allowed {
                return ResponseFuture::ready(denial(kind, parsed.id.as_ref()));
            }
        }
        ResponseFuture::inner(self.inner.call(req))
    }
}
