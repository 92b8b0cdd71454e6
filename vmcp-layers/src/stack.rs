// Over 600 lines: the builder, the Layer and its service are one idea; a third is the order test.
//! The one builder that assembles the pipeline in its documented order.
//!
//! Outermost first:
//!
//! | # | Layer | When | Why there |
//! |---|---|---|---|
//! | 1 | [`recovery`](crate::recovery) | always | catches a panic anywhere below |
//! | 2 | [`headers`](crate::headers) | always | cheapest rejections first, before a token is checked or a body read |
//! | 3 | [`audit`](crate::audit) | `audit` configured | outside auth and the gate, so their 401s and 403s are recorded |
//! | 4 | [`auth`](crate::auth) | always (anonymous without `incomingAuth`) | the identity every later layer reads; before the body is read |
//! | 5 | [`parse`](crate::parse) | always | the one parse every later layer reads |
//! | 6 | [`discovery`](crate::discovery) | a capability provider is given | needs the identity; everything after needs the view |
//! | 7 | [`annotations`](crate::annotations) | authorization configured | policies read the tool's annotations |
//! | 8 | [`authz`](crate::authz) | `incomingAuth.authz.type: cedar` | after the view and annotations it decides on |
//! | 9 | [`backend_enrichment`](crate::backend_enrichment) | audit or telemetry configured | names the backend for the record and the span |
//! | 10 | [`telemetry`](crate::telemetry) | `telemetry` configured | spans and metrics see the decided, enriched request |
//! | 11 | [`gate`](crate::gate) | authorization configured | innermost: nothing runs for a denied call |
//!
//! [`Stack::layers`] reports the layers in this order; a test pins it.
//!
//! ```no_run
//! use std::convert::Infallible;
//! use axum::body::Body;
//! use http::{Request, Response};
//! use vmcp_layers::stack::StackBuilder;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mcp = tower::service_fn(|_req: Request<http_body_util::Full<bytes::Bytes>>| async {
//!     Ok::<_, Infallible>(Response::new(Body::from("{}")))
//! });
//! let stack = StackBuilder::new().build(mcp);
//! let app = axum::Router::new()
//!     .route("/hello", axum::routing::get(|| async { "hi" }))
//!     .merge(stack.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::boxed::SharedService;
use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};
use tower_http::body::Limited;

#[cfg(feature = "cedar")]
use crate::annotations::AnnotationEnrichmentLayer;
#[cfg(feature = "audit")]
use crate::audit::AuditLayer;
use crate::auth::AuthLayer;
#[cfg(feature = "jwt")]
use crate::auth::ResourceMetadata;
#[cfg(feature = "cedar")]
use crate::authz::AuthorizationLayer;
#[cfg(feature = "cedar")]
use crate::authz::cedar::CedarAuthorizer;
use crate::backend_enrichment::BackendEnrichmentLayer;
use crate::context::CapabilityProvider;
use crate::discovery::DiscoveryLayer;
#[cfg(feature = "cedar")]
use crate::gate::GateLayer;
use crate::headers::HeaderValidationLayer;
use crate::parse::McpParseLayer;
use crate::recovery::RecoveryLayer;
use crate::rewrite::RequestRewrite;
#[cfg(feature = "otel")]
use crate::telemetry::{MetricsAccess, Telemetry};

/// The MCP service type inside the parsing step.
pub type InnerService = SharedService<Request<Full<Bytes>>, Response<Body>>;

/// Assembles the layers in order; see the [module docs](self).
pub struct StackBuilder {
    path: String,
    headers: HeaderValidationLayer,
    #[cfg(feature = "audit")]
    audit: Option<AuditLayer>,
    auth: AuthLayer,
    #[cfg(feature = "jwt")]
    metadata: Option<ResourceMetadata>,
    provider: Option<Arc<dyn CapabilityProvider>>,
    rewrite: Option<Arc<dyn RequestRewrite>>,
    discovery_timeout: Option<Duration>,
    discovery_ttl: Option<Duration>,
    #[cfg(feature = "cedar")]
    authorizer: Option<Arc<CedarAuthorizer>>,
    #[cfg(feature = "otel")]
    telemetry: Option<Arc<Telemetry>>,
    #[cfg(feature = "otel")]
    metrics_access: MetricsAccess,
}

