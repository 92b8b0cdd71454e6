//! Resource subscriptions and list-change listening on a backend connection.
//!
//! A Legacy backend gets `resources/subscribe`/`unsubscribe` for the difference; a
//! Modern backend gets one `subscriptions/listen` stream carrying its list changes
//! and the subscribed URIs, re-opened when the set changes and when it lags.

use std::collections::BTreeSet;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::service::ServiceError;
use vmcp_layers::McpRevision;

use super::{BackendClient, BackendEventKind, Connection, EventForwarder};

impl BackendClient {
    /// Set the URIs clients want `notifications/resources/updated` for. A Legacy
    /// connection subscribes and unsubscribes the difference; a Modern one re-opens
    /// its `subscriptions/listen` stream with the new set. Reconnects re-apply it.
    ///
    /// Calls are serialised: one that finds the set unchanged returns only after the
    /// call that changed it has applied it, so whoever acknowledges a client
    /// subscription after this returns knows the backend is subscribed.
    pub async fn set_subscriptions(&self, uris: BTreeSet<String>) {
        let _applying = self.applying_subscriptions.lock().await;
        let changed = {
            let mut current = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *current != uris;
            *current = uris;
            changed
        };
        if !changed {
            return;
        }
        let conn = self.connection.lock().await.clone();
        if let Some(conn) = conn {
            self.apply_subscriptions(&conn).await;
        }
    }

    // Legacy backends only know resources/subscribe, which rmcp marks deprecated.
    #[allow(deprecated)]
    pub(super) async fn apply_subscriptions(&self, conn: &Arc<Connection>) {
        let wanted = self
            .subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match conn.revision {
            McpRevision::Modern => self.start_listen(conn, wanted).await,
            McpRevision::Legacy => {
                let supports = conn
                    .capabilities
                    .resources
                    .as_ref()
                    .is_some_and(|r| r.subscribe == Some(true));
                if !supports {
                    return;
                }
                let mut subscribed = conn.subscribed.lock().await;
                for uri in wanted.difference(&subscribed.clone()) {
                    let params = rmcp::model::SubscribeRequestParams::new(uri.clone());
                    match conn.service.subscribe(params).await {
                        Ok(()) => {
                            subscribed.insert(uri.clone());
                        }
                        Err(e) => {
                            tracing::warn!(backend = %self.name, %uri, "resources/subscribe failed: {e}")
                        }
                    }
                }
                for uri in subscribed.clone().difference(&wanted) {
                    let params = rmcp::model::UnsubscribeRequestParams::new(uri.clone());
                    if let Err(e) = conn.service.unsubscribe(params).await {
                        tracing::warn!(backend = %self.name, %uri, "resources/unsubscribe failed: {e}");
                    }
                    subscribed.remove(uri);
                }
            }
        }
    }

    /// (Re)open the listen stream of a Modern connection: list changes always, plus
    /// the subscribed URIs. Returns once the backend acknowledged it, so a caller that
    /// then acknowledges a client subscription misses no update. Its notifications
    /// become backend events.
    async fn start_listen(&self, conn: &Arc<Connection>, uris: BTreeSet<String>) {
        let mut filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if !uris.is_empty() {
            filter.resource_subscriptions = Some(uris.into_iter().collect());
        }
        let peer = conn.service.peer().clone();
        let mut subscription = match listen(&peer, &filter).await {
            Ok(subscription) => subscription,
            Err(e) => {
                tracing::debug!(backend = %self.name, "subscriptions/listen not available: {e}");
                return;
            }
        };
        let forwarder = self.forwarder();
        let task = tokio::spawn(async move {
            loop {
                match subscription.next().await {
                    Ok(Some(notification)) => forwarder.forward(notification),
                    Err(ServiceError::SubscriptionLagged { .. }) => {
                        // Something may have been missed: re-list everything from
                        // this backend and listen again.
                        tracing::warn!(backend = %forwarder.backend, "backend listen stream lagged; resyncing");
                        for kind in [
                            BackendEventKind::ToolsChanged,
                            BackendEventKind::PromptsChanged,
                            BackendEventKind::ResourcesChanged,
                        ] {
                            forwarder.emit(kind);
                        }
                        match listen(&peer, &filter).await {
                            Ok(again) => subscription = again,
                            Err(_) => return,
                        }
                    }
                    Ok(None) | Err(_) => return,
                }
            }
        });
        let old = conn
            .listen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }
}

impl EventForwarder {
    /// Turn a notification from a backend's listen stream (or from an answer's event
    /// stream, see `direct`) into an event.
    pub(super) fn forward(&self, notification: rmcp::model::ServerNotification) {
        use rmcp::model::ServerNotification as N;
        match notification {
            N::ToolListChangedNotification(_) => self.emit(BackendEventKind::ToolsChanged),
            N::PromptListChangedNotification(_) => self.emit(BackendEventKind::PromptsChanged),
            N::ResourceListChangedNotification(_) => self.emit(BackendEventKind::ResourcesChanged),
            N::ResourceUpdatedNotification(n) => {
                self.emit(BackendEventKind::ResourceUpdated(n.params.uri))
            }
            _ => {}
        }
    }
}

/// Open a listen stream with room for a burst of notifications.
async fn listen(
    peer: &rmcp::Peer<RoleClient>,
    filter: &rmcp::model::SubscriptionFilter,
) -> Result<rmcp::service::Subscription, ServiceError> {
    const BUFFER: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(1024) {
        Some(n) => n,
        None => std::num::NonZeroUsize::MIN,
    };
    peer.listen_with_capacity(filter.clone(), BUFFER).await
}
