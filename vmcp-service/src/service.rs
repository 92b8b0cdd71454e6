//! The aggregating MCP tower `Service`, and the running gateway that backs it.

use std::sync::Arc;

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
use crate::catalog::CompositeProblem;
use crate::config::{ConfigError, StackError, Strategy, VmcpConfig, stack_builder};
use crate::handler::VmcpHandler;
use crate::session_binding::SessionBindings;
use crate::sessions::Sessions;
use crate::status::{LoggingReporter, StatusAuth, StatusReporter};

mod endpoint;

use endpoint::Shared;
pub use endpoint::{VmcpBody, VmcpService};

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
    /// `sessionStorage` could not be opened (a bad address or CA bundle; an
    /// unreachable Redis does not stop startup).
    #[error(transparent)]
    SessionStorage(#[from] crate::redis_store::StoreError),
    /// Backends that answered at startup contradict composite tools: a step names a
    /// `<backend>.<tool>` its backend does not offer, or a composite is named like a
    /// tool a backend advertises. (A backend that did not answer is not held against
    /// a composite: its problems are logged and listed on `/status`.)
    #[error("composite tools the backends contradict:\n  - {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  - "))]
    CompositeTools(Vec<CompositeProblem>),
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
    /// The status routes' authentication, swapped by [`Vmcp::reload`].
    status_auth: StatusAuth,
    /// The shared Redis of replicas (`sessionStorage.provider: redis`); read at start.
    store: Option<Arc<crate::redis_store::RedisStore>>,
    /// The sealing key, parked calls and their routing.
    replica: crate::replica::Replica,
    /// What else `/readyz` takes into account ([`Vmcp::add_readiness_check`]).
    readiness: crate::readiness::Checks,
}

impl Vmcp {
    /// Validate `config`, connect to every backend, build the first catalog, and start
    /// keeping it current. An invalid configuration is refused
    /// ([`StartError::InvalidConfig`]). Unreachable backends do not stop startup: they
    /// are retried in the background. Under `manual` conflict resolution an
    /// unresolved collision does, and so do composite tools the backends that
    /// answered contradict ([`StartError::CompositeTools`]).
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
        let store = match config.session_storage.provider {
            crate::config::StorageProvider::Memory => None,
            crate::config::StorageProvider::Redis => Some(crate::redis_store::RedisStore::open(
                &config.session_storage,
            )?),
        };
        crate::optimizer::announce(&config);
        // Built once here: every status router shares it, and a reload swaps it.
        let status_auth = StatusAuth::new(status_auth(&config).map(|auth| {
            auth.map_err(|e| {
                tracing::error!("status routes refused: their authentication failed to build: {e}");
            })
        }));
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
        // With a shared Redis the buckets live in it (also for a `rateLimiting` a
        // reload adds later), unless the start config says `store: memory`.
        let buckets_in_redis = store.is_some()
            && config
                .rate_limiting
                .as_ref()
                .is_none_or(|r| r.store(true) == crate::config::BucketStoreKind::Redis);
        let aggregator = Arc::new(Aggregator::new(Arc::new(config), registry));
        if buckets_in_redis && let Some(store) = &store {
            aggregator.limiter().use_redis(store.clone());
        }
        if let Some(store) = &store {
            // For `integrity.store: redis` (now or after a reload).
            aggregator.integrity().use_redis(store.clone());
        }
        let report = aggregator.refresh_all().await;
        if manual && !report.unresolved.is_empty() {
            aggregator.registry().close_all().await;
            return Err(StartError::UnresolvedCollisions(report.unresolved));
        }
        // Only at startup: a reload reports the same problems without stopping a
        // running gateway.
        let contradicted = aggregator.certain(&report);
        // Under integrity blocking a step's tool may be held back until approved:
        // the problems are reported (log, /status), never fatal, or one unapproved
        // pin would keep the whole gateway down.
        let blocking = aggregator
            .config()
            .integrity
            .as_ref()
            .is_some_and(|i| i.mode != crate::config::IntegrityMode::Off);
        if blocking && !contradicted.is_empty() {
            for problem in &contradicted {
                tracing::warn!(
                    "composite tool problem at start (integrity pins may hold a tool back until approved): {problem}"
                );
            }
        } else if !contradicted.is_empty() {
            aggregator.registry().close_all().await;
            return Err(StartError::CompositeTools(contradicted));
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
        let replica =
            match crate::replica::Replica::start(&aggregator, store.clone(), &shutdown).await {
                Ok(replica) => replica,
                Err(errors) => {
                    aggregator.registry().close_all().await;
                    return Err(ConfigError::Invalid(errors).into());
                }
            };
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
            status_auth,
            store,
            replica,
            readiness: Default::default(),
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
        let handler = self.replica.serve(VmcpHandler::new(
            self.aggregator.clone(),
            self.sessions.clone(),
        ));
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
        let mut config = config
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
        // With a shared Redis, sessions are recorded there and restored by any replica.
        let replicas = self.store.clone().map(|store| {
            crate::shared_sessions::SharedSessions::new(
                store,
                Arc::downgrade(&manager),
                Arc::downgrade(&bindings),
                Arc::downgrade(&self.sessions),
                Arc::downgrade(&self.aggregator),
            )
        });
        if let Some(replicas) = &replicas {
            tokio::spawn(replicas.clone().run_passes(self.shutdown.child_token()));
            config.session_store = Some(crate::shared_sessions::rmcp_store(replicas.clone()));
        }
        let handler = handler.with_replicas(replicas.clone());
        VmcpService::new(Shared {
            inner: StreamableHttpService::new(move || Ok(handler.clone()), manager.clone(), config),
            replicas,
            bare,
            bindings,
            manager,
            aggregator: self.aggregator.clone(),
            sessions: self.sessions.clone(),
            listen_caps: Default::default(),
            edge: Some(edge),
        })
    }