impl std::fmt::Debug for StackBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackBuilder")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Default for StackBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StackBuilder {
    /// Recovery, header validation and anonymous parsing at `/mcp`; nothing else.
    pub fn new() -> Self {
        Self {
            path: "/mcp".to_owned(),
            headers: HeaderValidationLayer::new(),
            #[cfg(feature = "audit")]
            audit: None,
            auth: AuthLayer::anonymous(),
            #[cfg(feature = "jwt")]
            metadata: None,
            provider: None,
            rewrite: None,
            discovery_timeout: None,
            discovery_ttl: None,
            #[cfg(feature = "cedar")]
            authorizer: None,
            #[cfg(feature = "otel")]
            telemetry: None,
            #[cfg(feature = "otel")]
            metrics_access: MetricsAccess::default(),
        }
    }

    /// Rewrite parsed requests with `rewrite` before the layers after the parse
    /// read them ([`crate::rewrite`]).
    pub fn rewrite(mut self, rewrite: Arc<dyn RequestRewrite>) -> Self {
        self.rewrite = Some(rewrite);
        self
    }

    /// Serve the MCP endpoint at `path` (default `/mcp`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Replace the header validation settings.
    pub fn headers(mut self, headers: HeaderValidationLayer) -> Self {
        self.headers = headers;
        self
    }

    #[cfg(feature = "audit")]
    /// Audit with `layer`.
    pub fn audit(mut self, layer: AuditLayer) -> Self {
        self.audit = Some(layer);
        self
    }

    /// Authenticate with `layer`.
    pub fn auth(mut self, layer: AuthLayer) -> Self {
        self.auth = layer;
        self
    }

    #[cfg(feature = "jwt")]
    /// Serve the RFC 9728 protected-resource metadata (for bearer-token
    /// authentication) at `/.well-known/oauth-protected-resource` and the same
    /// suffixed with the MCP path.
    pub fn resource_metadata(mut self, metadata: ResourceMetadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Attach capability views from `provider` (enables discovery and enrichment).
    pub fn provider(mut self, provider: Arc<dyn CapabilityProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Bound discovery (default 15 s).
    pub fn discovery_timeout(mut self, timeout: Duration) -> Self {
        self.discovery_timeout = Some(timeout);
        self
    }

    /// Cache each identity's view for `ttl`.
    pub fn discovery_cache(mut self, ttl: Duration) -> Self {
        self.discovery_ttl = Some(ttl);
        self
    }

    #[cfg(feature = "cedar")]
    /// Authorize with `authorizer` (adds annotation enrichment, authorization, gate).
    pub fn authorizer(mut self, authorizer: Arc<CedarAuthorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    #[cfg(feature = "otel")]
    /// Record telemetry into `telemetry`.
    pub fn telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    #[cfg(feature = "otel")]
    /// Who may read `/metrics` (default: what `/mcp` authenticates).
    pub fn metrics_access(mut self, access: MetricsAccess) -> Self {
        self.metrics_access = access;
        self
    }

    #[cfg(feature = "cedar")]
    /// The configured authorizer, if any.
    pub fn authorizer_ref(&self) -> Option<&Arc<CedarAuthorizer>> {
        self.authorizer.as_ref()
    }

    /// The pipeline as a tower [`Layer`] ([`VmcpStackLayer`]), with the extra routes
    /// (protected-resource metadata, `/metrics`) in [`VmcpStackLayer::routes`].
    pub fn into_layer(self) -> VmcpStackLayer {
        let mut names: Vec<&'static str> = vec!["recovery", "headers"];
        #[cfg(feature = "audit")]
        if self.audit.is_some() {
            names.push("audit");
        }
        names.extend(["auth", "parse"]);
        let discovery = self.provider.as_ref().map(|provider| {
            let mut layer = DiscoveryLayer::new(provider.clone());
            if let Some(timeout) = self.discovery_timeout {
                layer = layer.timeout(timeout);
            }
            if let Some(ttl) = self.discovery_ttl {
                layer = layer.cache_ttl(ttl);
            }
            names.push("discovery");
            layer
        });
        #[cfg(feature = "cedar")]
        if self.authorizer.is_some() {
            if discovery.is_some() {
                names.push("annotations");
            }
            names.push("authz");
        }
        #[allow(unused_mut)]
        let mut observed = false;
        #[cfg(feature = "audit")]
        {
            observed |= self.audit.is_some();
        }
        #[cfg(feature = "otel")]
        {
            observed |= self.telemetry.is_some();
        }
        let enrich = discovery.is_some() && observed;
        if enrich {
            names.push("backend_enrichment");
        }
        #[cfg(feature = "otel")]
        if self.telemetry.is_some() {
            names.push("telemetry");
        }
        #[cfg(feature = "cedar")]
        if self.authorizer.is_some() {
            names.push("gate");
        }

        // The metadata's `resource` may come from the Host: only from a valid one.
        #[allow(unused_mut)]
        let mut routes = axum::Router::new();
        #[cfg(feature = "jwt")]
        if let Some(metadata) = &self.metadata {
            routes = host_checked(
                crate::auth::metadata_router(metadata, &self.path),
                self.headers.clone(),
            );
        }
        #[cfg(feature = "otel")]
        if let Some(telemetry) = &self.telemetry
            && telemetry.prometheus_text().is_some()
        {
            routes = routes.merge(crate::telemetry::exposition::router(
                telemetry.clone(),
                &self.metrics_access,
                &self.auth,
                self.headers.clone(),
            ));
        }
        VmcpStackLayer {
            inner: Arc::new(Layers {
                path: self.path,
                headers: self.headers,
                #[cfg(feature = "audit")]
                audit: self.audit,
                auth: self.auth,
                discovery,
                rewrite: self.rewrite,
                #[cfg(feature = "cedar")]
                authorizer: self.authorizer,
                enrich,
                #[cfg(feature = "otel")]
                telemetry: self.telemetry,
                names,
                routes,
            }),
        }
    }

    /// Wrap the MCP service `inner` (it receives the buffered body) and route it at
    /// the configured path, next to the extra routes.
    pub fn build<S>(self, inner: S) -> Stack
    where
        S: Service<Request<Full<Bytes>>, Error = Infallible> + Clone + Send + Sync + 'static,
        S::Response: IntoResponse,
        S::Future: Send + 'static,
    {
        let layer = self.into_layer();
        let router = axum::Router::new()
            .route_service(&layer.inner.path, layer.layer(inner))
            .merge(layer.routes());
        Stack { router, layer }
    }
}

/// `routes` answer only requests whose `Host` `headers` accepts (else 403).
#[cfg(feature = "jwt")]
fn host_checked(routes: axum::Router, headers: HeaderValidationLayer) -> axum::Router {
    routes.route_layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let allowed = headers.allows_host(request.headers(), request.uri().host());
            async move {
                if allowed {
                    next.run(request).await
                } else {
                    crate::jsonrpc::error_response(
                        http::StatusCode::FORBIDDEN,
                        None,
                        crate::jsonrpc::INVALID_REQUEST,
                        "Host header is not allowed",
                    )
                }
            }
        },
    ))
}

