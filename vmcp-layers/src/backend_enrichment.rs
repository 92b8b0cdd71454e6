//! Backend enrichment: names the backend that will serve a `tools/call`,
//! `resources/read` or `prompts/get` ([`BackendTarget`]), from the caller's capability
//! view, for the audit record and the telemetry span. The target is also put in the
//! response extensions, where the audit layer (outside this one) reads it.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::backend_enrichment::BackendEnrichmentLayer;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(BackendEnrichmentLayer::new())
//!     .service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
//! let response = service.oneshot(Request::new(())).await.unwrap();
//! assert!(response.extensions().get::<vmcp_layers::BackendTarget>().is_none());
//! # });
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::context::{BackendTarget, Discovered, ParsedMcpRequest};

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
    match parsed.method.as_str() {
        "tools/call" => parsed
            .name
            .as_deref()
            .and_then(|n| view.0.tool(n))
            .map(|t| t.backend),
        "prompts/get" => parsed
            .name
            .as_deref()
            .and_then(|n| view.0.prompt_backend(n)),
        "resources/read" => parsed
            .uri
            .as_deref()
            .and_then(|u| view.0.resource_backend(u)),
        _ => None,
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for BackendEnrichment<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let target = match (
            req.extensions().get::<Arc<ParsedMcpRequest>>(),
            req.extensions().get::<Discovered>(),
        ) {
            (Some(parsed), Some(view)) => target_of(parsed, view).map(BackendTarget),
            _ => None,
        };
        if let Some(target) = &target {
            req.extensions_mut().insert(target.clone());
        }
        let future = self.inner.call(req);
        Box::pin(async move {
            let mut response = future.await?;
            if let Some(target) = target {
                response.extensions_mut().insert(target);
            }
            Ok(response)
        })
    }
}
