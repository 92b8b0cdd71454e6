//! [`DemoControl`]: changing a running demo backend and announcing it.

use std::sync::Arc;

use super::{DemoSpec, Hub};

/// Which list a [`DemoControl`] change touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoList {
    /// `tools/list`
    Tools,
    /// `resources/list` (and templates)
    Resources,
    /// `prompts/list`
    Prompts,
}

/// Changes a running demo backend and announces the changes, like a real server
/// whose capabilities change at runtime.
#[derive(Debug, Clone)]
pub struct DemoControl {
    pub(super) spec: Arc<std::sync::RwLock<DemoSpec>>,
    pub(super) hub: Arc<Hub>,
}

impl DemoControl {
    /// Edit the spec, then send the list-changed notification for `list`.
    pub async fn change(&self, list: DemoList, edit: impl FnOnce(&mut DemoSpec)) {
        edit(&mut self.spec.write().unwrap_or_else(|e| e.into_inner()));
        self.announce(list).await;
    }

    /// Send the list-changed notification for `list` to every session and stream.
    pub async fn announce(&self, list: DemoList) {
        for peer in self.legacy() {
            self.count(match list {
                DemoList::Tools => peer.notify_tool_list_changed().await,
                DemoList::Resources => peer.notify_resource_list_changed().await,
                DemoList::Prompts => peer.notify_prompt_list_changed().await,
            });
        }
        for sink in self.modern() {
            self.count(match list {
                DemoList::Tools => sink.notify_tool_list_changed().await,
                DemoList::Resources => sink.notify_resource_list_changed().await,
                DemoList::Prompts => sink.notify_prompt_list_changed().await,
            });
        }
    }

    /// Send `notifications/resources/updated` for `uri` to every stream subscribed
    /// to it, and to every Legacy session once some Legacy client subscribed to it
    /// (the set is shared: the demo's Legacy client is one gateway).
    pub async fn resource_updated(&self, uri: &str) {
        let subscribed = lock(&self.hub.subscribed).contains(uri);
        for peer in self.legacy().into_iter().filter(|_| subscribed) {
            let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
            self.count(peer.notify_resource_updated(param).await);
        }
        for sink in self.modern() {
            self.count(sink.notify_resource_updated(uri).await);
        }
    }

    fn legacy(&self) -> Vec<rmcp::Peer<rmcp::RoleServer>> {
        lock(&self.hub.legacy).clone()
    }

    fn modern(&self) -> Vec<rmcp::service::SubscriptionSink> {
        lock(&self.hub.modern)
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect()
    }

    /// Count a notification that went out (a sink that filtered it out counts too).
    fn count<E>(&self, sent: Result<(), E>) {
        if sent.is_ok() {
            self.hub
                .sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Notifications sent so far.
    pub fn sent(&self) -> u64 {
        self.hub.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The URIs Legacy clients are subscribed to (`resources/subscribe` minus
    /// `resources/unsubscribe`).
    pub fn subscribed(&self) -> Vec<String> {
        lock(&self.hub.subscribed).iter().cloned().collect()
    }

    /// Registered Modern listen streams subscribed to `uri`. rmcp acknowledges a
    /// listen stream before it hands it to this server, so a stream can be
    /// acknowledged and not registered yet.
    pub fn listening_to(&self, uri: &str) -> usize {
        lock(&self.hub.modern)
            .iter()
            .filter(|(_, sink)| {
                sink.accepted()
                    .resource_subscriptions
                    .iter()
                    .flatten()
                    .any(|u| u == uri)
            })
            .count()
    }

    /// Open Modern listen streams (those still registered).
    pub fn listeners(&self) -> usize {
        lock(&self.hub.modern).len()
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
