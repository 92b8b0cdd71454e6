//! Aggregation: fan out to every backend, keep what each reported, and build the
//! current [`Catalog`] from the backends that are advertisable.
//!
//! Each backend is listed in parallel under its own timeout, so a slow or dead
//! backend delays nobody. Reports are kept per backend: a change on one backend
//! re-lists only that backend, and a backend whose health flips is added to or
//! removed from the catalog without re-listing anybody. Every rebuild that changes
//! what clients see is announced as a [`CatalogChange`].

pub(crate) mod monitor;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use futures::future::{BoxFuture, join_all};
use tokio::sync::{Mutex, broadcast};
use tokio::time::Instant;
use vmcp_layers::context::{CapabilityProvider, CatalogView, DiscoveryError, Identity};

use crate::backend::{BackendCapabilities, BackendEventKind, BackendRegistry};
use crate::catalog::{BuildReport, Catalog, CompositeProblem};
use crate::composite::Workflows;
use crate::config::VmcpConfig;

/// Hands out the aggregator's current catalog as every caller's capability view (the
/// discovery layer's [`CapabilityProvider`]), so no request waits on a backend
/// fan-out: the catalog is kept current from backend notifications.
#[derive(Debug, Clone)]
pub struct CatalogProvider(pub Arc<Aggregator>);

impl CapabilityProvider for CatalogProvider {
    fn view(
        &self,
        _identity: &Identity,
    ) -> BoxFuture<'static, Result<Arc<dyn CatalogView>, DiscoveryError>> {
        let catalog: Arc<dyn CatalogView> = self.0.catalog();
        Box::pin(futures::future::ready(Ok(catalog)))
    }
}

/// The shortest time between two event-driven re-lists of one backend: a storm of
/// list-change notifications costs at most one re-list per this interval, plus one
/// trailing re-list that picks up the last change.
pub(crate) const RELIST_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// How often the pin store (`integrity.path`, or Redis) is checked for changes.
const PIN_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Which kinds of the advertised catalog changed in a rebuild.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatalogChange {
    /// `tools/list` changed.
    pub tools: bool,
    /// `prompts/list` changed.
    pub prompts: bool,
    /// `resources/list` or `resources/templates/list` changed.
    pub resources: bool,
}

impl CatalogChange {
    /// Whether anything changed.
    pub fn any(self) -> bool {
        self.tools || self.prompts || self.resources
    }

    fn between(old: &Catalog, new: &Catalog) -> Self {
        Self {
            tools: old.tools() != new.tools(),
            prompts: old.prompts() != new.prompts(),
            resources: old.resources() != new.resources() || old.templates() != new.templates(),
        }
    }
}

/// Owns the current catalog and keeps it current.
pub struct Aggregator {
    config: RwLock<Arc<VmcpConfig>>,
    /// The composite tools of `config`, added to every catalog.
    workflows: RwLock<Arc<Workflows>>,
    registry: Arc<BackendRegistry>,
    current: RwLock<Arc<Catalog>>,
    /// Last good report per backend, kept while the backend stays in the registry.
    reports: Mutex<BTreeMap<Arc<str>, BackendCapabilities>>,
    /// Backends whose last listing failed.
    failed: std::sync::Mutex<BTreeSet<String>>,
    /// Tool collisions the last build left unresolved (shown on the status page).
    unresolved: std::sync::Mutex<Vec<String>>,
    /// Composite step tools the last build did not find (shown on the status page).
    missing_step_tools: std::sync::Mutex<Vec<String>>,
    rebuilds: std::sync::atomic::AtomicU64,
    listings: std::sync::atomic::AtomicU64,
    changes: broadcast::Sender<CatalogChange>,
    ready: tokio::sync::watch::Sender<bool>,
    /// Pins of backend definitions (`integrity:`), checked on every build.
    integrity: crate::integrity::Integrity,
    /// `rateLimiting`: its buckets outlive reloads.
    limiter: crate::rate_limit::RateLimiter,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    /// An aggregator with an empty catalog; call [`Aggregator::refresh_all`] to fill it.
    pub(crate) fn new(config: Arc<VmcpConfig>, registry: Arc<BackendRegistry>) -> Self {
        Self {
            limiter: crate::rate_limit::RateLimiter::new(&config),
            workflows: RwLock::new(Arc::new(Workflows::from_config(&config))),
            config: RwLock::new(config),
            registry,
            current: RwLock::new(Arc::new(Catalog::default())),
            reports: Mutex::new(BTreeMap::new()),
            failed: std::sync::Mutex::new(BTreeSet::new()),
            unresolved: std::sync::Mutex::new(Vec::new()),
            missing_step_tools: std::sync::Mutex::new(Vec::new()),
            rebuilds: std::sync::atomic::AtomicU64::new(0),
            listings: std::sync::atomic::AtomicU64::new(0),
            changes: broadcast::channel(64).0,
            ready: tokio::sync::watch::Sender::new(false),
            integrity: crate::integrity::Integrity::default(),
        }
    }

