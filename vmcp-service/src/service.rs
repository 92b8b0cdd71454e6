//! The aggregating MCP tower `Service`, and the running gateway that backs it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;
use vmcp_layers::headers::HeaderValidationLayer;
use vmcp_layers::stack::{Stack, StackBuilder};
use vmcp_layers::switch::StackSwitch;

use crate::aggregator::{Aggregator, CatalogProvider};
use crate::backend::BackendRegistry;
use crate::backend::HealthSettings;
use crate::config::{ConfigError, StackError, Strategy, VmcpConfig, stack_builder};
use crate::handler::VmcpHandler;
use crate::session_binding::SessionBindings;
use crate::sessions::Sessions;
use crate::status::{LoggingReporter, StatusReporter};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid: the same errors, naming the same fields, as
    /// [`config::validate`](crate::config::validate).
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    /// `conflictResolution: manual` left collisions no override resolves.
    #[error("unresolved tool name collisions (conflictResolution: manual):\n  - {}", .0.join("\n  - "))]
    UnresolvedCollisions(Vec<String>),
}

/// A running gateway: the backend registry, the aggregated catalog, and the
/// background task that keeps the catalog current.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = vmcp_service::config::load_file("vmcp.yaml".as_ref())?.config;
/// let gateway = vmcp_service::Vmcp::start(config).await?;
/// let app: axum::Router = axum::Router::new().nest_service("/mcp", gateway.service());
/// # let _ = app; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Vmcp {
    aggregator: Arc<Aggregator>,
    sessions: Arc<Sessions>,
    shutdown: CancellationToken,
    /// The stack [`Vmcp::reloadable_stack`] serves, rebuilt by [`Vmcp::reload`].
    layers: std::sync::Mutex<Option<crate::reload::LayerSlot>>,
}

impl Vmcp {
    /// Validate `config`, connect to every backend, build the first catalog, and start
    /// keeping it current. An invalid configuration is refused
    /// ([`StartError::InvalidConfig`]). Unreachable backends do not stop startup: they
    /// are retried in the background. Under `manual` conflict resolution an
    /// unresolved collision does.
    pub async fn start(config: VmcpConfig) -> Result<Self, StartError> {
        Self::start_with_reporters(config, vec![Arc::new(LoggingReporter)]).await
    }