struct Layers {
    path: String,
    headers: HeaderValidationLayer,
    #[cfg(feature = "audit")]
    audit: Option<AuditLayer>,
    auth: AuthLayer,
    discovery: Option<DiscoveryLayer>,
    rewrite: Option<Arc<dyn RequestRewrite>>,
    #[cfg(feature = "cedar")]
    authorizer: Option<Arc<CedarAuthorizer>>,
    enrich: bool,
    #[cfg(feature = "otel")]
    telemetry: Option<Arc<Telemetry>>,
    names: Vec<&'static str>,
    routes: axum::Router,
}

/// The whole pipeline as one tower [`Layer`], from [`StackBuilder::into_layer`]:
///
/// ```
/// # use std::convert::Infallible;
/// # use http::{Request, Response};
/// # use http_body_util::Full;
/// use tower::ServiceBuilder;
/// use vmcp_layers::stack::StackBuilder;
///
/// let stack = StackBuilder::new().into_layer();
/// let mcp = tower::service_fn(|_req: Request<Full<bytes::Bytes>>| async {
///     Ok::<_, Infallible>(Response::new(axum::body::Body::from("{}")))
/// });
/// let service = ServiceBuilder::new().layer(stack.clone()).service(mcp);
/// let app: axum::Router = axum::Router::new()
///     .route_service("/mcp", service)
///     .merge(stack.routes());
/// ```
///
/// The wrapped service takes any request body and answers with
/// [`axum::body::Body`]. The stages inside are boxed once each, because which ones
/// are present is decided at run time.
#[derive(Clone)]
pub struct VmcpStackLayer {
    inner: Arc<Layers>,
}

impl std::fmt::Debug for VmcpStackLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmcpStackLayer")
            .field("layers", &self.inner.names)
            .finish_non_exhaustive()
    }
}

impl VmcpStackLayer {
    /// The routes that go next to the MCP endpoint: the protected-resource metadata
    /// (with OIDC) and `/metrics` (with Prometheus). Empty otherwise.
    pub fn routes(&self) -> axum::Router {
        self.inner.routes.clone()
    }

    /// The layers, outermost first.
    pub fn layers(&self) -> &[&'static str] {
        &self.inner.names
    }

    /// The telemetry pipeline, to flush or shut down.
    #[cfg(feature = "otel")]
    pub fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.inner.telemetry.as_ref()
    }
}

