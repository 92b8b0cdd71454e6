//! The status surface: liveness, readiness, `/status`, and status reporters.
//!
//! [`router`] serves `/health` and `/ping` (liveness), `/readyz` (503 until the first
//! aggregation finished) and `/status` (every backend's health, transport and
//! revision). Nothing here reveals URLs, credentials or tokens. A
//! [`StatusReporter`] receives the same [`Status`] on every health change and every
//! `statusReportingInterval`, so other sinks (a CRD writer, a metrics push) can be
//! added without touching the monitor.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use vmcp_layers::auth::AuthLayer;

use crate::aggregator::Aggregator;
use crate::backend::BackendEventKind;
use crate::backend::{CircuitState, HealthStatus};
use crate::readiness::{ReadyState, readyz};
use crate::status_view::{Scope, View, Viewer};

/// The overall phase of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// The first aggregation has not finished.
    Pending,
    /// Every backend is advertisable.
    Ready,
    /// Some backends are not advertisable.
    Degraded,
    /// Backends are configured and none is advertisable.
    Failed,
}

/// One backend on the status surface.
#[derive(Debug, Clone, Serialize)]
pub struct BackendStatus {
    /// Backend name.
    pub name: String,
    /// Health status.
    pub health: HealthStatus,
    /// `streamable-http`, `sse` or `stdio`.
    pub transport: &'static str,
    /// How the gateway authenticates to it.
    pub auth_type: &'static str,
    /// The negotiated MCP revision (`2025-11-25` or `2026-07-28`), once connected.
    pub mcp_revision: Option<&'static str>,
    /// When it was last checked or called (RFC 3339).
    pub last_check: Option<String>,
    /// The last failure, without secrets.
    pub last_error: Option<String>,
    /// Circuit breaker state.
    pub circuit: CircuitState,
    /// Consecutive failures.
    pub consecutive_failures: u32,
    /// A `stdio` backend's child process (never its command line or environment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<crate::backend::stdio::ProcessStatus>,
    /// Per-caller connections, for a backend whose credentials depend on the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller_connections: Option<crate::backend::callers::CallerConnections>,
}

/// The whole status document served at `/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Every backend, sorted by name.
    pub backends: Vec<BackendStatus>,
    /// Whether at least one backend is advertisable.
    pub healthy: bool,
    /// The gateway version.
    pub version: &'static str,
    /// The configured `groupRef`.
    pub group_ref: Option<String>,
    /// The overall phase.
    pub phase: Phase,
    /// Tool collisions the last catalog build left unresolved (a composite tool's
    /// name shadowing a backend tool included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<String>,
    /// Composite step tools not in the catalog (each such step fails when it runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_step_tools: Vec<String>,
    /// Tool integrity (`integrity.mode` not `off`): definitions that differ from
    /// their pins, or have none, with the diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity: Option<crate::integrity::IntegrityStatus>,
    /// The configured rate limits (`rateLimiting`), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limiting: Option<RateLimitingStatus>,
}

/// `/status`' `rate_limiting`: the limits in force, and the calls in flight to each
/// backend with a `maxConcurrent` cap.
#[derive(Debug, Clone, Serialize)]
pub struct RateLimitingStatus {
    /// `rateLimiting` as configured.
    pub limits: crate::config::RateLimitingConfig,
    /// Where the buckets are: `memory` (this replica's own) or `redis` (shared).
    pub store: &'static str,
    /// Per capped backend: calls in flight and the cap.
    pub in_flight: Vec<BackendInFlight>,
}

/// Calls in flight to one capped backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendInFlight {
    /// The backend.
    pub backend: String,
    /// Calls holding a slot now.
    pub in_flight: usize,
    /// `maxConcurrent`.
    pub max_concurrent: usize,
}

impl Status {
    /// The status as `view` shows it: only the backends it shows (the phase is the
    /// gateway's, as on the open `/readyz`).
    pub(crate) fn seen_by(aggregator: &Aggregator, view: &View) -> Self {
        let mut status = Self::of(aggregator);
        if let Some(shown) = view.backends(&aggregator.catalog()) {
            status.backends.retain(|b| shown.contains(b.name.as_str()));
            // Limits name backends and tools too: only the backends and tools this
            // viewer sees (the global and verb budgets apply to everyone).
            if let Some(limits) = &mut status.rate_limiting {
                let catalog = aggregator.catalog();
                limits
                    .limits
                    .tools
                    .retain(|t| view.tool_named(&catalog, &t.name));
                limits
                    .limits
                    .backends
                    .retain(|b| shown.contains(b.name.as_str()));
                limits
                    .in_flight
                    .retain(|b| shown.contains(b.backend.as_str()));
            }
            status.healthy = status.backends.iter().any(|b| b.health.advertisable());
            // Findings name definitions nobody may list (hidden ones) and other
            // callers' tools: for operators only.
            status.integrity = None;
            // Collisions and missing step tools name tools and backends this
            // viewer may not see (as /ui, which shows them to operators only).
            status.unresolved.clear();
            status.missing_step_tools.clear();
        }
        status
    }

