//! Propagation: from what backends announce to what clients are told.
//!
//! One task ties the pieces together: catalog changes become list-changed
//! notifications on every live session; a backend's `resources/updated` reaches
//! the sessions subscribed to that URI (only when that backend owns the URI in the
//! current catalog); and the set of URIs clients subscribe to is mirrored onto the
//! owning backends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            change = changes.recv() => match change {
                Ok(change) => {
                    sessions.notify(change, &aggregator.catalog());
                    sync_subscriptions(&aggregator, &sessions).await;
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
                    BackendEventKind::Connected => sync_subscriptions(&aggregator, &sessions).await,
                    _ => {}
                },
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            _ = sessions.subscriptions_changed() => sync_subscriptions(&aggregator, &sessions).await,
        }
    }
}

/// Mirror the subscribed URIs onto their owning backends.
pub(crate) async fn sync_subscriptions(aggregator: &Aggregator, sessions: &Sessions) {
    let catalog = aggregator.catalog();
    let mut per_backend: BTreeMap<Arc<str>, BTreeSet<String>> = BTreeMap::new();
    for uri in sessions.subscribed_uris() {
        if let Some(owner) = catalog.resource_owner(&uri) {
            per_backend.entry(owner.clone()).or_default().insert(uri);
        }
    }
    for backend in aggregator.registry().all() {
        let uris = per_backend.remove(backend.name()).unwrap_or_default();
        backend.set_subscriptions(uris).await;
    }
}
