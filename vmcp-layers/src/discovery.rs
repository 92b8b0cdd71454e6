#![doc = include_str!("../../docs/layers/discovery.md")]
//!
//! # Example
//!
//! ```
//! use std::{convert::Infallible, sync::Arc};
//! use futures::future::BoxFuture;
//! use http::{Request, Response};
//! use tower::{ServiceBuilder, ServiceExt};
//! use vmcp_layers::context::*;
//! use vmcp_layers::discovery::DiscoveryLayer;
//!
//! struct Empty;
//! impl CatalogView for Empty {
//!     fn tool(&self, _: &str) -> Option<ToolInfo> { None }
//!     fn prompt_backend(&self, _: &str) -> Option<Arc<str>> { None }
//!     fn resource_backend(&self, _: &str) -> Option<Arc<str>> { None }
//! }
//! struct Provider;
//! impl CapabilityProvider for Provider {
//!     fn view(&self, _: &Identity) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>> {
//!         Box::pin(async { Ok(Arc::new(Empty) as Arc<dyn CatalogView>) })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let service = ServiceBuilder::new()
//!     .layer(DiscoveryLayer::new(Arc::new(Provider)))
//!     .service_fn(|req: Request<()>| async move {
//!         let found = req.extensions().get::<Discovered>().is_some();
//!         Ok::<_, Infallible>(Response::new(axum::body::Body::from(found.to_string())))
//!     });
//! // What the auth and parse layers would have inserted:
//! let mut request = Request::new(());
//! request.extensions_mut().insert(Arc::new(ParsedMcpRequest {
//!     id: Some(1.into()), method: "tools/call".into(), ..Default::default()
//! }));
//! request.extensions_mut().insert(Arc::new(Identity::anonymous()));
//! let response = service.oneshot(request).await.unwrap();
//! let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
//! assert_eq!(&body[..], b"true");
//! # });
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::Body;
use dashmap::DashMap;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::context::{CapabilityProvider, CatalogView, Discovered, Identity};
use crate::future::poll_now;
use crate::{jsonrpc, prerequisite};

/// The default bound on one discovery.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
const CACHE_CAPACITY: usize = 4096;

type CacheKey = (String, Option<String>);

struct Shared {
    provider: Arc<dyn CapabilityProvider>,
    timeout: Duration,
    ttl: Option<Duration>,
    cache: DashMap<CacheKey, (Instant, Arc<dyn CatalogView>)>,
}

/// Produces [`Discovery`] services; holds the provider, timeout and cache.
#[derive(Clone)]
pub struct DiscoveryLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for DiscoveryLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryLayer")
            .field("timeout", &self.shared.timeout)
            .field("ttl", &self.shared.ttl)
            .finish_non_exhaustive()
    }
}

impl DiscoveryLayer {
    /// Views from `provider`, uncached, with the default timeout.
    pub fn new(provider: Arc<dyn CapabilityProvider>) -> Self {
        Self::build(provider, DEFAULT_TIMEOUT, None)
    }

    fn build(
        provider: Arc<dyn CapabilityProvider>,
        timeout: Duration,
        ttl: Option<Duration>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                provider,
                timeout,
                ttl,
                cache: DashMap::new(),
            }),
        }
    }

    /// Bound one discovery (504 when exceeded).
    pub fn timeout(self, timeout: Duration) -> Self {
        Self::build(self.shared.provider.clone(), timeout, self.shared.ttl)
    }

    /// Keep each identity's view for `ttl`.
    pub fn cache_ttl(self, ttl: Duration) -> Self {
        Self::build(self.shared.provider.clone(), self.shared.timeout, Some(ttl))
    }
}

impl Shared {
    async fn view(&self, identity: &Identity) -> Result<Arc<dyn CatalogView>, Response<Body>> {
        let key = (identity.subject.clone(), identity.issuer.clone());
        if let Some(ttl) = self.ttl
            && let Some(hit) = self.cache.get(&key)
            && hit.0.elapsed() < ttl
        {
            return Ok(hit.1.clone());
        }
        let view = match tokio::time::timeout(self.timeout, self.provider.view(identity)).await {
            Ok(Ok(view)) => view,
            Ok(Err(error)) => {
                tracing::warn!("{error}");
                return Err(jsonrpc::error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    jsonrpc::INTERNAL_ERROR,
                    "capability discovery failed",
                ));
            }
            Err(_) => {
                return Err(jsonrpc::error_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    None,
                    jsonrpc::INTERNAL_ERROR,
                    "capability discovery timed out",
                ));
            }
        };
        if let Some(ttl) = self.ttl {
            if self.cache.len() >= CACHE_CAPACITY {
                self.cache.retain(|_, (at, _)| at.elapsed() < ttl);
                if self.cache.len() >= CACHE_CAPACITY {
                    self.cache.clear();
                }
            }
            self.cache.insert(key, (Instant::now(), view.clone()));
        }
        Ok(view)
    }
}