    /// [`Vmcp::start`] with the status reporters to feed (on every health change and
    /// every `statusReportingInterval`).
    pub async fn start_with_reporters(
        config: VmcpConfig,
        reporters: Vec<Arc<dyn StatusReporter>>,
    ) -> Result<Self, StartError> {
        crate::config::validate(&config)?;
        let report_every = config
            .operational
            .failure_handling
            .status_reporting_interval
            .unwrap_or(std::time::Duration::from_secs(30));
        let registry = Arc::new(BackendRegistry::with_outgoing_auth(
            config.backends.clone(),
            HealthSettings::from(&config.operational.failure_handling),
            config.outgoing_auth.clone().unwrap_or_default(),
            &config.passthrough_headers,
        ));
        let manual = config.strategy() == Strategy::Manual;
        let aggregator = Arc::new(Aggregator::new(Arc::new(config), registry));
        let report = aggregator.refresh_all().await;
        if manual && !report.unresolved.is_empty() {
            aggregator.registry().close_all().await;
            return Err(StartError::UnresolvedCollisions(report.unresolved));
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(aggregator.clone().run(shutdown.clone()));
        let registry = aggregator.registry().clone();
        let settings = registry.clone();
        tokio::spawn(crate::aggregator::monitor::monitor(
            registry,
            move || settings.health_settings(),
            shutdown.clone(),
        ));
        tokio::spawn(crate::status::report(
            aggregator.clone(),
            reporters,
            report_every,
            shutdown.clone(),
        ));
        let sessions = Arc::new(Sessions::default());
        tokio::spawn(crate::propagation::run(
            aggregator.clone(),
            sessions.clone(),
            shutdown.clone(),
        ));
        Ok(Self {
            aggregator,
            sessions,
            shutdown,
            layers: std::sync::Mutex::new(None),
        })
    }

    /// The tower service to mount at the MCP endpoint (`/mcp`). Cheap to call again.
    ///
    /// rmcp's defaults, except that 2026-07-28 (stateless) requests are answered with
    /// a plain `application/json` body whenever nothing is streamed before the result
    /// (rmcp falls back to SSE otherwise): one write instead of an event stream, and
    /// about half the thread wake-ups per request. 2025-11-25 sessions keep SSE.
    pub fn service(&self) -> VmcpService {
        self.service_with(StreamableHttpServerConfig::default().with_json_response(true))
    }

    /// Like [`Vmcp::service`] with rmcp's HTTP settings (allowed hosts and origins,
    /// keep-alive, body limit). Legacy session mode is always kept on: both
    /// revisions are served on one endpoint.
    pub fn service_with(&self, config: StreamableHttpServerConfig) -> VmcpService {
        let handler = VmcpHandler::new(self.aggregator.clone(), self.sessions.clone());
        let edge = crate::edge::Edge::new(
            self.aggregator.clone(),
            &config,
            self.sessions.clone(),
            handler.log_levels(),
        );
        let bare = crate::bare::BareChecks {
            loopback_origins_only: config.allowed_origins.is_empty(),
            body_limit: config.max_request_body_bytes,
        };
        let config = config
            .with_legacy_session_mode(true)
            .with_cancellation_token(self.shutdown.child_token());
        // Sessions end by `operational.sessions` (session_lifetime), not by rmcp's
        // idle keep-alive.
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = None;
        let manager = Arc::new(manager);
        let bindings = Arc::new(SessionBindings::new());
        let sweep = crate::session_lifetime::Sweep {
            manager: Arc::downgrade(&manager),
            bindings: Arc::downgrade(&bindings),
            sessions: Arc::downgrade(&self.sessions),
            aggregator: Arc::downgrade(&self.aggregator),
        };
        tokio::spawn(sweep.run(self.shutdown.child_token()));
        VmcpService {
            shared: Arc::new(Shared {
                inner: StreamableHttpService::new(
                    move || Ok(handler.clone()),
                    manager.clone(),
                    config,
                ),
                bare,
                bindings,
                manager,
                aggregator: self.aggregator.clone(),
                sessions: self.sessions.clone(),
                edge: Some(edge),
            }),
        }
    }

    /// The aggregator (current catalog, refresh).
    pub fn aggregator(&self) -> &Arc<Aggregator> {
        &self.aggregator
    }

    /// The status routes (`/health`, `/ping`, `/readyz`, `/status`, and `/ui` when
    /// `ui.enabled`) to mount next to the MCP endpoint. `/status` and `/ui` name
    /// backends and their errors, so they answer loopback `Host`s only, and, when
    /// `status.requireAuth` (default with `incomingAuth: oidc`), bearer tokens the
    /// MCP endpoint would accept.
    pub fn status_router(&self) -> axum::Router {
        self.status_router_with_hosts(Vec::new())
    }

    /// [`Vmcp::status_router`] with `/status` and `/ui` also answering these `Host`
    /// names (loopback names always pass; anything else is 403).
    pub fn status_router_with_hosts(&self, hosts: Vec<String>) -> axum::Router {
        let config = self.aggregator.config();
        let auth = config.status_requires_auth().then(|| {
            let incoming = config.incoming_auth.clone().unwrap_or_default();
            incoming.auth_layer().map_err(|e| {
                tracing::error!("status routes refused: their authentication failed to build: {e}");
            })
        });
        let guard = crate::status::Guard {
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            auth,
        };
        let status = crate::status::router(self.aggregator.clone(), &guard);
        if config.ui.enabled {
            status.merge(guard.apply(crate::ui::router(
                self.aggregator.clone(),
                self.shutdown.child_token(),
            )))
        } else {
            status
        }
    }

    /// Apply a new configuration without a restart: backends that are new or changed
    /// are (re)connected, removed ones are closed, unchanged ones keep their
    /// connections, and live client sessions stay open and are told what changed.
    ///
    /// With a [`Vmcp::reloadable_stack`], its layers (`incomingAuth` with the Cedar
    /// policies, `audit`, `telemetry`) are rebuilt from `config` first; if that
    /// fails, nothing is applied ([`ReloadError`](crate::ReloadError)) and the old
    /// stack keeps serving. New requests then run under the new stack; requests in
    /// flight finish under the old one. The audit log records the reload.
    pub async fn reload(&self, config: VmcpConfig) -> Result<(), crate::ReloadError> {
        let stack = {
            let slot = self.layers.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                None => None,
                Some(slot) => {
                    let current = slot.switch.current();
                    let old = self.aggregator.config();
                    match crate::reload::build(
                        &config,
                        &self.aggregator,
                        slot.headers.clone(),
                        &slot.wrap,
                        Some((&*old, &*current)),
                    ) {
                        Ok(stack) => Some((slot.switch.clone(), stack)),
                        Err(error) => {
                            if let Some(audit) = current.audit() {
                                audit.record_event("config_reload", "failure", "reload");
                            }
                            tracing::error!("configuration reload refused: {error}");
                            return Err(error.into());
                        }
                    }
                }
            }
        };
        let registry = self.registry();
        let wanted: std::collections::BTreeMap<&str, &crate::config::BackendConfig> = config
            .backends
            .iter()
            .map(|b| (b.name.as_str(), b))
            .collect();
        for name in registry.names() {
            if !wanted.contains_key(name.as_str()) {
                registry.remove(&name).await;
            }
        }
        // A backend whose outgoing auth changed gets a new client too.
        let outgoing = config.outgoing_auth.clone().unwrap_or_default();
        // New passthrough headers or caller-connection settings: every backend's
        // per-caller connections are rebuilt.
        let all = registry.set_passthrough(&config.passthrough_headers)
            | (self
                .aggregator
                .config()
                .outgoing_auth
                .clone()
                .unwrap_or_default()
                .caller_connections
                != outgoing.caller_connections);
        let changed: Vec<_> = wanted
            .iter()
            .filter(|(name, backend)| {
                all || !(registry.get(name).is_some_and(|b| b.config() == **backend)
                    && registry.outgoing_auth(name).as_ref() == outgoing.resolve(name))
            })
            .map(|(_, backend)| (*backend).clone())
            .collect();
        registry.set_outgoing_auth(outgoing);
        for backend in changed {
            registry.upsert(backend).await;
        }
        registry.set_health_settings(HealthSettings::from(&config.operational.failure_handling));
        let report = self.aggregator.set_config(Arc::new(config)).await;
        if !report.unresolved.is_empty() {
            tracing::error!(
                "reloaded configuration leaves tool collisions unresolved: {:?}",
                report.unresolved
            );
        }
        if let Some((switch, stack)) = stack {
            if let Some(audit) = stack.audit() {
                audit.record_event("config_reload", "success", "reload");
            }
            tracing::info!(layers = ?stack.layers(), "request pipeline reloaded");
            let authorizer = stack.authorizer().cloned();
            switch.replace(stack);
            // Open sessions and listen streams follow the new policies too.
            self.sessions.readmit(
                |identity| {
                    authorizer
                        .as_ref()
                        .map(|a| vmcp_layers::authz::admission(a.clone(), identity.clone()).0)
                },
                &self.aggregator.catalog(),
            );
        }
        tracing::info!("configuration reloaded");
        Ok(())
    }

