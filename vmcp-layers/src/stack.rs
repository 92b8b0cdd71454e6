//! The one builder that assembles the pipeline in its documented order.
//!
//! Outermost first:
//!
//! | # | Layer | When | Why there |
//! |---|---|---|---|
//! | 1 | [`recovery`](crate::recovery) | always | catches a panic anywhere below |
//! | 2 | [`headers`](crate::headers) | always | cheapest rejections first, before a token is checked or a body read |
//! | 3 | [`audit`](crate::audit) | `audit` configured | outside auth and the gate, so their 401s and 403s are recorded |
//! | 4 | [`auth`](crate::auth) | always (anonymous without `incomingAuth`) | identity and the one parse every later layer reads |
//! | 5 | [`discovery`](crate::discovery) | a capability provider is given | needs the identity; everything after needs the view |
//! | 6 | [`annotations`](crate::annotations) | authorization configured | policies read the tool's annotations |
//! | 7 | [`authz`](crate::authz) | `incomingAuth.authz.type: cedar` | after the view and annotations it decides on |
//! | 8 | [`backend_enrichment`](crate::backend_enrichment) | audit or telemetry configured | names the backend for the record and the span |
//! | 9 | [`telemetry`](crate::telemetry) | `telemetry` configured | spans and metrics see the decided, enriched request |
//! | 10 | [`gate`](crate::gate) | authorization configured | innermost: nothing runs for a denied call |
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

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};
use tower_http::body::Limited;

use crate::annotations::AnnotationEnrichmentLayer;
use crate::audit::{AuditConfig, AuditLayer};
use crate::auth::{AuthLayer, IncomingAuthConfig, JwtValidator};
use crate::authz::AuthorizationLayer;
use crate::authz::cedar::CedarAuthorizer;
use crate::backend_enrichment::BackendEnrichmentLayer;
use crate::context::CapabilityProvider;
use crate::discovery::DiscoveryLayer;
use crate::gate::GateLayer;
use crate::headers::HeaderValidationLayer;
use crate::recovery::RecoveryLayer;
use crate::telemetry::{Telemetry, TelemetryConfig};

/// The MCP service type inside the parsing step.
pub type InnerService = BoxCloneSyncService<Request<Full<Bytes>>, Response<Body>, Infallible>;

/// Why a stack could not be built from configuration; one message per problem.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct StackError(pub Vec<String>);

