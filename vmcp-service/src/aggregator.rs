//! Aggregation: fan out to every backend, keep what each reported, and build the
//! current [`Catalog`] from it.
//!
//! Each backend is listed in parallel under its own timeout, so a slow or dead
//! backend delays nobody: its capabilities are simply absent (and logged). Reports
//! are kept per backend, so a change on one backend re-lists only that backend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::Mutex;

use crate::backend::{BackendCapabilities, BackendEventKind, BackendRegistry};
use crate::catalog::{BuildReport, Catalog};
use crate::config::VmcpConfig;

/// Owns the current catalog and refreshes it.
pub struct Aggregator {
    config: Arc<VmcpConfig>,
    registry: Arc<BackendRegistry>,
    current: RwLock<Arc<Catalog>>,
    /// Last good report per backend; a backend that failed its last listing is absent.
    reports: Mutex<BTreeMap<Arc<str>, BackendCapabilities>>,
    /// Backends whose last listing failed, retried in the background.
    failed: std::sync::Mutex<BTreeSet<String>>,
    rebuilds: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    /// An aggregator with an empty catalog; call [`Aggregator::refresh_all`] to fill it.
    pub fn new(config: Arc<VmcpConfig>, registry: Arc<BackendRegistry>) -> Self {
        Self {
            config,
            registry,
            current: RwLock::new(Arc::new(Catalog::default())),
            reports: Mutex::new(BTreeMap::new()),
            failed: std::sync::Mutex::new(BTreeSet::new()),
            rebuilds: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The current catalog (a cheap `Arc` clone; never blocks on backends).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<VmcpConfig> {
        &self.config
    }

    /// The backend registry.
    pub fn registry(&self) -> &Arc<BackendRegistry> {
        &self.registry
    }

    /// How many times the catalog has been rebuilt (for tests and metrics).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Backends whose last listing failed.
    pub fn failed_backends(&self) -> Vec<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Re-list every backend and rebuild.
    pub async fn refresh_all(&self) -> BuildReport {
        self.refresh(None).await
    }

    /// Re-list `only` (or every backend when `None`), drop reports of backends that
    /// left the registry, and rebuild the catalog.
    pub async fn refresh(&self, only: Option<&BTreeSet<String>>) -> BuildReport {
        let mut reports = self.reports.lock().await;
        let backends = self.registry.all();
        let live: BTreeSet<&str> = backends.iter().map(|b| &**b.name()).collect();
        reports.retain(|name, _| live.contains(&**name));
        let timeout = self.config.discovery_timeout();
        let targets: Vec<_> = backends
            .iter()
            .filter(|b| only.is_none_or(|set| set.contains(&**b.name())))
            .collect();
        let results = join_all(targets.iter().map(|backend| async move {
            (backend.name().clone(), backend.capabilities(timeout).await)
        }))
        .await;
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.retain(|name| live.contains(name.as_str()));
        for (name, result) in results {
            match result {
                Ok(caps) => {
                    failed.remove(&*name);
                    reports.insert(name, caps);
                }
                Err(error) => {
                    tracing::warn!(backend = %name, "backend left out of the catalog: {error}");
                    failed.insert(name.to_string());
                    reports.remove(&name);
                }
            }
        }
        drop(failed);
        let input = reports
            .iter()
            .map(|(name, caps)| (name.clone(), caps.clone()))
            .collect();
        let (catalog, report) = Catalog::build(&self.config, input);
        for collision in &report.unresolved {
            tracing::error!("unresolved tool collision (dropped): {collision}");
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
        self.rebuilds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        report
    }

    /// Keep the catalog current until `shutdown` fires: re-list a backend when it
    /// announces a list change or loses its connection, re-list everything when the
    /// registry changes, and retry failed backends with backoff.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut events = self.registry.events();
        let mut changes = self.registry.changes();
        let mut retry = Duration::from_secs(1);
        loop {
            let has_failed = !self.failed_backends().is_empty();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() { return; }
                    self.refresh_all().await;
                }
                event = events.recv() => match event {
                    Ok(event) => {
                        if matches!(event.kind, BackendEventKind::Connected | BackendEventKind::ResourceUpdated(_)) {
                            continue;
                        }
                        // Coalesce a burst: drain what is already queued into one refresh.
                        let mut only = BTreeSet::from([event.backend.to_string()]);
                        while let Ok(more) = events.try_recv() {
                            if !matches!(more.kind, BackendEventKind::Connected | BackendEventKind::ResourceUpdated(_)) {
                                only.insert(more.backend.to_string());
                            }
                        }
                        self.refresh(Some(&only)).await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        self.refresh_all().await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = tokio::time::sleep(retry), if has_failed => {
                    let failed: BTreeSet<String> = self.failed_backends().into_iter().collect();
                    self.refresh(Some(&failed)).await;
                    retry = if self.failed_backends().is_empty() {
                        Duration::from_secs(1)
                    } else {
                        (retry * 2).min(Duration::from_secs(30))
                    };
                }
            }
        }
    }
}
