//! Propagation: from what backends announce to what clients are told.
//!
//! One task ties the pieces together: catalog changes become list-changed
//! notifications on every live session; a backend's `resources/updated` reaches
//! the sessions subscribed to that URI (only when that backend owns the URI in the
//! current catalog); and the set of URIs clients subscribe to is mirrored onto the
//! owning backends.
//!
//! The loop itself never waits on a backend: mirroring subscriptions is handed to
//! one worker per backend (started on demand, coalescing what piles up while it
//! runs, each backend request bounded by that backend's call timeout), so a stalled
//! backend delays only its own subscriptions, never another backend's
//! notifications.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::aggregator::{Aggregator, CatalogChange};
use crate::backend::BackendEventKind;
use crate::sessions::Sessions;

/// Run propagation until `shutdown`.
pub(crate) async fn run(
    aggregator: Arc<Aggregator>,
    sessions: Arc<Sessions>,
    shutdown: CancellationToken,
) {
    let mut changes = aggregator.changes();
    let mut events = aggregator.registry().events();
    let sync = Syncer::new(aggregator.clone(), sessions.clone());
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            change = changes.recv() => match change {
                Ok(change) => {
                    sessions.notify(change, &aggregator.catalog());
                    sync.all();
                }
                Err(RecvError::Lagged(_)) => sessions.notify(
                    CatalogChange {
                        tools: true,
                        prompts: true,
                        resources: true,
                    },
                    &aggregator.catalog(),
                ),
                Err(RecvError::Closed) => return,
            },
            event = events.recv() => match event {
                Ok(event) => match event.kind {
                    BackendEventKind::ResourceUpdated(uri) => {
                        let catalog = aggregator.catalog();
                        if catalog.resource_owner(&uri).is_some_and(|owner| *owner == event.backend) {
                            sessions.resource_updated(&uri, &event.backend);
                        }
                    }
                    BackendEventKind::Connected => sync.one(&event.backend),
                    _ => {}
                },
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            _ = sessions.subscriptions_changed() => sync.all(),
        }
    }
}

/// The subscription mirroring workers, one per backend.
struct Syncer {
    aggregator: Arc<Aggregator>,
    sessions: Arc<Sessions>,
    workers: Mutex<BTreeMap<Arc<str>, Arc<Worker>>>,
}

/// One backend's worker state: `pending` asks for another pass, `running` says a
/// worker task is alive (at most one per backend).
#[derive(Default)]
struct Worker {
    pending: AtomicBool,
    running: AtomicBool,
}

impl Syncer {
    fn new(aggregator: Arc<Aggregator>, sessions: Arc<Sessions>) -> Arc<Self> {
        Arc::new(Self {
            aggregator,
            sessions,
            workers: Mutex::new(BTreeMap::new()),
        })
    }

    /// Re-mirror every backend.
    fn all(self: &Arc<Self>) {
        for backend in self.aggregator.registry().names() {
            self.one(&Arc::from(backend.as_str()));
        }
    }

    /// Re-mirror `backend`, in its worker.
    fn one(self: &Arc<Self>, backend: &Arc<str>) {
        let worker = {
            let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
            // Forget workers of removed backends (idle ones only).
            if workers.len() > self.aggregator.registry().names().len() + 8 {
                workers.retain(|_, w| w.running.load(Ordering::Acquire));
            }
            workers.entry(backend.clone()).or_default().clone()
        };
        worker.pending.store(true, Ordering::Release);
        if !worker.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().work(backend.clone(), worker));
        }
    }

    async fn work(self: Arc<Self>, backend: Arc<str>, worker: Arc<Worker>) {
        loop {
            if !worker.pending.swap(false, Ordering::AcqRel) {
                worker.running.store(false, Ordering::Release);
                // A request may have landed between the swap and the store.
                if worker.pending.load(Ordering::Acquire)
                    && !worker.running.swap(true, Ordering::AcqRel)
                {
                    continue;
                }
                return;
            }
            sync_backend(&self.aggregator, &self.sessions, &backend).await;
        }
    }
}

/// Mirror onto `backend` the subscribed URIs it owns, within its call timeout.
pub(crate) async fn sync_backend(aggregator: &Aggregator, sessions: &Sessions, backend: &str) {
    let Some(client) = aggregator.registry().get(backend) else {
        return;
    };
    let uris = || -> BTreeSet<String> {
        let catalog = aggregator.catalog();
        sessions
            .subscribed_uris()
            .into_iter()
            .filter(|uri| catalog.resource_owner(uri).is_some_and(|o| &**o == backend))
            .collect()
    };
    let timeout = aggregator.config().call_timeout(backend);
    client.set_subscriptions(uris, timeout).await;
}