    /// The live client sessions and listen streams.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// The backend registry; adding or removing a backend rebuilds the catalog.
    pub fn registry(&self) -> &Arc<BackendRegistry> {
        self.aggregator.registry()
    }

    /// Stop background work and close every backend connection.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.registry().close_all().await;
    }
}

impl Vmcp {
    /// The full pipeline from the configuration (`incomingAuth`, `audit`,
    /// `telemetry`) around [`Vmcp::service_with`]`(http)`, at `/mcp`, with the
    /// catalog as every caller's capability view. `headers` sets the Host/Origin
    /// allow-lists and body limit.
    pub fn stack(
        &self,
        http: StreamableHttpServerConfig,
        headers: HeaderValidationLayer,
    ) -> Result<Stack, StackError> {
        let config = self.aggregator().config();
        let builder = stack_builder(
            config.incoming_auth.as_ref(),
            config.audit.as_ref(),
            config.telemetry.as_ref(),
            config.name.as_deref(),
        )?
        .headers(headers)
        .provider(Arc::new(CatalogProvider(self.aggregator().clone())));
        Ok(builder.build(self.service_with(http)))
    }

    /// Record in the audit log (when the served stack audits) that a reload was
    /// refused before [`Vmcp::reload`] could be called (a file that does not load).
    pub fn record_refused_reload(&self) {
        let slot = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slot.as_ref()
            && let Some(audit) = slot.switch.current().audit()
        {
            audit.record_event("config_reload", "failure", "reload");
        }
    }