    /// The current status of `aggregator`'s backends.
    pub fn of(aggregator: &Aggregator) -> Self {
        let ready = *aggregator.ready().borrow();
        let backends: Vec<BackendStatus> = aggregator
            .registry()
            .all()
            .iter()
            .map(|b| {
                let health = b.health().snapshot();
                BackendStatus {
                    name: b.name().to_string(),
                    health: health.status,
                    transport: b.config().transport().as_str(),
                    auth_type: aggregator
                        .registry()
                        .outgoing_auth(b.name())
                        .map_or("unauthenticated", |s| s.kind()),
                    mcp_revision: b.revision().map(|r| r.as_str()),
                    last_check: health
                        .last_check
                        .map(|t| humantime::format_rfc3339_millis(t).to_string()),
                    last_error: health.last_error,
                    circuit: health.circuit,
                    consecutive_failures: health.consecutive_failures,
                    process: b.process(),
                    caller_connections: aggregator
                        .registry()
                        .caller_pool(b.name())
                        .map(|p| p.counts()),
                }
            })
            .collect();
        let up = backends.iter().filter(|b| b.health.advertisable()).count();
        let phase = if !ready {
            Phase::Pending
        } else if up == backends.len() {
            Phase::Ready
        } else if up == 0 {
            Phase::Failed
        } else {
            Phase::Degraded
        };
        Self {
            healthy: up > 0,
            backends,
            version: env!("CARGO_PKG_VERSION"),
            group_ref: aggregator.config().group_ref.clone(),
            phase,
            unresolved: aggregator.unresolved(),
            missing_step_tools: aggregator.missing_step_tools(),
            integrity: aggregator.integrity().status(),
            rate_limiting: aggregator
                .limiter()
                .config()
                .map(|limits| RateLimitingStatus {
                    limits,
                    store: if aggregator.limiter().shared() {
                        "redis"
                    } else {
                        "memory"
                    },
                    in_flight: aggregator
                        .limiter()
                        .in_flight()
                        .into_iter()
                        .map(|(backend, in_flight, max_concurrent)| BackendInFlight {
                            backend,
                            in_flight,
                            max_concurrent,
                        })
                        .collect(),
                }),
        }
    }
}

/// Receives the status on every change and periodically.
pub trait StatusReporter: Send + Sync + 'static {
    /// Report `status`. Called from a background task; must not block for long.
    fn report(&self, status: &Status);
}

/// Logs the status at debug: health changes and failures are logged where they
/// happen (once per change), so this would only repeat them every interval.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoggingReporter;

impl StatusReporter for LoggingReporter {
    fn report(&self, status: &Status) {
        let up = status
            .backends
            .iter()
            .filter(|b| b.health.advertisable())
            .count();
        tracing::debug!(phase = ?status.phase, up, total = status.backends.len(), "vmcp status");
        for b in status.backends.iter().filter(|b| !b.health.advertisable()) {
            tracing::debug!(backend = %b.name, health = ?b.health, last_error = b.last_error.as_deref().unwrap_or(""), "backend not advertised");
        }
    }
}

/// Feed `reporters` on every health change and every `interval` until `shutdown`.
pub(crate) async fn report(
    aggregator: Arc<Aggregator>,
    reporters: Vec<Arc<dyn StatusReporter>>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut events = aggregator.registry().events();
    let mut ready = aggregator.ready();
    // A ticker, not a sleep restarted per event: a chatty backend must not postpone
    // the periodic report.
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let emit = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => true,
            changed = ready.changed() => changed.is_ok(),
            event = events.recv() => match event {
                Ok(e) => e.kind == BackendEventKind::HealthChanged,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
        };
        if emit {
            let status = Status::of(&aggregator);
            for reporter in &reporters {
                reporter.report(&status);
            }
        }
    }
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn alive() -> Response {
    no_store(Json(json!({"status": "ok"})).into_response())
}

async fn readyz_no_store(ready: State<ReadyState>) -> Response {
    no_store(readyz(ready).await)
}

async fn status(
    State(aggregator): State<Arc<Aggregator>>,
    viewer: axum::Extension<Viewer>,
) -> Response {
    no_store(Json(Status::seen_by(&aggregator, &viewer.view())).into_response())
}

