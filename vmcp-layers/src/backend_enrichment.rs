#![doc = include_str!("../../docs/layers/backend_enrichment.md")]
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::backend_enrichment::BackendEnrichmentLayer;
//! use vmcp_layers::prerequisite::McpParsed;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(BackendEnrichmentLayer::new())
//!     .service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::empty())) });
//! // A GET (no JSON-RPC body) that went through the parse layer: no backend to name.
//! let mut request = Request::new(());
//! request.extensions_mut().insert(McpParsed);
//! let response = service.oneshot(request).await.unwrap();
//! assert!(response.extensions().get::<vmcp_layers::BackendTarget>().is_none());
//! # });
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::context::{BackendTarget, CallKind, Discovered, ParsedMcpRequest};
use crate::prerequisite::{self, MissingLayer};

/// Produces [`BackendEnrichment`] services.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackendEnrichmentLayer;

impl BackendEnrichmentLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for BackendEnrichmentLayer {
    type Service = BackendEnrichment<S>;

    fn layer(&self, inner: S) -> BackendEnrichment<S> {
        BackendEnrichment { inner }
    }
}

/// Names the serving backend; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct BackendEnrichment<S> {
    inner: S,
}

/// The backend serving `parsed` according to `view`.
pub fn target_of(parsed: &ParsedMcpRequest, view: &Discovered) -> Option<Arc<str>> {
    match CallKind::of_request(parsed)? {
        CallKind::Tool => parsed
            .name
            .as_deref()
            .and_then(|n| view.0.tool(n))
            .map(|t| t.backend),
        CallKind::Prompt => parsed
            .name
            .as_deref()
            .and_then(|n| view.0.prompt_backend(n)),
        CallKind::Resource => parsed
            .uri
            .as_deref()
            .and_then(|u| view.0.resource_backend(u)),
    }
}

pin_project! {
    /// The response future of [`BackendEnrichment`]: puts the [`BackendTarget`] into
    /// the response extensions too, for the audit layer outside.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: crate::future::ResponseFuture<F>,
        target: Option<BackendTarget>,
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
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(target) = this.target.take() {
            response.extensions_mut().insert(target);
        }
        Poll::Ready(Ok(response))
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for BackendEnrichment<S>
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

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        const LAYER: &str = "BackendEnrichmentLayer";
        let refuse = |missing: MissingLayer| ResponseFuture {
            inner: crate::future::ResponseFuture::ready(missing.into_response()),
            target: None,
        };
        let parsed = match prerequisite::parsed(req.extensions(), LAYER) {
            Ok(parsed) => parsed,
            Err(missing) => return refuse(missing),
        };
        let mut target = None;
        if let Some(parsed) = parsed.filter(|p| CallKind::of_request(p).is_some()) {
            let Some(view) = req.extensions().get::<Discovered>() else {
                return refuse(MissingLayer::Discovery { layer: LAYER });
            };
            target = target_of(parsed, view).map(BackendTarget);
        }
        if let Some(target) = &target {
            if let Some(note) = req.extensions().get::<crate::context::AuditNote>() {
                note.backend(target);
            }
            req.extensions_mut().insert(target.clone());
        }
        ResponseFuture {
            inner: crate::future::ResponseFuture::inner(self.inner.call(req)),
            target,
        }
    }
}