    /// [`Vmcp::stack`] behind a [`StackSwitch`]: [`Vmcp::reload`] rebuilds its layers
    /// from the new configuration and swaps them in (sessions stay open). Mount
    /// [`StackSwitch::router`]. A later call replaces which stack reloads follow.
    pub fn reloadable_stack(
        &self,
        http: StreamableHttpServerConfig,
        headers: HeaderValidationLayer,
    ) -> Result<StackSwitch, StackError> {
        let service = self.service_with(http);
        let slot = crate::reload::slot(
            &self.aggregator.config(),
            &self.aggregator,
            Arc::new(move |builder: StackBuilder| builder.build(service.clone())),
            headers,
        )?;
        let switch = slot.switch.clone();
        *self.layers.lock().unwrap_or_else(|e| e.into_inner()) = Some(slot);
        Ok(switch)
    }
}

impl Drop for Vmcp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The aggregating MCP endpoint as a tower `Service<http::Request<B>>`: mount it in
/// axum with `nest_service`/`route_service`, or serve it with hyper directly.
///
/// ```no_run
/// # async fn run(gateway: vmcp_service::Vmcp) -> std::io::Result<()> {
/// let mcp: vmcp_service::VmcpService = gateway.service();
/// let app = axum::Router::new().nest_service("/mcp", mcp);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await
/// # }
/// ```
#[derive(Clone)]
pub struct VmcpService {
    /// One `Arc`: tower and axum clone the service for every request, and cloning
    /// rmcp's service copies its settings (host and origin lists): about 15 k
    /// instructions per request, twice, before this was shared.
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Shared {
    inner: StreamableHttpService<VmcpHandler, LocalSessionManager>,
    /// The door checks made when no layer stack is in front (`bare`).
    bare: crate::bare::BareChecks,
    /// Who created each Legacy session, and its lifetime.
    bindings: Arc<SessionBindings>,
    /// rmcp's sessions, to close those over the cap or past their lifetime.
    manager: Arc<LocalSessionManager>,
    /// The configuration the session limits are read from, and the composite step
    /// check (`composite::gate`).
    aggregator: Arc<Aggregator>,
    sessions: Arc<Sessions>,
    /// The fast path for plain requests; `None` sends everything to rmcp.
    edge: Option<crate::edge::Edge>,
}

impl VmcpService {
    /// This service with every request answered by rmcp's server: no fast path
    /// (see the `edge` module). For comparisons; the answers are the same.
    pub fn without_fast_path(mut self) -> Self {
        Arc::make_mut(&mut self.shared).edge = None;
        self
    }

    /// How many requests the fast path of this service (and its clones) answered.
    pub fn fast_path_answers(&self) -> u64 {
        self.shared
            .edge
            .as_ref()
            .map_or(0, crate::edge::Edge::served)
    }
}

impl std::fmt::Debug for VmcpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmcpService").finish_non_exhaustive()
    }
}