    /// The current catalog (a cheap `Arc` clone; never blocks on backends).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<VmcpConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the configuration (reload) and rebuild from the kept reports.
    pub(crate) async fn set_config(&self, config: Arc<VmcpConfig>) -> BuildReport {
        *self.workflows.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(Workflows::from_config(&config));
        self.limiter.reconfigure(&config);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        self.rebuild().await
    }

    /// The composite tools of the current configuration.
    pub(crate) fn workflows(&self) -> Arc<Workflows> {
        self.workflows
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The rate limiter (`rateLimiting`).
    pub(crate) fn limiter(&self) -> &crate::rate_limit::RateLimiter {
        &self.limiter
    }

    /// The backend registry.
    pub fn registry(&self) -> &Arc<BackendRegistry> {
        &self.registry
    }

    /// Catalog rebuilds so far (each rebuild is one re-aggregation).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Backend listings (one backend's full list fan-out) so far.
    pub fn listings(&self) -> u64 {
        self.listings.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Announcements of catalog changes.
    pub fn changes(&self) -> broadcast::Receiver<CatalogChange> {
        self.changes.subscribe()
    }

    /// Becomes `true` once the first aggregation finished.
    pub fn ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// Tool integrity: the pins' findings, and where changes are recorded.
    pub fn integrity(&self) -> &crate::integrity::Integrity {
        &self.integrity
    }

    /// The tool collisions the last catalog build left unresolved (and dropped).
    pub fn unresolved(&self) -> Vec<String> {
        self.unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Composite step tools the last catalog build did not find: each such step
    /// fails when it runs.
    pub fn missing_step_tools(&self) -> Vec<String> {
        self.missing_step_tools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
        let report = self.refresh(None).await;
        self.ready.send_replace(true);
        report
    }

    /// Re-list `only` (or every backend when `None`), forget backends that left the
    /// registry, and rebuild.
    pub(crate) async fn refresh(&self, only: Option<&BTreeSet<String>>) -> BuildReport {
        let mut reports = self.reports.lock().await;
        let backends = self.registry.all();
        let live: BTreeSet<&str> = backends.iter().map(|b| &**b.name()).collect();
        reports.retain(|name, _| live.contains(&**name));
        let timeout = self.config().discovery_timeout();
        let targets: Vec<_> = backends
            .iter()
            .filter(|b| only.is_none_or(|set| set.contains(&**b.name())))
            .collect();
        let registry = &self.registry;
        let results = join_all(targets.iter().map(|backend| async move {
            let mut listed = backend.capabilities(timeout).await;
            // A Legacy backend may offer more to capable clients: list it again as one
            // (after the first listing its revision is known).
            if let Ok(shared) = listed.as_mut()
                && let Some(full) = registry.full_lister(backend)
            {
                match full.capabilities(timeout).await {
                    Ok(capable) => crate::backend::bridge::union(shared, capable),
                    Err(error) => {
                        tracing::debug!(backend = %backend.name(), "listing as a capable client failed: {error}");
                    }
                }
            }
            (backend.name().clone(), listed)
        }))
        .await;
        self.listings
            .fetch_add(results.len() as u64, std::sync::atomic::Ordering::Relaxed);
        {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.retain(|name| live.contains(name.as_str()));
            for (name, result) in results {
                match result {
                    Ok(caps) => {
                        failed.remove(&*name);
                        reports.insert(name, caps);
                    }
                    Err(error) => {
                        // The last good report stays: health decides when it goes.
                        // Health has logged the failure (once per change).
                        tracing::debug!(backend = %name, "backend listing failed: {error}");
                        failed.insert(name.to_string());
                    }
                }
            }
        }
        self.build(&reports).await
    }

    /// Rebuild from the kept reports (health or config changed; nothing re-listed).
    pub(crate) async fn rebuild(&self) -> BuildReport {
        let reports = self.reports.lock().await;
        self.build(&reports).await
    }

    /// Async only for the pin store's I/O (`integrity:`), which runs off the runtime;
    /// builds are serialized by the `reports` lock the callers hold.
    async fn build(&self, reports: &BTreeMap<Arc<str>, BackendCapabilities>) -> BuildReport {
        let config = self.config();
        let mut input: Vec<_> = reports
            .iter()
            .filter(|(name, _)| {
                self.registry
                    .get(name)
                    .is_some_and(|b| b.health().status().advertisable())
            })
            .map(|(name, caps)| (name.clone(), caps.clone()))
            .collect();
        // On the backends' own definitions, before overrides and names: what `block`
        // hides is then absent everywhere, as if the backend never listed it.
        self.integrity
            .check(config.integrity.as_ref(), &mut input)
            .await;
        let (mut catalog, mut report) = Catalog::build(&config, input);
        let workflows = self.workflows();
        let composites = workflows.advertise(&catalog);
        report.composites = catalog.add_local_tools(composites);
        report
            .composites
            .extend(workflows.missing_step_tools(&catalog));
        let answered = catalog.backends();
        let every_backend_answered = self.every_backend_in(&catalog);
        let mut missing = Vec::new();
        let mut displaced = Vec::new();
        for problem in &report.composites {
            match problem {
                CompositeProblem::MissingStepTool { .. } => missing.push(problem.to_string()),
                CompositeProblem::NameTaken { .. } => displaced.push(problem.to_string()),
            }
        }
        {
            let mut known = self
                .missing_step_tools
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // Logged once per change, not on every rebuild: at ERROR when backends
            // that answered contradict the composite, at WARN while the backend that
            // may offer the tool has not answered.
            for problem in report
                .composites
                .iter()
                .filter(|p| matches!(p, CompositeProblem::MissingStepTool { .. }))
                .filter(|p| !known.contains(&p.to_string()))
            {
                if problem.is_certain(answered, every_backend_answered) {
                    tracing::error!("{problem}");
                } else {
                    tracing::warn!("{problem} (its backend has not answered yet)");
                }
            }
            *known = missing;
        }
        for collision in report.unresolved.iter().chain(&displaced) {
            tracing::error!("unresolved tool collision (dropped): {collision}");
        }
        {
            let mut unresolved = self.unresolved.lock().unwrap_or_else(|e| e.into_inner());
            report.unresolved.clone_into(&mut unresolved);
            unresolved.extend(displaced);
        }
        crate::code_mode::check_catalog(&config, &catalog);
        let catalog = Arc::new(catalog);
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|e| e.into_inner()),
            catalog.clone(),
        );
        self.rebuilds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let change = CatalogChange::between(&old, &catalog);
        if change.any() {
            let _ = self.changes.send(change);
        }
        report
    }

    /// Whether every registered backend contributed to `catalog` (answered its
    /// listing and is advertisable).
    fn every_backend_in(&self, catalog: &Catalog) -> bool {
        let answered = catalog.backends();
        self.registry
            .names()
            .iter()
            .all(|name| answered.iter().any(|a| **a == **name))
    }

    /// The composite problems of `report` that the backends in the current catalog
    /// make certain (see [`CompositeProblem::is_certain`]).
    pub(crate) fn certain(&self, report: &BuildReport) -> Vec<CompositeProblem> {
        let catalog = self.catalog();
        let every = self.every_backend_in(&catalog);
        report
            .composites
            .iter()
            .filter(|p| p.is_certain(catalog.backends(), every))
            .cloned()
            .collect()
    }

    /// Keep the catalog current until `shutdown` fires.
    ///
    /// - A backend's list-change notification or lost connection re-lists that
    ///   backend; a burst of them is drained into one re-list.
    /// - A registry change re-lists every backend.
    /// - A health flip rebuilds without re-listing (re-listing a backend that has
    ///   recovered), debounced to the health-check interval: the first flip applies
    ///   at once, later ones within the interval are coalesced into one rebuild at
    ///   its end.
    pub(crate) async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut events = self.registry.events();
        let mut changes = self.registry.changes();
        let mut last_health_rebuild: Option<Instant> = None;
        let mut health_pending = false;
        // Per-backend re-list pacing: at most one re-list per RELIST_INTERVAL; events
        // in between are coalesced into one trailing re-list.
        let mut last_relist: BTreeMap<String, Instant> = BTreeMap::new();
        let mut relist_pending: BTreeSet<String> = BTreeSet::new();
        // Backends whose last listing failed are re-listed once per check interval:
        // one that recovered before its health ever flipped would otherwise keep its
        // stale report.
        let mut last_retry = Instant::now();
        // The pin file is polled (one `stat`) so an approval applies without a restart.
        let mut pins = tokio::time::interval(PIN_POLL_INTERVAL);
        pins.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let interval = self.registry.health_settings().interval;
            let retry_due = last_retry + interval;
            let has_failed = !self
                .failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
            let trailing = last_health_rebuild.map_or_else(Instant::now, |at| at + interval);
            let relist_due = relist_pending
                .iter()
                .filter_map(|b| last_relist.get(b))
                .min()
                .map_or_else(Instant::now, |at| *at + RELIST_INTERVAL);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = pins.tick() => {
                    if self.integrity.stale().await {
                        self.rebuild().await;
                    }
                }
                changed = changes.changed() => {
                    if changed.is_err() { return; }
                    self.refresh_all().await;
                }
                _ = tokio::time::sleep_until(retry_due), if has_failed => {
                    last_retry = Instant::now();
                    let failed: BTreeSet<String> = self.failed_backends().into_iter().collect();
                    self.refresh(Some(&failed)).await;
                }
                _ = tokio::time::sleep_until(trailing), if health_pending => {
                    health_pending = false;
                    last_health_rebuild = Some(Instant::now());
                    self.apply_health().await;
                }
                _ = tokio::time::sleep_until(relist_due), if !relist_pending.is_empty() => {
                    let now = Instant::now();
                    let due: BTreeSet<String> = relist_pending
                        .iter()
                        .filter(|b| last_relist.get(*b).is_none_or(|at| now >= *at + RELIST_INTERVAL))
                        .cloned()
                        .collect();
                    relist_pending.retain(|b| !due.contains(b));
                    for b in &due {
                        last_relist.insert(b.clone(), now);
                    }
                    self.refresh(Some(&due)).await;
                }
                event = events.recv() => {
                    let mut relist = BTreeSet::new();
                    let mut health = false;
                    let mut lagged = false;
                    let mut note = |kind: BackendEventKind, backend: &str| match kind {
                        BackendEventKind::HealthChanged => health = true,
                        BackendEventKind::ToolsChanged
                        | BackendEventKind::ResourcesChanged
                        | BackendEventKind::PromptsChanged
                        | BackendEventKind::Disconnected => {
                            relist.insert(backend.to_owned());
                        }
                        BackendEventKind::Connected | BackendEventKind::ResourceUpdated(_) => {}
                    };
                    match event {
                        Ok(event) => note(event.kind, &event.backend),
                        Err(broadcast::error::RecvError::Lagged(_)) => lagged = true,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    // Coalesce a burst: drain what is already queued.
                    loop {
                        match events.try_recv() {
                            Ok(event) => note(event.kind, &event.backend),
                            Err(broadcast::error::TryRecvError::Lagged(_)) => lagged = true,
                            Err(_) => break,
                        }
                    }
                    if lagged {
                        self.refresh_all().await;
                        continue;
                    }
                    let now = Instant::now();
                    let (now_due, later): (BTreeSet<String>, BTreeSet<String>) = relist
                        .into_iter()
                        .partition(|b| last_relist.get(b).is_none_or(|at| now >= *at + RELIST_INTERVAL));
                    relist_pending.extend(later);
                    if !now_due.is_empty() {
                        for b in &now_due {
                            last_relist.insert(b.clone(), now);
                            relist_pending.remove(b);
                        }
                        self.refresh(Some(&now_due)).await;
                    }
                    if health {
                        let due = last_health_rebuild.is_none_or(|at| at.elapsed() >= interval);
                        if due {
                            last_health_rebuild = Some(Instant::now());
                            self.apply_health().await;
                        } else {
                            health_pending = true;
                        }
                    }
                }
            }
            last_relist.retain(|b, _| self.registry.get(b).is_some());
        }
    }

    /// Rebuild after health flips, first re-listing advertisable backends whose last
    /// listing failed (they have recovered, and their capabilities may differ).
    async fn apply_health(&self) {
        let recovered: BTreeSet<String> = self
            .failed_backends()
            .into_iter()
            .filter(|name| {
                self.registry
                    .get(name)
                    .is_some_and(|b| b.health().status().advertisable())
            })
            .collect();
        if recovered.is_empty() {
            self.rebuild().await;
        } else {
            self.refresh(Some(&recovered)).await;
        }
    }
}
