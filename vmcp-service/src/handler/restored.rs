//! A Legacy session rebuilt on this replica from its Redis record
//! (`shared_sessions`): rmcp replays its `initialize`, then `on_initialized`
//! re-applies what the client set since (subscriptions, with the owning backends
//! subscribed again, and the log level). The same state is recorded as the client
//! sets it, before it is acknowledged, so a replica that dies loses none of it.
#![allow(deprecated)] // Log levels are deprecated by SEP-2577 but still part of both revisions.

use rmcp::model::{Extensions, LoggingLevel};
use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;

use super::VmcpHandler;

/// After the replayed `notifications/initialized` of a restored session: its
/// subscriptions and log level, as the record has them.
pub(super) async fn reapply(handler: &VmcpHandler, extensions: &Extensions, session: Option<&str>) {
    let (Some(replicas), Some(session)) = (&handler.replicas, session) else {
        return;
    };
    if extensions.get::<SessionRestoreMarker>().is_none() {
        return;
    }
    let Some(record) = replicas.take_restored(session) else {
        return;
    };
    if let Some(level) = record.level {
        handler
            .log_levels
            .set(&handler.sessions, session.to_owned(), level);
    }
    let catalog = handler.aggregator.catalog();
    let mut owners = std::collections::BTreeSet::new();
    for uri in &record.subscriptions {
        if handler.sessions.subscribe(session, uri)
            && let Some(owner) = catalog.resource_owner(uri)
        {
            owners.insert(owner.to_string());
        }
    }
    for owner in owners {
        Box::pin(crate::propagation::sync_backend(
            &handler.aggregator,
            &handler.sessions,
            &owner,
        ))
        .await;
    }
    tracing::debug!(
        subscriptions = record.subscriptions.len(),
        "restored a Legacy session from the shared store"
    );
}

/// Record a Legacy session's subscription (`on`) or its end in the shared store.
pub(super) async fn record_subscription(handler: &VmcpHandler, session: &str, uri: &str, on: bool) {
    if let Some(replicas) = &handler.replicas {
        replicas.subscription(session, uri, on).await;
    }
}

/// Record a Legacy session's log level in the shared store.
pub(super) async fn record_level(handler: &VmcpHandler, session: &str, level: LoggingLevel) {
    if let Some(replicas) = &handler.replicas {
        replicas.level(session, level).await;
    }
}
