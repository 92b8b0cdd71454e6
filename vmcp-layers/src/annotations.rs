//! Annotation enrichment: for `tools/call`, attaches the target tool's
//! [`ToolAnnotations`] (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
//! `openWorldHint`) from the caller's capability view, so authorization policies can
//! use them (`context.annotations.readOnlyHint`).
//!
//! Needs [`Discovered`] (the [`discovery`](crate::discovery) layer) outside it. A tool
//! the view does not know gets no annotations.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::annotations::AnnotationEnrichmentLayer;
//! use vmcp_layers::context::ToolAnnotations;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(AnnotationEnrichmentLayer::new())
//!     .service_fn(|req: Request<()>| async move {
//!         Ok::<_, Infallible>(Response::new(req.extensions().get::<ToolAnnotations>().is_some()))
//!     });
//! // Without a parsed tools/call and a view, nothing is attached.
//! assert!(!*service.oneshot(Request::new(())).await.unwrap().body());
//! # });
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower::{Layer, Service};

use crate::context::{Discovered, ParsedMcpRequest, ToolAnnotations};

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

impl<S, ReqBody> Service<Request<ReqBody>> for AnnotationEnrichment<S>
where
    S: Service<Request<ReqBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> S::Future {
        let annotations = match (
            req.extensions().get::<Arc<ParsedMcpRequest>>(),
            req.extensions().get::<Discovered>(),
        ) {
            (Some(parsed), Some(view)) if parsed.method == "tools/call" => parsed
                .name
                .as_deref()
                .and_then(|name| view.0.tool(name))
                .map(|tool| tool.annotations),
            _ => None,
        };
        if let Some(annotations) = annotations {
            req.extensions_mut().insert::<ToolAnnotations>(annotations);
        }
        self.inner.call(req)
    }
}
