//! The set of backends, which may change while the gateway runs.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::{broadcast, watch};

use vmcp_layers::tls::{CaBundle, TlsError};

use super::client::{BackendClient, BackendEvent};
use crate::config::BackendConfig;
use crate::health::HealthSettings;

/// The live set of backends, in sorted-name order.
///
/// Adding or removing a backend bumps a version that [`BackendRegistry::changes`]
/// exposes, so derived state (the catalog) knows to rebuild.
pub struct BackendRegistry {
    backends: RwLock<BTreeMap<String, Arc<BackendClient>>>,
    http: reqwest::Client,
    events: broadcast::Sender<BackendEvent>,
    version: watch::Sender<u64>,
    health: std::sync::Mutex<HealthSettings>,
}

impl std::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRegistry")
            .field("backends", &self.names())
            .finish_non_exhaustive()
    }
}

impl BackendRegistry {
    /// A registry with the given backends; no connection is opened yet.
    pub fn new(configs: impl IntoIterator<Item = BackendConfig>, health: HealthSettings) -> Self {
        let http = http_client(None).unwrap_or_else(|e| {
            tracing::error!("{e}; backends use reqwest's default client");
            reqwest::Client::new()
        });
        let (events, _) = broadcast::channel(1024);
        let registry = Self {
            backends: RwLock::new(BTreeMap::new()),
            http,
            events,
            version: watch::Sender::new(0),
            health: std::sync::Mutex::new(health),
        };
        for config in configs {
            registry.insert(config);
        }
        registry
    }

    fn insert(&self, config: BackendConfig) -> Option<Arc<BackendClient>> {
        let http = self.http_for(&config);
        let client = Arc::new(BackendClient::new(
            config,
            http,
            self.events.clone(),
            self.health_settings(),
        ));
        self.write().insert(client.name().to_string(), client)
    }

    /// The shared client, or for a backend with its own `caBundlePath` a client that
    /// also trusts that bundle. The bundle was checked at load; if it has gone since,
    /// the backend keeps the default trust and its TLS failure shows in `/status`.
    fn http_for(&self, config: &BackendConfig) -> reqwest::Client {
        let Some(path) = &config.ca_bundle_path else {
            return self.http.clone();
        };
        match CaBundle::load(path).and_then(|bundle| http_client(Some(&bundle))) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(backend = %config.name, "backends[].caBundlePath: {e}");
                self.http.clone()
            }
        }
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
    pub fn health_settings(&self) -> HealthSettings {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the health settings of every backend (configuration reload).
    pub fn set_health_settings(&self, settings: HealthSettings) {
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
    pub async fn close_all(&self) {
        for backend in self.all() {
            backend.close().await;
        }
    }
}

/// A backend HTTP client: the shared TLS rules plus `extra` trust anchors.
fn http_client(extra: Option<&CaBundle>) -> Result<reqwest::Client, TlsError> {
    vmcp_layers::tls::http_client(reqwest::Client::builder().pool_max_idle_per_host(64), extra)
}