/// Assembles the layers in order; see the [module docs](self).
pub struct StackBuilder {
    path: String,
    headers: HeaderValidationLayer,
    audit: Option<AuditLayer>,
    auth: AuthLayer,
    metadata: Option<axum::Router>,
    provider: Option<Arc<dyn CapabilityProvider>>,
    discovery_timeout: Option<Duration>,
    discovery_ttl: Option<Duration>,
    authorizer: Option<Arc<CedarAuthorizer>>,
    telemetry: Option<Arc<Telemetry>>,
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
            audit: None,
            auth: AuthLayer::anonymous(),
            metadata: None,
            provider: None,
            discovery_timeout: None,
            discovery_ttl: None,
            authorizer: None,
            telemetry: None,
        }
    }

    /// The layers the configuration sections ask for. `server_name` is the Cedar
    /// `MCP::"<name>"` parent.
    pub fn from_config(
        incoming_auth: Option<&IncomingAuthConfig>,
        audit: Option<&AuditConfig>,
        telemetry: Option<&TelemetryConfig>,
        server_name: Option<&str>,
    ) -> Result<Self, StackError> {
        let mut builder = Self::new();
        let mut errors = Vec::new();
        if let Some(auth) = incoming_auth {
            if auth.kind == "oidc"
                && let Some(oidc) = &auth.oidc
            {
                let group_claim = auth
                    .authz
                    .as_ref()
                    .and_then(|a| a.group_claim_name.as_deref());
                match oidc.http_client() {
                    Ok(http) => {
                        let validator =
                            Arc::new(JwtValidator::new(oidc.settings(group_claim), http));
                        builder.auth = AuthLayer::jwt(validator, oidc.resource.clone());
                        builder.metadata = Some(crate::auth::metadata_router(oidc, &builder.path));
                    }
                    Err(e) => errors.push(format!("incomingAuth.oidc.caBundlePath: {e}")),
                }
            }
            if let Some(authz) = &auth.authz
                && authz.is_cedar()
            {
                match authz.authorizer("incomingAuth.authz", server_name) {
                    Ok(a) => builder.authorizer = Some(Arc::new(a)),
                    Err(e) => errors.extend(e),
                }
            }
        }
        if let Some(audit) = audit.filter(|a| a.enabled) {
            match AuditLayer::from_config(audit.clone()) {
                Ok(layer) => builder.audit = Some(layer),
                Err(e) => errors.push(format!("audit.logFile: {e}")),
            }
        }
        if let Some(telemetry) = telemetry {
            match Telemetry::from_config(telemetry) {
                Ok(t) => builder.telemetry = Some(Arc::new(t)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            Ok(builder)
        } else {
            Err(StackError(errors))
        }
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

    /// Authorize with `authorizer` (adds annotation enrichment, authorization, gate).
    pub fn authorizer(mut self, authorizer: Arc<CedarAuthorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Record telemetry into `telemetry`.
    pub fn telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// The configured authorizer, if any.
    pub fn authorizer_ref(&self) -> Option<&Arc<CedarAuthorizer>> {
        self.authorizer.as_ref()
    }

    /// Wrap the MCP service `inner` (it receives the buffered body).
    pub fn build<S, B>(self, inner: S) -> Stack
    where
        S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        fn boxed<T>(service: T) -> InnerService
        where
            T: Service<Request<Full<Bytes>>, Response = Response<Body>, Error = Infallible>
                + Clone
                + Send
                + Sync
                + 'static,
            T::Future: Send + 'static,
        {
            BoxCloneSyncService::new(service)
        }
        let mut inner_names: Vec<&'static str> = Vec::new();
        let mut svc: InnerService =
            BoxCloneSyncService::new(inner.map_response(|r| r.map(Body::new)));
        if self.authorizer.is_some() {
            svc = boxed(GateLayer::new().layer(svc));
            inner_names.push("gate");
        }
        if let Some(telemetry) = &self.telemetry {
            svc = boxed(telemetry.layer().layer(svc));
            inner_names.push("telemetry");
        }
        if self.provider.is_some() && (self.audit.is_some() || self.telemetry.is_some()) {
            svc = boxed(BackendEnrichmentLayer::new().layer(svc));
            inner_names.push("backend_enrichment");
        }
        if let Some(authorizer) = &self.authorizer {
            svc = boxed(AuthorizationLayer::new(authorizer.clone()).layer(svc));
            inner_names.push("authz");
            if self.provider.is_some() {
                svc = boxed(AnnotationEnrichmentLayer::new().layer(svc));
                inner_names.push("annotations");
            }
        }
        if let Some(provider) = &self.provider {
            let mut layer = DiscoveryLayer::new(provider.clone());
            if let Some(timeout) = self.discovery_timeout {
                layer = layer.timeout(timeout);
            }
            if let Some(ttl) = self.discovery_ttl {
                layer = layer.cache_ttl(ttl);
            }
            svc = boxed(layer.layer(svc));
            inner_names.push("discovery");
        }
        type Outer = BoxCloneSyncService<Request<Limited<Body>>, Response<Body>, Infallible>;
        let mut outer: Outer = BoxCloneSyncService::new(self.auth.layer(svc));
        inner_names.push("auth");
        if let Some(audit) = &self.audit {
            outer = BoxCloneSyncService::new(audit.layer(outer));
            inner_names.push("audit");
        }
        let top = RecoveryLayer::new().layer(self.headers.layer(outer));
        inner_names.push("headers");
        inner_names.push("recovery");
        inner_names.reverse();

        let mut router = axum::Router::new().route_service(&self.path, top);
        if let Some(metadata) = self.metadata {
            router = router.merge(metadata);
        }
        if let Some(telemetry) = &self.telemetry
            && telemetry.prometheus_text().is_some()
        {
            let telemetry = telemetry.clone();
            router = router.route(
                "/metrics",
                axum::routing::get(move || {
                    let text = telemetry.prometheus_text().unwrap_or_default();
                    async move {
                        (
                            [(
                                http::header::CONTENT_TYPE,
                                "text/plain; version=0.0.4; charset=utf-8",
                            )],
                            text,
                        )
                    }
                }),
            );
        }
        Stack {
            router,
            layers: inner_names,
            telemetry: self.telemetry,
        }
    }
}

/// An assembled pipeline: the routes to mount and what is in it.
pub struct Stack {
    router: axum::Router,
    layers: Vec<&'static str>,
    telemetry: Option<Arc<Telemetry>>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("layers", &self.layers)
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// The routes: the MCP endpoint, and when configured the protected-resource
    /// metadata and `/metrics`. Merge it into an app's router.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// The layers, outermost first.
    pub fn layers(&self) -> &[&'static str] {
        &self.layers
    }

    /// The telemetry pipeline, to flush or shut down.
    pub fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.telemetry.as_ref()
    }
}

#[cfg(test)]
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
        BoxCloneSyncService::new(tower::service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }))
    }

    #[test]
    fn the_documented_order() {
        let yaml_auth: IncomingAuthConfig = serde_json::from_value(serde_json::json!({
            "type": "anonymous",
            "authz": {"type": "cedar", "policies": ["permit(principal, action, resource);"]}
        }))
        .unwrap();
        let telemetry = TelemetryConfig {
            enable_prometheus_metrics_path: true,
            ..TelemetryConfig::default()
        };
        let audit = AuditConfig::default();
        let stack =
            StackBuilder::from_config(Some(&yaml_auth), Some(&audit), Some(&telemetry), None)
                .unwrap()
                .provider(Arc::new(Nothing))
                .build(echo());
        assert_eq!(
            stack.layers(),
            [
                "recovery",
                "headers",
                "audit",
                "auth",
                "discovery",
                "annotations",
                "authz",
                "backend_enrichment",
                "telemetry",
                "gate"
            ]
        );
        let bare = StackBuilder::new().build(echo());
        assert_eq!(bare.layers(), ["recovery", "headers", "auth"]);
    }
}
