//! The set of backends, which may change while the gateway runs.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, watch};

use vmcp_layers::tls::CaBundle;

use http::HeaderName;

use super::callers::CallerPool;
use super::client::{BackendClient, BackendEvent};
use super::credentials::{Credentials, HttpFactory};
use super::exchange::TokenExchanger;
use super::health::HealthSettings;
use super::http_clients::BackendHttp;
use crate::config::{BackendAuthConfig, BackendConfig, OutgoingAuthConfig, Transport};

/// The live set of backends, in sorted-name order.
///
/// Adding or removing a backend bumps a version that [`BackendRegistry::changes`]
/// exposes, so derived state (the catalog) knows to rebuild.
pub struct BackendRegistry {
    backends: RwLock<BTreeMap<String, Arc<BackendClient>>>,
    http: BackendHttp,
    events: broadcast::Sender<BackendEvent>,
    version: watch::Sender<u64>,
    health: std::sync::Mutex<HealthSettings>,
    /// `outgoingAuth`, applied to backends inserted from now on.
    outgoing: std::sync::Mutex<OutgoingAuthConfig>,
    /// `passthroughHeaders`, applied to backends inserted from now on.
    passthrough: std::sync::Mutex<Arc<[HeaderName]>>,
    /// Per-caller connections of the backends whose credentials depend on the caller.
    pools: RwLock<BTreeMap<String, Arc<CallerPool>>>,
}

impl std::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRegistry")
            .field("backends", &self.names())
            .finish_non_exhaustive()
    }
}

impl BackendRegistry {
    /// A registry with the given backends, authenticating as `outgoing` says; no
    /// connection is opened yet.
    pub(crate) fn with_outgoing_auth(
        configs: impl IntoIterator<Item = BackendConfig>,
        health: HealthSettings,
        outgoing: OutgoingAuthConfig,
        passthrough: &[String],
    ) -> Self {
        let http = BackendHttp::build(None, http::HeaderMap::new()).unwrap_or_else(|e| {
            tracing::error!("{e}; backends use reqwest's default client");
            BackendHttp::plain()
        });
        let (events, _) = broadcast::channel(1024);
        let registry = Self {
            backends: RwLock::new(BTreeMap::new()),
            http,
            events,
            version: watch::Sender::new(0),
            health: std::sync::Mutex::new(health),
            outgoing: std::sync::Mutex::new(outgoing),
            passthrough: std::sync::Mutex::new(header_names(passthrough)),
            pools: RwLock::new(BTreeMap::new()),
        };
        for config in configs {
            registry.insert(config);
        }
        registry
    }

    fn insert(&self, config: BackendConfig) -> Option<Arc<BackendClient>> {
        let strategy = self.outgoing_auth(&config.name);
        let (http, factory) = self.http_for(&config, strategy.as_ref());
        let exchanger = strategy
            .as_ref()
            .and_then(BackendAuthConfig::exchange)
            .and_then(|t| TokenExchanger::new(Arc::from(config.name.as_str()), t))
            .map(Arc::new);
        let mut client = BackendClient::new(
            config.clone(),
            http.clone(),
            self.events.clone(),
            self.health_settings(),
        );
        if let Some(exchanger) = &exchanger {
            client =
                client.with_credentials(Credentials::Service(exchanger.clone()), factory.clone());
        }
        let per_caller = config.transport() != Transport::Stdio
            && (strategy.as_ref().is_some_and(|s| s.exchange().is_some())
                || !self.passthrough().is_empty());
        // Legacy streamable-HTTP backends also get connections per client capability
        // set (`bridge`); stdio and HTTP+SSE ones cannot route a backend's request to
        // a call, so they keep declaring none.
        let pooled = per_caller || config.transport() == Transport::StreamableHttp;
        let pool = pooled.then(|| {
            let settings = self
                .outgoing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .caller_connections
                .clone();
            CallerPool::new(
                config.clone(),
                per_caller,
                http.clone(),
                exchanger,
                factory,
                self.health_settings(),
                settings,
            )
        });
        let old_pool = match pool {
            Some(pool) => self.pools_mut().insert(config.name.clone(), pool),
            None => self.pools_mut().remove(&config.name),
        };
        if let Some(old) = old_pool {
            old.close_all();
        }
        let client = Arc::new(client);
        self.write().insert(client.name().to_string(), client)
    }

