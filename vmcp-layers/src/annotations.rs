#![doc = include_str!("../../docs/layers/annotations.md")]
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::annotations::AnnotationEnrichmentLayer;
//! use vmcp_layers::context::ToolAnnotations;
//! use vmcp_layers::prerequisite::McpParsed;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(AnnotationEnrichmentLayer::new())
//!     .service_fn(|req: Request<()>| async move {
//!         let found = req.extensions().get::<ToolAnnotations>().is_some();
//!         Ok::<_, Infallible>(Response::new(Body::from(found.to_string())))
//!     });
//! // A request without a JSON-RPC body (a GET) after the parse layer: nothing to attach.
//! let mut get = Request::new(());
//! get.extensions_mut().insert(McpParsed);
//! assert_eq!(service.clone().oneshot(get).await.unwrap().status(), StatusCode::OK);
//! // Mounted without the parse layer in front: refused, naming it.
//! assert_eq!(service.oneshot(Request::new(())).await.unwrap().status(), StatusCode::INTERNAL_SERVER_ERROR);
//! # });
//! ```

use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::context::{CallKind, Discovered, ToolAnnotations};
pub use crate::future::ResponseFuture;
use crate::prerequisite::{self, MissingLayer};

/// Produces [`AnnotationEnrichment`] services.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnnotationEnrichmentLayer;

impl AnnotationEnrichmentLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for AnnotationEnrichmentLayer {
    type Service = AnnotationEnrichment<S>;

    fn layer(&self, inner: S) -> AnnotationEnrichment<S> {
        AnnotationEnrichment { inner }
    }
}

/// Attaches tool annotations; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct AnnotationEnrichment<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AnnotationEnrichment<S>
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
        const LAYER: &str = "AnnotationEnrichmentLayer";
        let parsed = match prerequisite::parsed(req.extensions(), LAYER) {
            Ok(parsed) => parsed,
            Err(missing) => return ResponseFuture::ready(missing.into_response()),
        };
        let Some(name) = parsed
            .filter(|p| CallKind::of_method(&p.method) == Some(CallKind::Tool))
            .and_then(|p| p.name.as_deref())
        else {
            return ResponseFuture::inner(self.inner.call(req));
        };
        let Some(view) = req.extensions().get::<Discovered>() else {
            let missing = MissingLayer::Discovery { layer: LAYER };
            return ResponseFuture::ready(missing.into_response());
        };
        if let Some(tool) = view.0.tool(name) {
            req.extensions_mut()
                .insert::<ToolAnnotations>(tool.annotations);
        }
        ResponseFuture::inner(self.inner.call(req))
    }
}