impl<S> Layer<S> for VmcpStackLayer
where
    S: Service<Request<Full<Bytes>>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
{
    type Service = VmcpStack;

    fn layer(&self, inner: S) -> VmcpStack {
        let l = &*self.inner;
        let mut svc: InnerService =
            SharedService::new(inner.map_response(IntoResponse::into_response));
        #[cfg(feature = "cedar")]
        if l.authorizer.is_some() {
            svc = SharedService::new(GateLayer::new().layer(svc));
        }
        #[cfg(feature = "otel")]
        if let Some(telemetry) = &l.telemetry {
            svc = SharedService::new(telemetry.layer().layer(svc));
        }
        if l.enrich {
            svc = SharedService::new(BackendEnrichmentLayer::new().layer(svc));
        }
        #[cfg(feature = "cedar")]
        if let Some(authorizer) = &l.authorizer {
            svc = SharedService::new(AuthorizationLayer::new(authorizer.clone()).layer(svc));
            if l.discovery.is_some() {
                svc = SharedService::new(AnnotationEnrichmentLayer::new().layer(svc));
            }
        }
        if let Some(discovery) = &l.discovery {
            svc = SharedService::new(discovery.layer(svc));
        }
        type Outer = SharedService<Request<Limited<Body>>, Response<Body>>;
        let mut parse = McpParseLayer::new();
        if let Some(rewrite) = &l.rewrite {
            parse = parse.with_rewrite(rewrite.clone());
        }
        #[allow(unused_mut)]
        let mut outer: Outer = SharedService::new(l.auth.layer(parse.layer(svc)));
        #[cfg(feature = "audit")]
        if let Some(audit) = &l.audit {
            outer = SharedService::new(audit.layer(outer));
        }
        VmcpStack {
            inner: SharedService::new(RecoveryLayer::new().layer(l.headers.layer(outer))),
        }
    }
}

/// The service [`VmcpStackLayer`] produces.
#[derive(Clone)]
pub struct VmcpStack {
    inner: SharedService<Request<Body>, Response<Body>>,
}

impl std::fmt::Debug for VmcpStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmcpStack").finish_non_exhaustive()
    }
}

impl<B> Service<Request<B>> for VmcpStack
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = <SharedService<Request<Body>, Response<Body>> as Service<Request<Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.inner.call(req.map(Body::new))
    }
}

/// An assembled pipeline: the routes to mount and what is in it.
pub struct Stack {
    router: axum::Router,
    layer: VmcpStackLayer,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("layers", &self.layer.layers())
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// The routes: the MCP endpoint, and when configured the protected-resource
    /// metadata and `/metrics`. Merge it into an app's router.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    pub(crate) fn router_ref(&self) -> &axum::Router {
        &self.router
    }

    /// The layers, outermost first.
    pub fn layers(&self) -> &[&'static str] {
        self.layer.layers()
    }

    /// The telemetry pipeline, to flush or shut down.
    #[cfg(feature = "otel")]
    pub fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.layer.telemetry()
    }

    /// The Cedar authorizer, when the stack authorizes.
    #[cfg(feature = "cedar")]
    pub fn authorizer(&self) -> Option<&Arc<CedarAuthorizer>> {
        self.layer.inner.authorizer.as_ref()
    }

    /// The audit layer, to record events that are not requests (a reload).
    #[cfg(feature = "audit")]
    pub fn audit(&self) -> Option<&AuditLayer> {
        self.layer.inner.audit.as_ref()
    }
}

#[cfg(all(test, feature = "cedar", feature = "audit", feature = "otel"))]
mod tests {
    use super::*;
    use crate::context::{CatalogView, DiscoveryError, Identity, ToolInfo};
    use futures::future::BoxFuture;

    struct Nothing;
    impl CatalogView for Nothing {
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
    impl CapabilityProvider for Nothing {
        fn view(
            &self,
            _: &Identity,
        ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>> {
            Box::pin(async { Ok(Arc::new(Nothing) as Arc<dyn CatalogView>) })
        }
    }

    fn echo() -> InnerService {
        SharedService::new(tower::service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }))
    }

    #[test]
    fn the_documented_order() {
        let policies = ["permit(principal, action, resource);".to_owned()];
        let authorizer = CedarAuthorizer::from_sources(
            &crate::authz::cedar::sources("authz", &policies, &[]),
            crate::authz::cedar::CedarSettings::default(),
        )
        .unwrap();
        let telemetry = Telemetry::new(&crate::telemetry::TelemetrySettings {
            prometheus: true,
            ..Default::default()
        })
        .unwrap();
        let audit = AuditLayer::new(
            crate::audit::AuditSettings::default(),
            Arc::new(crate::audit::StdoutSink),
        );
        let stack = StackBuilder::new()
            .audit(audit)
            .authorizer(Arc::new(authorizer))
            .telemetry(Arc::new(telemetry))
            .provider(Arc::new(Nothing))
            .build(echo());
        assert_eq!(
            stack.layers(),
            [
                "recovery",
                "headers",
                "audit",
                "auth",
                "parse",
                "discovery",
                "annotations",
                "authz",
                "backend_enrichment",
                "telemetry",
                "gate"
            ]
        );
        let bare = StackBuilder::new().build(echo());
        assert_eq!(bare.layers(), ["recovery", "headers", "auth", "parse"]);
    }
}