/// The response body type of [`VmcpService`].
pub type VmcpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A 403 carrying the gate's denial body.
fn denied_response(body: Vec<u8>) -> http::Response<VmcpBody> {
    use http_body_util::BodyExt;
    let mut response = http::Response::new(http_body_util::Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = http::StatusCode::FORBIDDEN;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

impl<B> tower::Service<http::Request<B>> for VmcpService
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = http::Response<VmcpBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        use crate::session_binding::{Use, Verdict, created_by, identity_of, redirect_to_nowhere};
        // Backend deadlines are timed from here (see `CallBudget::since`).
        req.extensions_mut()
            .insert(crate::backend::Received(tokio::time::Instant::now()));
        let shared = self.shared.clone();
        let identity = identity_of(&req);
        let session = crate::session_binding::session_of(&req);
        let limits = crate::session_lifetime::limits(&shared.aggregator);
        let delete = req.method() == http::Method::DELETE;
        let mut in_use = None;
        if let Some(session) = &session {
            match shared
                .bindings
                .verdict(session, identity.as_deref(), &limits)
            {
                Verdict::Owner => {
                    let kind = match *req.method() {
                        http::Method::POST => Use::Call,
                        http::Method::GET => Use::Stream,
                        _ => Use::Touch,
                    };
                    in_use = Some(shared.bindings.enter(session, kind));
                }
                Verdict::Stranger => {
                    tracing::debug!("a request for a session bound to another caller or retired");
                    redirect_to_nowhere(&mut req);
                }
            }
        }
        if let Some(body) = crate::composite::gate::denial(
            &shared.aggregator.workflows(),
            &shared.aggregator.catalog(),
            req.extensions(),
        ) {
            return Box::pin(futures::future::ready(Ok(denied_response(body))));
        }
        let deleting = in_use.is_some() && delete;
        let bare = !crate::bare::behind_stack(&req);
        let listen = crate::listen_filter::admission(&req);
        // Behind the stack the parse layer's request is the one parse; when bare, the
        // bare checks' parse is.
        let stacked = req
            .extensions()
            .get::<Arc<vmcp_layers::ParsedMcpRequest>>()
            .cloned();
        // The session the fast path may answer for: bound to this caller and held.
        let owned = session.clone().filter(|_| matches!(in_use, Some(Some(_))));
        Box::pin(async move {
            let (inner, edge) = (&shared.inner, &shared.edge);
            let mut response = if bare {
                match crate::bare::check(&shared.bare, req).await {
                    Ok((req, parsed)) => {
                        if let Some((edge, admitted)) =
                            fast(edge, &req, parsed.map(Arc::new), owned)
                            && let Some(response) = edge.serve(admitted).await
                        {
                            return Ok(held(response, in_use));
                        }
                        inner.handle(req).await
                    }
                    Err(refused) => return Ok(refused),
                }
            } else {
                match listen {
                    Some(listen) => inner.handle(listen.apply(req).await).await,
                    None => {
                        if let Some((edge, admitted)) = fast(edge, &req, stacked, owned)
                            && let Some(response) = edge.serve(admitted).await
                        {
                            return Ok(held(response, in_use));
                        }
                        inner.handle(req).await
                    }
                }
            };
            // rmcp answers a session DELETE with 202, which clients (the Python SDK
            // among them) take as failure: they expect 200 or 204 (or 405).
            if delete && response.status() == http::StatusCode::ACCEPTED {
                *response.status_mut() = http::StatusCode::NO_CONTENT;
            }
            match &session {
                None => {
                    if let Some(created) = created_by(&response)
                        && !shared
                            .bindings
                            .bind(&created, identity.as_deref(), limits.max_sessions)
                    {
                        tracing::warn!(
                            cap = limits.max_sessions,
                            "refused a new Legacy session: operational.sessions.maxSessions reached"
                        );
                        crate::session_lifetime::close(
                            &shared.manager,
                            &shared.bindings,
                            &shared.sessions,
                            &created,
                        )
                        .await;
                        return Ok(crate::session_lifetime::over_cap(
                            shared.bindings.next_retirement(&limits),
                        ));
                    }
                }
                Some(session) if deleting && response.status().is_success() => {
                    shared.bindings.unbind(session);
                    shared.sessions.remove_legacy(session);
                }
                Some(_) => {}
            }
            Ok(held(response, in_use))
        })
    }
}

/// The fast path's decision for `req` (see `edge`); a session's other messages are
/// shown to the edge too (a `notifications/cancelled` may name a call it runs).
fn fast<'e, B: http_body::Body>(
    edge: &'e Option<crate::edge::Edge>,
    req: &http::Request<B>,
    parsed: Option<Arc<vmcp_layers::ParsedMcpRequest>>,
    session: Option<String>,
) -> Option<(&'e crate::edge::Edge, crate::edge::Admitted)> {
    let (edge, parsed) = (edge.as_ref()?, parsed?);
    let admitted = edge.admit(req, &parsed, session.as_deref());
    if let (None, Some(session)) = (&admitted, &session) {
        edge.session_message(session, &parsed);
    }
    admitted.map(|admitted| (edge, admitted))
}

/// `response`, keeping its session in use until its body ends.
fn held(
    response: http::Response<VmcpBody>,
    in_use: Option<Option<crate::session_binding::InUse>>,
) -> http::Response<VmcpBody> {
    match in_use.flatten() {
        Some(guard) => crate::session_lifetime::hold_while_open(response, guard),
        None => response,
    }
}