    /// The shared Redis of replicas, when `sessionStorage.provider` is `redis`.
    pub fn shared_store(&self) -> Option<&Arc<crate::redis_store::RedisStore>> {
        self.store.as_ref()
    }

    /// Let `check` decide `/readyz` too (with the first catalog and the shared store),
    /// for as long as `check` is alive: it is held weakly. Discovery registers itself.
    pub fn add_readiness_check(
        &self,
        check: std::sync::Weak<dyn crate::readiness::ReadinessCheck>,
    ) {
        self.readiness.add(check);
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
        let guard = crate::status::Guard {
            scope: Arc::new(crate::status_view::Scope::new(self.aggregator.clone())),
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            auth: self.status_auth.clone(),
        };
        let ready = crate::readiness::ReadyState {
            aggregator: self.aggregator.clone(),
            store: self.store.clone(),
            checks: self.readiness.clone(),
        };
        let status = crate::status::router(ready, &guard)
            // `/admin/pins…`: 404 unless `integrity.admin`; its own bearer token.
            .merge(crate::admin::router(self.aggregator.clone()));
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
    /// `config` is validated first, as by [`Vmcp::start`]; an invalid one is
    /// refused ([`ReloadError::InvalidConfig`](crate::ReloadError::InvalidConfig))
    /// and nothing is applied. Then everything checked at the door is rebuilt from
    /// it before anything is applied: the status routes' authentication
    /// (`incomingAuth`, `status.requireAuth`) and, with a
    /// [`Vmcp::reloadable_stack`], its layers (`incomingAuth` with the Cedar
    /// policies, `audit`, `telemetry`). If any fails to build, nothing is applied
    /// ([`ReloadError`](crate::ReloadError)) and the old ones keep serving. New
    /// requests then run under the new ones; requests in flight finish under the
    /// old. The audit log records the reload.
    pub async fn reload(&self, config: VmcpConfig) -> Result<(), crate::ReloadError> {
        if let Err(error) = crate::config::validate(&config) {
            self.record_refused_reload();
            tracing::error!("configuration reload refused: {error}");
            return Err(error.into());
        }
        // An unchanged section keeps its validator (and the keys it fetched).
        let old = self.aggregator.config();
        let same_status_auth = old.status_requires_auth() == config.status_requires_auth()
            && serde_json::to_value(&old.incoming_auth).ok()
                == serde_json::to_value(&config.incoming_auth).ok();
        let status_auth = if same_status_auth {
            None
        } else {
            match status_auth(&config).transpose() {
                Ok(auth) => Some(auth),
                Err(error) => {
                    self.record_refused_reload();
                    tracing::error!("configuration reload refused: {error}");
                    return Err(crate::ReloadError::StatusAuth(error));
                }
            }
        };
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
        if let Some(auth) = status_auth {
            self.status_auth.replace(auth.map(Ok));
        }
        if let Some((switch, stack)) = stack {
            if let Some(audit) = stack.audit() {
                audit.record_event("config_reload", "success", "reload");
            }
            tracing::info!(layers = ?stack.layers(), "request pipeline reloaded");
            self.aggregator
                .integrity()
                .attach(stack.audit().cloned(), stack.telemetry().cloned());
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
        self.stack_around(self.service_with(http), headers)
    }

    /// [`Vmcp::stack`] around a service of this gateway built by the caller (for
    /// example [`VmcpService::without_fast_path`], to compare the two paths behind
    /// the same layers).
    pub fn stack_around(
        &self,
        service: VmcpService,
        headers: HeaderValidationLayer,
    ) -> Result<Stack, StackError> {
        let config = self.aggregator().config();
        let builder = stack_builder(
            config.incoming_auth.as_ref(),
            config.audit.as_ref(),
            config.telemetry.as_ref(),
            config.name.as_deref(),
        )?
        .headers(crate::reload::with_origins(headers, &config))
        .metrics_access(config.metrics_access())
        .provider(Arc::new(CatalogProvider(self.aggregator().clone())));
        let builder = crate::optimizer::stacked(builder, self.aggregator());
        let builder = crate::code_mode::stacked(
            builder,
            &config,
            crate::optimizer::request_rewrite(self.aggregator()),
        );
        let stack = builder.build(service);
        self.aggregator
            .integrity()
            .attach(stack.audit().cloned(), stack.telemetry().cloned());
        Ok(stack)
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
        let stack = switch.current();
        self.aggregator
            .integrity()
            .attach(stack.audit().cloned(), stack.telemetry().cloned());
        *self.layers.lock().unwrap_or_else(|e| e.into_inner()) = Some(slot);
        Ok(switch)
    }
}

/// The authentication the status routes require under `config`: the `/mcp`
/// bearer check when `status.requireAuth` (default with `incomingAuth: oidc`).
fn status_auth(
    config: &VmcpConfig,
) -> Option<Result<vmcp_layers::auth::AuthLayer, vmcp_layers::tls::TlsError>> {
    config.status_requires_auth().then(|| {
        config
            .incoming_auth
            .clone()
            .unwrap_or_default()
            .auth_layer()
    })
}

impl Drop for Vmcp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
