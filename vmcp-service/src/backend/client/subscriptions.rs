//! Resource subscriptions and list-change listening on a backend connection.
//!
//! A Legacy backend gets `resources/subscribe`/`unsubscribe` for the difference; a
//! Modern backend gets one `subscriptions/listen` stream carrying its list changes
//! and the subscribed URIs, re-opened when the set changes and when it lags.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::ServiceError;
use vmcp_layers::McpRevision;
use vmcp_layers::shown::shown;

use super::{BackendClient, BackendEventKind, Connection, EventForwarder};

impl BackendClient {
    /// Set the URIs clients want `notifications/resources/updated` for. A Legacy
    /// connection subscribes and unsubscribes the difference; a Modern one re-opens
    /// its `subscriptions/listen` stream with the new set. Reconnects re-apply it.
    ///
    /// Calls are serialised: one that finds the set unchanged returns only after the
    /// call that changed it has applied it, so whoever acknowledges a client
    /// subscription after this returns knows the backend is subscribed. Every wait
    /// (for that call, for the connection, for each backend request) is bounded by
    /// `timeout`: a stalled backend delays only its own subscriptions, and what did
    /// not go through is retried by the next call.
    ///
    /// `uris` is read once this call's turn comes, so a call that waited behind
    /// another applies the set as it is then, never one older than the set the call
    /// before it applied.
    pub async fn set_subscriptions(
        &self,
        uris: impl FnOnce() -> BTreeSet<String>,
        timeout: Duration,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        let Ok(_applying) =
            tokio::time::timeout_at(deadline, self.applying_subscriptions.lock()).await
        else {
            tracing::warn!(backend = %self.name, "subscriptions not applied: backend busy past {timeout:?}");
            return;
        };
        let uris = uris();
        let changed = {
            let mut current = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *current != uris;
            *current = uris;
            changed
        };
        if !changed && !self.subscriptions_incomplete.load(Ordering::Acquire) {
            return;
        }
        let Ok(conn) = tokio::time::timeout_at(deadline, self.connection.lock()).await else {
            self.subscriptions_incomplete.store(true, Ordering::Release);
            return;
        };
        let conn = conn.clone();
        if let Some(conn) = conn {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.apply_subscriptions(&conn, remaining).await;
        }
    }

    /// Apply the wanted set to `conn`, each backend request bounded by `timeout`;
    /// records whether everything went through.
    // Legacy backends only know resources/subscribe, which rmcp marks deprecated.
    #[allow(deprecated)]
    pub(super) async fn apply_subscriptions(&self, conn: &Arc<Connection>, timeout: Duration) {
        let wanted = self
            .subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let complete = match conn.revision {
            McpRevision::Modern => self.start_listen(conn, wanted, timeout).await,
            McpRevision::Legacy => {
                let supports = conn
                    .capabilities
                    .resources
                    .as_ref()
                    .is_some_and(|r| r.subscribe == Some(true));
                if !supports {
                    return;
                }
                let Ok(mut subscribed) =
                    tokio::time::timeout(timeout, conn.subscribed.lock()).await
                else {
                    self.subscriptions_incomplete.store(true, Ordering::Release);
                    return;
                };
                let mut complete = true;
                for uri in wanted.difference(&subscribed.clone()) {
                    let params = rmcp::model::SubscribeRequestParams::new(uri.clone());
                    if bounded(
                        &self.name,
                        "resources/subscribe",
                        uri,
                        timeout,
                        conn.service.subscribe(params),
                    )
                    .await
                    {
                        subscribed.insert(uri.clone());
                    } else {
                        complete = false;
                    }
                }
                for uri in subscribed.clone().difference(&wanted) {
                    let params = rmcp::model::UnsubscribeRequestParams::new(uri.clone());
                    // Forgotten either way: an unsubscribe that failed leaves at worst
                    // updates nobody is sent.
                    bounded(
                        &self.name,
                        "resources/unsubscribe",
                        uri,
                        timeout,
                        conn.service.unsubscribe(params),
                    )
                    .await;
                    subscribed.remove(uri);
                }
                complete
            }
        };
        self.subscriptions_incomplete
            .store(!complete, Ordering::Release);
    }

    /// (Re)open the listen stream of a Modern connection: list changes always, plus
    /// the subscribed URIs. Returns once the backend acknowledged it, so a caller that
    /// then acknowledges a client subscription misses no update. Its notifications
    /// become backend events.
    async fn start_listen(
        &self,
        conn: &Arc<Connection>,
        uris: BTreeSet<String>,
        timeout: Duration,
    ) -> bool {
        let mut filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        if !uris.is_empty() {
            filter.resource_subscriptions = Some(uris.into_iter().collect());
        }
        let peer = conn.service.peer().clone();
        let mut subscription = match tokio::time::timeout(timeout, listen(&peer, &filter)).await {
            Ok(Ok(subscription)) => subscription,
            Ok(Err(e)) => {
                // Not retried: the backend answered, it has no listen.
                tracing::debug!(backend = %self.name, "subscriptions/listen not available: {e}");
                return true;
            }
            Err(_) => {
                tracing::warn!(backend = %self.name, "subscriptions/listen timed out after {timeout:?}");
                return false;
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
        true
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

/// `request` within `timeout`; whether it succeeded (failures are logged).
async fn bounded(
    backend: &str,
    what: &str,
    uri: &str,
    timeout: Duration,
    request: impl std::future::Future<Output = Result<(), ServiceError>>,
) -> bool {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(%backend, uri = %shown(uri), "{what} failed: {}", shown(&e));
            false
        }
        Err(_) => {
            tracing::warn!(%backend, uri = %shown(uri), "{what} timed out after {timeout:?}");
            false
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