/// The status routes: `/health`, `/ping`, `/readyz`, `/status` (GET and HEAD).
/// `/status` names backends and their errors, so it answers only loopback `Host`s
/// and `hosts` (DNS rebinding, as the MCP endpoint); anything else is 403.
pub(crate) fn router(ready: ReadyState, guard: &Guard) -> axum::Router {
    let aggregator = ready.aggregator.clone();
    let status_routes = guard.apply(
        axum::Router::new()
            .route("/status", get(status))
            .with_state(aggregator.clone()),
    );
    axum::Router::new()
        .route("/health", get(alive))
        .route("/ping", get(alive))
        .route("/readyz", get(readyz_no_store))
        .with_state(ready)
        .merge(status_routes)
}

/// The authentication the routes naming backends require: none, a bearer-token
/// layer, or `Err` when it could not be built (then they answer 503 rather than
/// open). Shared by every router built from it; [`Vmcp::reload`](crate::Vmcp::reload)
/// swaps it together with the layer stack, so the status routes follow the
/// reloaded `incomingAuth` and `status.requireAuth`.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusAuth(Arc<std::sync::RwLock<Option<Result<AuthLayer, ()>>>>);

impl StatusAuth {
    pub(crate) fn new(auth: Option<Result<AuthLayer, ()>>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(auth)))
    }

    pub(crate) fn replace(&self, auth: Option<Result<AuthLayer, ()>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = auth;
    }

    fn current(&self) -> Option<Result<AuthLayer, ()>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the routes naming backends (`/status`, `/ui`, `/ui/events`) check: the
/// `Host` (403), then, when `status.requireAuth`, the `/mcp` bearer token (401).
/// Each request then carries its [`Viewer`]: what that caller may see.
#[derive(Clone)]
pub(crate) struct Guard {
    /// Decides each caller's view.
    pub(crate) scope: Arc<Scope>,
    /// Allowed `Host` names besides loopback (lower-case, no port).
    pub(crate) hosts: Arc<[String]>,
    /// The authentication required, read per request.
    pub(crate) auth: StatusAuth,
}

impl Guard {
    /// `router` behind the Host check and, if required, authentication.
    pub(crate) fn apply<S: Clone + Send + Sync + 'static>(
        &self,
        router: axum::Router<S>,
    ) -> axum::Router<S> {
        let scope = self.scope.clone();
        let router = router.route_layer(axum::middleware::from_fn(
            move |mut request: axum::extract::Request, next: axum::middleware::Next| {
                let identity = request
                    .extensions()
                    .get::<Arc<vmcp_layers::context::Identity>>()
                    .cloned();
                request.extensions_mut().insert(Viewer {
                    scope: scope.clone(),
                    identity,
                });
                next.run(request)
            },
        ));
        let auth = self.auth.clone();
        let router = router.route_layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let current = auth.current();
                async move {
                    match current {
                        None => next.run(request).await,
                        Some(Ok(layer)) => authenticated(layer, next, request).await,
                        Some(Err(())) => no_store(
                            (
                                StatusCode::SERVICE_UNAVAILABLE,
                                "status authentication unavailable",
                            )
                                .into_response(),
                        ),
                    }
                }
            },
        ));
        host_guarded(router, self.hosts.clone())
    }
}

/// `request` through `layer` (the `/mcp` authentication) and on to `next`.
async fn authenticated(
    layer: AuthLayer,
    next: axum::middleware::Next,
    request: axum::extract::Request,
) -> Response {
    use tower::{Layer, ServiceExt};
    let inner = tower::service_fn(move |request: axum::extract::Request| {
        let next = next.clone();
        async move { Ok::<_, std::convert::Infallible>(next.run(request).await) }
    });
    match layer.layer(inner).oneshot(request).await {
        Ok(response) => response.into_response(),
        Err(never) => match never {},
    }
}

/// `router`'s routes answer only requests whose `Host` is loopback or one of `hosts`
/// (lower-case names, no port); anything else is 403.
fn host_guarded<S: Clone + Send + Sync + 'static>(
    router: axum::Router<S>,
    hosts: Arc<[String]>,
) -> axum::Router<S> {
    router.route_layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let allowed = host_allowed(request.headers(), &hosts);
            async move {
                if allowed {
                    next.run(request).await
                } else {
                    no_store((StatusCode::FORBIDDEN, "Forbidden: Host not allowed").into_response())
                }
            }
        },
    ))
}

/// Whether the `Host` header names loopback or one of `hosts`. No `Host` (HTTP/1.0)
/// is refused.
fn host_allowed(headers: &axum::http::HeaderMap, hosts: &[String]) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split_once(']').map_or("", |(name, _)| name)
    } else {
        host.split_once(':').map_or(host.as_str(), |(name, _)| name)
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1") || hosts.iter().any(|h| h == name)
}