    fn pools_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<CallerPool>>> {
        self.pools.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The per-caller connections of backend `name`, if its credentials depend on
    /// the caller (`token_exchange`, `passthroughHeaders`).
    pub(crate) fn caller_pool(&self, name: &str) -> Option<Arc<CallerPool>> {
        self.pool(name).filter(|p| p.per_caller())
    }

    /// The connection that lists a Legacy streamable-HTTP backend declaring every
    /// capability the gateway bridges, so the catalog has the tools a backend offers
    /// only to capable clients (server-everything registers its sampling and
    /// elicitation tools only then). `None`: list on the shared connection (a Modern
    /// backend, whose lists do not depend on the client; or a backend whose
    /// credentials depend on the caller, listed as the gateway itself).
    pub(crate) fn full_lister(&self, shared: &BackendClient) -> Option<Arc<BackendClient>> {
        if shared.revision() != Some(vmcp_layers::McpRevision::Legacy) {
            return None;
        }
        let pool = self.pool(shared.name()).filter(|p| !p.per_caller())?;
        Some(pool.client(&super::Caller::gateway(), super::ClientCaps::ALL))
    }

    /// The pooled connections of backend `name` (per caller credentials and/or per
    /// client capability set), if it has any.
    pub(crate) fn pool(&self, name: &str) -> Option<Arc<CallerPool>> {
        self.pools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The `passthroughHeaders` names.
    pub fn passthrough(&self) -> Arc<[HeaderName]> {
        self.passthrough
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace `passthroughHeaders` for backends inserted from now on; whether it
    /// changed (then reload re-inserts every backend).
    pub fn set_passthrough(&self, names: &[String]) -> bool {
        let names = header_names(names);
        let mut current = self.passthrough.lock().unwrap_or_else(|e| e.into_inner());
        let changed = *current != names;
        *current = names;
        changed
    }

    /// The shared client, or for a backend with its own `caBundlePath` or injected
    /// headers a client of its own; and the recipe of both, for connections that
    /// add credentials. Both were checked at load; if the bundle or the
    /// environment variable has gone since, the backend goes without (its TLS or 401
    /// failure shows in `/status`) and the reason is logged, never the value.
    fn http_for(
        &self,
        config: &BackendConfig,
        strategy: Option<&BackendAuthConfig>,
    ) -> (BackendHttp, HttpFactory) {
        let headers = match strategy.map(|s| s.headers("outgoingAuth")) {
            Some(Ok(headers)) => headers,
            Some(Err(e)) => {
                tracing::error!(backend = %config.name, "{e}");
                http::HeaderMap::new()
            }
            None => http::HeaderMap::new(),
        };
        if config.ca_bundle_path.is_none() && headers.is_empty() {
            return (self.http.clone(), HttpFactory::default());
        }
        let bundle = match config.ca_bundle_path.as_deref().map(CaBundle::load) {
            Some(Ok(bundle)) => Some(bundle),
            Some(Err(e)) => {
                tracing::error!(backend = %config.name, "backends[].caBundlePath: {e}");
                None
            }
            None => None,
        };
        let http = BackendHttp::build(bundle.as_ref(), headers.clone()).unwrap_or_else(|e| {
            tracing::error!(backend = %config.name, "{e}");
            self.http.clone()
        });
        (http, HttpFactory { bundle, headers })
    }

    /// The `outgoingAuth` strategy of backend `name` (its own, else the default).
    pub fn outgoing_auth(&self, name: &str) -> Option<BackendAuthConfig> {
        self.outgoing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .resolve(name)
            .cloned()
    }

    /// Replace `outgoingAuth` for backends inserted from now on (reload re-inserts
    /// those whose strategy changed).
    pub fn set_outgoing_auth(&self, outgoing: OutgoingAuthConfig) {
        *self.outgoing.lock().unwrap_or_else(|e| e.into_inner()) = outgoing;
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<BackendClient>>> {
        self.backends.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<BackendClient>>> {
        self.backends.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Add a backend, or replace the one with the same name (its connection is closed).
    pub async fn upsert(&self, config: BackendConfig) {
        if let Some(old) = self.insert(config) {
            old.close().await;
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Remove a backend by name; returns whether it existed.
    pub async fn remove(&self, name: &str) -> bool {
        if let Some(pool) = self.pools_mut().remove(name) {
            pool.close_all();
        }
        let removed = self.write().remove(name);
        match removed {
            Some(old) => {
                old.close().await;
                self.version.send_modify(|v| *v += 1);
                true
            }
            None => false,
        }
    }

    /// The health settings new backends get.
    pub(crate) fn health_settings(&self) -> HealthSettings {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the health settings of every backend (configuration reload).
    pub(crate) fn set_health_settings(&self, settings: HealthSettings) {
        for backend in self.all() {
            backend.health().set_settings(settings.clone());
        }
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = settings;
    }

    /// All backends, sorted by name.
    pub fn all(&self) -> Vec<Arc<BackendClient>> {
        self.read().values().cloned().collect()
    }

    /// The backend called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<BackendClient>> {
        self.read().get(name).cloned()
    }

    /// The sorted backend names.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Notifications and connection changes from every backend.
    pub fn events(&self) -> broadcast::Receiver<BackendEvent> {
        self.events.subscribe()
    }

    /// A receiver that changes whenever a backend is added or removed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Close every connection.
    pub(crate) async fn close_all(&self) {
        for pool in std::mem::take(&mut *self.pools_mut()).into_values() {
            pool.close_all();
        }
        for backend in self.all() {
            backend.close().await;
        }
    }
}

/// Valid names only (validation refused the others).
fn header_names(names: &[String]) -> Arc<[HeaderName]> {
    names
        .iter()
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect()
}