impl<S> Layer<S> for DiscoveryLayer {
    type Service = Discovery<S>;

    fn layer(&self, inner: S) -> Discovery<S> {
        Discovery {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Attaches the capability view; see the [module docs](self).
#[derive(Clone)]
pub struct Discovery<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for Discovery<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Discovery<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        const LAYER: &str = "DiscoveryLayer";
        let wants_view = match prerequisite::parsed(req.extensions(), LAYER) {
            Ok(parsed) => parsed.is_some_and(|p| p.is_request()),
            Err(missing) => return Box::pin(async move { Ok(missing.into_response()) }),
        };
        let identity = if wants_view {
            match prerequisite::identity(req.extensions(), LAYER) {
                Ok(identity) => Some(identity.clone()),
                Err(missing) => return Box::pin(async move { Ok(missing.into_response()) }),
            }
        } else {
            None
        };
        // The view is asked for now (cached, or a provider that answers at once);
        // otherwise the same request for it is awaited.
        let mut view = identity.map(|identity| {
            let shared = self.shared.clone();
            Box::pin(async move { shared.view(&identity).await })
        });
        if let Some(asked) = view.as_mut() {
            match poll_now(asked) {
                Poll::Ready(Ok(found)) => {
                    req.extensions_mut().insert(Discovered(found));
                    view = None;
                }
                Poll::Ready(Err(response)) => return Box::pin(async move { Ok(response) }),
                Poll::Pending => {}
            }
        }
        let Some(view) = view else {
            let answer = self.inner.call(req);
            return Box::pin(async move { Ok(answer.await?.map(Body::new)) });
        };
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            match view.await {
                Ok(found) => {
                    req.extensions_mut().insert(Discovered(found));
                }
                Err(response) => return Ok(response),
            }
            Ok(inner.call(req).await?.map(Body::new))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{ParsedMcpRequest, ToolInfo};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    struct Empty;
    impl CatalogView for Empty {
        fn tool(&self, _: &str) -> Option<ToolInfo> {
            None
        }
        fn prompt_backend(&self, _: &str) -> Option<Arc<str>> {
            None
        }
        fn resource_backend(&self, _: &str) -> Option<Arc<str>> {
            None
        }
    }

    enum Mode {
        Ok,
        Fail,
        Hang,
    }

    struct Provider {
        mode: Mode,
        calls: AtomicUsize,
    }

    impl CapabilityProvider for Provider {
        fn view(
            &self,
            _: &Identity,
        ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, crate::context::DiscoveryError>>
        {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match self.mode {
                Mode::Ok => Box::pin(async { Ok(Arc::new(Empty) as Arc<dyn CatalogView>) }),
                Mode::Fail => Box::pin(async {
                    Err(crate::context::DiscoveryError::unavailable("backend down"))
                }),
                Mode::Hang => Box::pin(futures::future::pending()),
            }
        }
    }

    fn provider(mode: Mode) -> Arc<Provider> {
        Arc::new(Provider {
            mode,
            calls: AtomicUsize::new(0),
        })
    }

    async fn status(layer: &DiscoveryLayer, subject: &str) -> StatusCode {
        let service = layer.layer(tower::service_fn(|req: Request<()>| async move {
            assert!(req.extensions().get::<Discovered>().is_some());
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }));
        let mut request = Request::new(());
        request.extensions_mut().insert(Arc::new(ParsedMcpRequest {
            id: Some(1.into()),
            method: "tools/list".into(),
            ..ParsedMcpRequest::default()
        }));
        request.extensions_mut().insert(Arc::new(Identity {
            subject: subject.into(),
            ..Identity::default()
        }));
        service.oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn failure_is_503() {
        let layer = DiscoveryLayer::new(provider(Mode::Fail));
        assert_eq!(status(&layer, "a").await, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_is_504() {
        let p = provider(Mode::Hang);
        let layer = DiscoveryLayer::new(p.clone()).timeout(Duration::from_secs(15));
        assert_eq!(status(&layer, "a").await, StatusCode::GATEWAY_TIMEOUT);
        // Not at hand when first asked, and waited for: asked once, not again.
        assert_eq!(p.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn views_are_cached_per_identity_for_the_ttl() {
        let p = provider(Mode::Ok);
        let layer = DiscoveryLayer::new(p.clone()).cache_ttl(Duration::from_secs(5));
        assert_eq!(status(&layer, "alice").await, StatusCode::OK);
        assert_eq!(status(&layer, "alice").await, StatusCode::OK);
        assert_eq!(p.calls.load(Ordering::SeqCst), 1);
        assert_eq!(status(&layer, "bob").await, StatusCode::OK);
        assert_eq!(p.calls.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(status(&layer, "alice").await, StatusCode::OK);
        assert_eq!(p.calls.load(Ordering::SeqCst), 3);
    }
}
